"""A bounded read stays bounded once decoded: a gzip body a thousand times its size on the wire.

httpx decodes each raw read (up to 64 KiB) whole, so a 64 KiB gzip read of zeros becomes ~64 MB
in one chunk before any bound sees it. A refusal's body (64 KiB) and a count's answer (4 KiB)
are read decoded a bounded piece at a time (docs/errors.md "Provider text is dropped").
"""

import tracemalloc
import zlib

from hostile import MODEL, Reply, hostile_account  # noqa: F401
from routed_helpers import llm_cli

# Decoded size of the hostile bodies: ~32 KB of gzip on the wire.
DECODED = 32 * 1024 * 1024
# What reading a bounded body may cost in memory, far below one decoded raw read.
PEAK_LIMIT = 8 * 1024 * 1024


def gzip_bomb(prefix=b'{"type": "error", "error": {"type": "rate_limit_error", "message": "'):
    """A gzip body of ``DECODED`` bytes, built without holding them."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    parts, block = [compressor.compress(prefix)], b" " * (1024 * 1024)
    for _ in range(DECODED // len(block)):
        parts.append(compressor.compress(block))
    parts.append(compressor.flush())
    return b"".join(parts)


def peak_while(run):
    run()  # first-use imports and ledger setup outside the trace: traced, they take seconds
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_refusal_body_is_read_within_its_bound_once_decoded(hostile_account):
    body = gzip_bomb()
    hostile_account.answer = lambda request: Reply(400, {"content-encoding": "gzip"}, body)
    result, peak = peak_while(lambda: llm_cli("-m", MODEL, "Hello", "--no-stream", "--no-log"))
    assert "Error: request_rejected: " in result.output, result.output
    assert peak < PEAK_LIMIT, peak


def test_a_gzip_count_answer_is_read_within_its_bound_once_decoded(hostile_account):
    body = gzip_bomb(prefix=b'{"input_tokens": 1')
    hostile_account.answer = lambda request: Reply(200, {"content-encoding": "gzip"}, body)
    result, peak = peak_while(lambda: llm_cli("accounts", "count", "-m", MODEL, "Hello"))
    assert result.output.startswith("Error: provider_error: "), result.output
    assert peak < PEAK_LIMIT, peak


def test_an_async_gzip_refusal_body_is_read_within_its_bound_once_decoded(hostile_account):
    import asyncio

    import llm
    import pytest

    from llm_accounts.errors import AccountsError

    body = gzip_bomb()
    hostile_account.answer = lambda request: Reply(400, {"content-encoding": "gzip"}, body)

    async def run():
        return await llm.get_async_model(MODEL).prompt("Hello", stream=False).text()

    def prompt():
        with pytest.raises(AccountsError) as caught:
            asyncio.run(run())
        return caught.value

    error, peak = peak_while(prompt)
    assert error.code == "request_rejected"
    assert peak < PEAK_LIMIT, peak
