"""Properties over generated inputs (hypothesis; docs/reliability.md "Inputs tried").

Profiles are in conftest.py: a few dozen examples per property in CI, 10,000 with
``HYPOTHESIS_PROFILE=bench``. tests/test_scrub.py holds seeded random properties and the
reference simulation of the scrubbing rule used here.
"""

import json
import string

import httpx
import pytest
from hypothesis import assume, given, strategies as st

from conftest import runs_of
from llm_accounts.declarations import _parse_dotenv, load_declaration
from llm_accounts.errors import AccountsError
from llm_accounts.wire.events import StreamReader
from llm_accounts.wire.scrub import MASK, StreamScrubber
from llm_accounts.wire.sse import sse_lines
from test_scrub import expected_stream, stream, view

KEY_ALPHABET = string.ascii_letters + string.digits + "-_"
FIELDS = (
    "name", "key_env", "budget_usd", "daily_budget_usd", "rank", "weight", "models", "clients", "clients_only",
    "admin_key_env", "api_key_id", "dedicated_key", "warn_at",
)

# --- Declarations and dotenv: only AccountsError, and never the value --------------------------

# A value the parsers must never repeat: letters and digits no rule text holds ("Qz" + 10).
markers = st.text(alphabet=string.ascii_letters + string.digits, min_size=10, max_size=10).map(lambda s: "Qz" + s)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), markers,
    st.sampled_from(["alpha", "WORK_KEY", "1.00", "0", "-1", "1e3", "0.0000000001", "sk-ant-x", ""]),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(markers, st.sampled_from(FIELDS)), inner, max_size=4)), max_leaves=12)
account_objects = st.dictionaries(st.one_of(st.sampled_from(FIELDS), markers), json_values, max_size=len(FIELDS) + 1)


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield name
            yield from strings_in(item)


def assert_clean(error, secrets):
    message = str(error)
    assert len(message.splitlines()) == 1
    for secret in secrets:
        assert secret not in message


@given(st.one_of(st.lists(account_objects, max_size=4), json_values))
def test_a_declaration_of_any_shape_parses_or_refuses_without_repeating_a_value(tmp_path_factory, value):
    secrets = [s for s in strings_in(value) if s.startswith("Qz")]
    text = json.dumps(value)
    try:
        load_declaration(environ={"ANTHROPIC_ACCOUNTS": text}, cwd=tmp_path_factory.getbasetemp())
    except AccountsError as error:
        assert_clean(error, secrets)


@given(st.text(max_size=300), markers)
def test_declaration_text_of_any_bytes_parses_or_refuses_without_repeating_it(tmp_path_factory, text, marker):
    text = text + marker  # whatever the text, it ends with a value that must not come back
    try:
        load_declaration(environ={"ANTHROPIC_ACCOUNTS": text}, cwd=tmp_path_factory.getbasetemp())
    except AccountsError as error:
        assert_clean(error, [marker])


dotenv_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
dotenv_lines = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", dotenv_names, markers),
    st.builds(lambda n, v: f"export {n}='{v}'", dotenv_names, markers),
    st.builds(lambda n, v: f'{n}="{v}\\n"', dotenv_names, markers),
    st.builds(lambda n, v: f'{n}="{v}', dotenv_names, markers),  # an unclosed quote
    st.builds(lambda n, v: f"{n}='{v}", dotenv_names, markers),
    st.builds(lambda v: f"{v} # no equals sign", markers),
    st.builds(lambda v: f"=={v}", markers),
    st.builds(lambda v: f"# {v}", markers),
    st.text(max_size=40),
)


@given(st.lists(dotenv_lines, max_size=8), st.sampled_from(["\n", "\r\n"]))
def test_a_dotenv_file_of_any_lines_parses_or_refuses_without_repeating_a_value(lines, newline):
    text = newline.join(lines)
    secrets = [word for line in lines for word in line.replace("'", " ").replace('"', " ").replace("=", " ").split()
               if word.startswith("Qz")]
    try:
        values = _parse_dotenv(text, ".env")
    except AccountsError as error:
        assert_clean(error, [s[:12] for s in secrets])
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())


@given(st.dictionaries(dotenv_names, st.text(alphabet=string.ascii_letters + string.digits + "-_.:/+", max_size=30), max_size=6),
       st.sampled_from(["{n}={v}", "export {n}={v}", "{n}='{v}'", '{n}="{v}"', "{n} = {v}  # comment"]))
def test_a_dotenv_value_reads_back_unchanged_in_every_quoting(values, form):
    text = "\n".join(form.format(n=name, v=value) for name, value in values.items())
    assert _parse_dotenv(text, ".env") == values


def test_an_empty_unquoted_dotenv_value_before_a_comment_is_empty():
    # Found by the property above: the blanks after "=" were skipped before the comment rule.
    assert _parse_dotenv("A =   # comment", ".env") == {"A": ""}


def test_a_hash_right_after_the_equals_sign_is_part_of_the_value():
    assert _parse_dotenv("A=#not-a-comment", ".env") == {"A": "#not-a-comment"}


# --- The stream scrubber ----------------------------------------------------------------------

CHANNELS = ("text", "reasoning", "tool_args:toolu_1", "citation")
keys = st.one_of(
    st.text(alphabet=KEY_ALPHABET, min_size=20, max_size=60).map(lambda body: "sk-ant-api03-" + body),
    st.text(alphabet=KEY_ALPHABET, min_size=8, max_size=40),  # no public prefix
    st.text(alphabet=KEY_ALPHABET, min_size=1, max_size=7),  # shorter than a run
)
filler = st.text(alphabet=string.ascii_letters + string.digits + "-_ .,\n" + "é“”\u2028", max_size=30)


@st.composite
def stream_pieces(draw, key, with_key=True):
    """Text mixing filler and pieces of ``key``, cut into pieces on random channels, with pauses."""
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        parts.append(draw(filler))
        if with_key and draw(st.booleans()):
            start = draw(st.integers(0, len(key) - 1))
            parts.append(key[start : start + draw(st.integers(1, len(key)))])
    text = "".join(parts)
    pieces, at = [], 0
    while at < len(text):
        size = draw(st.integers(1, 40))
        pieces.append((draw(st.sampled_from(CHANNELS)), text[at : at + size]))
        at += size
        pause = draw(st.sampled_from(["none", "none", "none", "all", "one"]))
        if pause == "all":
            pieces.append(None)
        elif pause == "one":
            pieces.append((draw(st.sampled_from(CHANNELS)),))
    return pieces


@given(st.data(), keys)
def test_no_run_of_the_key_escapes_any_join_whatever_the_pieces(data, key):
    out = stream(StreamScrubber(key), data.draw(stream_pieces(key)))
    for channel in (None,) + CHANNELS:
        shown = view(out, channel).replace(MASK, "\0")  # the marker may hold a key shorter than eight
        assert not any(run in shown for run in runs_of(key, min(8, len(key))))


@given(st.data(), keys)
def test_the_scrubber_releases_what_the_rule_says_event_by_event(data, key):
    pieces = data.draw(stream_pieces(key))
    events = []
    scrubber = StreamScrubber(key)
    for piece in pieces:
        events.append(scrubber.pause() if piece is None else scrubber.pause(piece[0]) if len(piece) == 1 else scrubber.feed(*piece))
    events.append(scrubber.flush())
    assert events == expected_stream(pieces, key)


@given(st.data(), st.text(alphabet=string.ascii_letters + string.digits, min_size=30, max_size=50))
def test_key_free_text_streams_unchanged_on_every_channel(data, body):
    key = "sk-ant-api03-" + body
    pieces = data.draw(stream_pieces(key, with_key=False))
    fed = [piece for piece in pieces if piece is not None and len(piece) == 2]
    joins = ["".join(t for _, t in fed)] + ["".join(t for ch, t in fed if ch == c) for c in CHANNELS]
    assume(not any(run in join for join in joins for run in runs_of(key)))
    out = stream(StreamScrubber(key), pieces)
    assert view(out) == joins[0]
    for channel, join in zip(CHANNELS, joins[1:]):
        assert view(out, channel) == join


# --- The SSE path: real stand-in streams, any chunking, any line ending -------------------------

STREAM_KEY = "sk-ant-api03-" + "Pq7" * 30 + "AA"
PROMPTS = {
    "plain": {"messages": [{"role": "user", "content": "Say hello in a few words"}]},
    "unicode": {"messages": [{"role": "user", "content": "naïve café 🙂 “quotes” — dash"}]},
    "line separators": {"messages": [{"role": "user", "content": "one\u2028two\u2029three\x85four"}]},
    "thinking": {"messages": [{"role": "user", "content": "Think first"}],
                 "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
    "tool": {"messages": [{"role": "user", "content": "Weather in Paris?"}],
             "tools": [{"name": "weather", "description": "d", "input_schema": {
                 "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
             "tool_choice": {"type": "tool", "name": "weather"}},
}


@pytest.fixture(scope="module")
def real_streams():
    """The raw bytes of stand-in streams: each prompt above, and a stream broken by an error event."""
    from llm_accounts.standin import StandIn

    streams = {}
    config = {"keys": [{"label": "a", "key": STREAM_KEY}, {"label": "b", "key": STREAM_KEY[::-1], "behaviour": "stream_error"}]}
    with StandIn(config) as server:
        with httpx.Client(base_url=server.base_url) as client:
            for name, body in [*PROMPTS.items(), ("error event", PROMPTS["plain"])]:
                key = STREAM_KEY[::-1] if name == "error event" else STREAM_KEY
                request = {"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": True, **body}
                response = client.post("/v1/messages", json=request, headers={
                    "x-api-key": key, "anthropic-version": "2023-06-01"})
                assert response.status_code == 200
                streams[name] = response.content
    return streams


def read_stream(chunks):
    """The product's path: the lines of a chunked body (wire.sse_lines, as llm_accounts.models
    reads them) into a StreamReader."""
    reader = StreamReader(STREAM_KEY)
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(chunks))
    events = []
    for line in sse_lines(response.iter_bytes()):
        events += [(e.type, e.chunk, e.part_index, json.dumps(e.provider_metadata, sort_keys=True) if getattr(e, "provider_metadata", None) else None)
                   for e in reader.feed(line)]
        if reader.done:
            break
    events += [(e.type, e.chunk, e.part_index, None) for e in reader.finish()]
    return events, reader.final_message(), reader.complete, reader.malformed


def spec_events(data):
    """The stream's events as the SSE rules read them: lines end at CRLF, LF or CR only."""
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    events = []
    for block in text.split("\n\n"):
        payload = "\n".join(line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:"))
        if payload:
            events.append(json.loads(payload))
    return events


def sent_text(data):
    return "".join(e["delta"].get("text", "") for e in spec_events(data) if e.get("type") == "content_block_delta")


@given(st.data(), st.sampled_from(sorted([*PROMPTS, "error event"])), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_chunking_and_line_ending_of_a_real_stream_gives_the_same_events(real_streams, data, name, ending):
    original = real_streams[name]
    reference = read_stream([original])
    body = original.replace(b"\n", ending)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=40)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if body[a:b]]
    assert read_stream(chunks) == reference


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_a_real_stream_reads_as_the_sse_rules_read_it(real_streams, name):
    events, message, complete, malformed = read_stream([real_streams[name]])
    assert (complete, malformed) == (True, None)
    text = "".join(block.get("text", "") for block in message["content"] if block.get("type") == "text")
    assert text == sent_text(real_streams[name])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_streamed_answer_holding_unicode_line_separators_settles_complete(accounts, ledger_path, use_async):
    """U+2028, U+2029 and U+0085 need no escape in JSON, so a real stream's data line may hold
    them; only CR and LF end an SSE line (found by the chunking property above)."""
    import asyncio

    import llm

    from routed_helpers import attempts

    prompt = "one\u2028two\u2029three\x85four"
    if use_async:
        async def ask():
            response = llm.get_async_model("claude-routed/claude-haiku-4-5").prompt(prompt)
            return "".join([chunk async for chunk in response])

        text = asyncio.run(ask())
    else:
        text = "".join(llm.get_model("claude-routed/claude-haiku-4-5").prompt(prompt))
    assert prompt in text
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "complete")
