"""A 200 answer is read within a bound on its decoded bytes: a whole answer, one line of a stream,
a page of the model list and of the Admin API usage report (docs/errors.md "Answers past their
bound").

gzip makes a body a thousand times larger once decoded. An answer past its bound is not parsed:
the request was processed and may be billed, and no complete usage came back, so the attempt
stays open with its ceiling (``stream_truncated``) and the prompt ends with one coded line. The
bounds (64 MiB) are far above any real answer; the tests lower them to 1 MiB and send 32 MiB.
"""

import asyncio
import functools
import json
import zlib

import httpx
import pytest

from hostile import MODEL, Reply, hostile_account, message, sse, text_stream  # noqa: F401
from routed_helpers import attempts, llm_cli
from test_decoded_bounds import peak_while

BOUND = 1024 * 1024
DECODED = 32 * 1024 * 1024
PEAK_LIMIT = 8 * 1024 * 1024


@pytest.fixture(autouse=True)
def small_bounds(monkeypatch):
    from llm_accounts.wire import sse, transport

    monkeypatch.setattr(transport, "ANSWER_LIMIT", BOUND, raising=False)
    monkeypatch.setattr(sse, "LINE_LIMIT", BOUND, raising=False)


@functools.cache
def gzipped(prefix, filler=b" "):
    """``prefix`` then ``filler`` up to ``DECODED`` bytes, gzip-encoded without holding them."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    parts, block = [compressor.compress(prefix)], filler * (1024 * 1024)
    for _ in range(DECODED // len(block)):
        parts.append(compressor.compress(block))
    parts.append(compressor.flush())
    return b"".join(parts)


def whole_bomb():
    # A well-formed message and then whitespace, which JSON allows: read in full, it would parse.
    body = json.dumps(message([{"type": "text", "text": "Hello from a huge answer."}])).encode()
    return Reply(200, {"content-encoding": "gzip"}, gzipped(body))


def endless_line_bomb():
    # A stream whose second event's data line never ends.
    start = sse(text_stream()[:1])
    return Reply(200, {"content-encoding": "gzip"}, gzipped(start + b'event: content_block_start\ndata: {"type": '))


def assert_open_with_its_ceiling(ledger_path):
    rows = attempts(ledger_path)  # one per run: peak_while runs the prompt twice
    assert [(row["state"], row["outcome"], row["cost_nusd"]) for row in rows] == [("open", "stream_truncated", None)] * 2
    assert all(row["ceiling_nusd"] > 0 for row in rows)


def test_a_whole_answer_past_its_bound_is_not_read_and_its_attempt_stays_open(hostile_account, ledger_path):
    hostile_account.answer = lambda request: whole_bomb()
    result, peak = peak_while(lambda: llm_cli("-m", MODEL, "Hello", "--no-stream", "--no-log"))
    assert "Error: provider_error: " in result.output and "passed its bound" in result.output, result.output[:300]
    assert "Hello from a huge answer" not in result.output
    assert peak < PEAK_LIMIT, peak
    assert_open_with_its_ceiling(ledger_path)


def test_an_async_whole_answer_past_its_bound_is_not_read_and_its_attempt_stays_open(hostile_account, ledger_path):
    hostile_account.answer = lambda request: whole_bomb()
    error, peak = peak_while(lambda: async_prompt_error(stream=False))
    assert error.code == "provider_error" and "passed its bound" in str(error), str(error)[:300]
    assert peak < PEAK_LIMIT, peak
    assert_open_with_its_ceiling(ledger_path)


def test_a_stream_line_past_its_bound_ends_the_stream_and_its_attempt_stays_open(hostile_account, ledger_path):
    hostile_account.answer = lambda request: endless_line_bomb()
    result, peak = peak_while(lambda: llm_cli("-m", MODEL, "Hello", "--no-log"))
    assert "Error: provider_error: " in result.output and "passed its bound" in result.output, result.output[:300]
    assert peak < PEAK_LIMIT, peak
    assert_open_with_its_ceiling(ledger_path)


def test_an_async_stream_line_past_its_bound_ends_the_stream_and_its_attempt_stays_open(hostile_account, ledger_path):
    hostile_account.answer = lambda request: endless_line_bomb()
    error, peak = peak_while(lambda: async_prompt_error(stream=True))
    assert error.code == "provider_error" and "passed its bound" in str(error), str(error)[:300]
    assert peak < PEAK_LIMIT, peak
    assert_open_with_its_ceiling(ledger_path)


def async_prompt_error(stream):
    """The ``AccountsError`` an async routed prompt raises."""
    import llm

    from llm_accounts.errors import AccountsError

    async def run():
        return await llm.get_async_model(MODEL).prompt("Hello", stream=stream).text()

    with pytest.raises(AccountsError) as caught:
        asyncio.run(run())
    return caught.value


def gzip_client(prefix):
    body = gzipped(prefix)

    def answer(request):
        return httpx.Response(200, headers={"content-encoding": "gzip", "content-type": "application/json"}, content=iter([body]))

    return httpx.Client(transport=httpx.MockTransport(answer))


def test_a_model_list_past_its_bound_is_one_coded_line_and_nothing_is_kept(canary_key):
    from llm_accounts import catalog, keys
    from llm_accounts.errors import AccountsError

    page = b'{"data": [{"id": "claude-haiku-4-5"}], "has_more": false}'
    with gzip_client(page) as http:
        (error, peak) = peak_while(lambda: _raised(lambda: catalog.fetch_model_ids(keys.Secret(canary_key), http, "http://127.0.0.1:9")))
    assert error.code == "provider_error" and "passed its bound" in str(error), str(error)
    assert peak < PEAK_LIMIT, peak


def test_a_usage_report_past_its_bound_is_one_coded_line(canary_key):
    import datetime as dt

    from llm_accounts import keys
    from llm_accounts.provider import client as admin_api

    page = b'{"data": [], "has_more": false}'
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with gzip_client(page) as http:
        run = lambda: _raised(lambda: admin_api.usage_minutes(http, "http://127.0.0.1:9", keys.Secret(canary_key), start, start + dt.timedelta(hours=1), "apikey_01a"))  # noqa: E731
        (error, peak) = peak_while(run)
    assert error.code == "provider_error" and "passed its bound" in str(error), str(error)
    assert peak < PEAK_LIMIT, peak


def _raised(fn):
    from llm_accounts.errors import AccountsError

    with pytest.raises(AccountsError) as caught:
        fn()
    return caught.value
