"""A hostile Messages API on loopback: it answers with whatever bytes a test scripts.

The stand-in follows the documented API; this server does not. Each ``POST /v1/messages`` is
answered by the test's ``answer(request)``, which returns a ``Reply`` (status, headers, body
bytes). Helpers build SSE streams and messages, and write a key with some characters as JSON
``\\u00XX`` escapes, so a scrubber that matches raw JSON text misses it.

``hostile_account`` declares one account, ``alpha``, whose key is the ``canary_key`` fixture, on
a ``Hostile`` server (set its ``answer``). Import it into a test module to use it.
"""

import http.server
import json
import threading
from dataclasses import dataclass, field

import pytest

MODEL = "claude-routed/claude-haiku-4-5"
SERVED = "claude-haiku-4-5"


@dataclass
class Reply:
    status: int = 200
    headers: dict = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Request:
    body: dict
    headers: dict

    @property
    def stream(self):
        return self.body.get("stream") is True

    @property
    def has_tool_result(self):
        content = self.body["messages"][-1].get("content")
        return isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        )


class Hostile:
    def __init__(self):
        self.answer = lambda request: Reply(500, {}, b"{}")
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {name.lower(): value for name, value in self.headers.items() if name.lower() != "x-api-key"}
                request = Request(body, headers)
                outer.requests.append(request)
                reply = outer.answer(request)
                self.send_response(reply.status)
                content_type = "text/event-stream" if request.stream else "application/json"
                sent = {"content-type": content_type, **reply.headers}
                for name, value in sent.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(reply.body)
                self.close_connection = True

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def hostile_account(canary_key, user_path, ledger_path, monkeypatch):
    """One declared account, alpha, signing with ``canary_key``, on a fresh ``Hostile`` server."""
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.money import NANO

    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    with Hostile() as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        yield server


# --- Bytes ------------------------------------------------------------------------------------


def escaped(text, every=4):
    """``text`` as the inside of a JSON string literal, every ``every``-th character a \\u00XX escape."""
    out = []
    for i, char in enumerate(text):
        out.append("\\u%04x" % ord(char) if i % every == every - 1 else json.dumps(char)[1:-1])
    return "".join(out)


def literal(text, every=4):
    """A JSON string literal of ``text`` with escapes, as raw JSON text."""
    return '"' + escaped(text, every) + '"'


def sse(events):
    """An SSE body: each item a dict (sent as JSON) or a str (sent as the raw data line)."""
    out = []
    for item in events:
        data = item if isinstance(item, str) else json.dumps(item)
        name = item.get("type", "message") if isinstance(item, dict) else "message"
        out.append(f"event: {name}\ndata: {data}\n\n")
    return "".join(out).encode("utf-8")


def usage(input_tokens=12, output_tokens=7, **extra):
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, **extra}


def message(content, *, id="msg_01hostile", model=SERVED, stop_reason="end_turn", stop_sequence=None, usage=None):
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage if usage is not None else globals()["usage"](),
    }


def text_stream(text="Hello from a hostile provider.", *, id="msg_01hostile", model=SERVED, stop_reason="end_turn",
                stop_sequence=None, start_usage=None, final_usage=None):
    """The events of a streamed text reply, as a list (edit it before ``sse``)."""
    start = message([], id=id, model=model, stop_reason=None, usage=start_usage or usage(output_tokens=1))
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:10]}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[10:]}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": final_usage or {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]


def tool_stream(tool_id, name, partial_json_pieces, *, text=None):
    """A streamed tool_use reply; ``partial_json_pieces`` are raw JSON text, sent as they are."""
    start = message([], stop_reason=None, usage=usage(output_tokens=1))
    events = [{"type": "message_start", "message": start}]
    index = 0
    if text is not None:
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": 0},
        ]
        index = 1
    events.append(
        {"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}}
    )
    for piece in partial_json_pieces:
        # The piece goes on the wire as written: its escapes must reach the client undecoded.
        events.append(
            '{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}'
            % (index, json.dumps(piece))
        )
    events += [
        {"type": "content_block_stop", "index": index},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]
    return events


def json_reply(value, headers=None):
    return Reply(200, dict(headers or {}), json.dumps(value).encode("utf-8"))


def raw_reply(body, headers=None):
    return Reply(200, dict(headers or {}), body if isinstance(body, bytes) else body.encode("utf-8"))


HOLE = "KEYHOLE"


def fill(data, key, every=4):
    """``data`` (bytes) with every ``HOLE`` replaced by ``key`` written with JSON escapes: put
    ``HOLE`` inside a JSON string, and the string decodes to text holding the key."""
    return data.replace(HOLE.encode(), escaped(key, every).encode())


def text_reply(stream, *, headers=None, usage=None, **fields):
    """A plain text answer, streamed or not; ``usage`` is the final usage, ``fields`` as for
    ``message`` (id, model, stop_reason, stop_sequence) plus ``text``."""
    final = usage if usage is not None else globals()["usage"]()
    if stream:
        return raw_reply(sse(text_stream(start_usage=final, final_usage=final, **fields)), headers)
    text = fields.pop("text", "Hello from a hostile provider.")
    return json_reply(message([{"type": "text", "text": text}], usage=final, **fields), headers)
