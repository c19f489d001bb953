"""Server tools in the stand-in: one web search or web fetch per request, answered in the real
shapes (reference anthropic-api.md sections 2.1 and 3.2).

A request whose ``tools`` hold a ``web_search_*`` (else a ``web_fetch_*``) tool gets, before its
text: a ``server_tool_use`` block (its input streamed as ``input_json_delta``), then the result
block (``web_search_tool_result`` with ``encrypted_content`` per result, or
``web_fetch_tool_result``), and its text carries a citation (``web_search_result_location``,
streamed as a ``citations_delta`` before the text deltas). Usage reports
``server_tool_use.web_search_requests`` (or ``web_fetch_requests``), and the result's tokens are
added to ``input_tokens``, as a second sampling reads them.

``echo`` (the echo_key behaviour) puts the request's key in the result's title, URL and
encrypted content and in the citation's quoted text; ``extra_uses`` reports that many uses more
than happened (the search_overrun behaviour: usage above the tool's ``max_uses``).
"""

import base64
import hashlib
import json

from .blocks import Block, pieces
from .tokens import json_tokens

COUNTS = {"web_search": "web_search_requests", "web_fetch": "web_fetch_requests"}
URL = "https://example.com/stand-in/answer"


def server_tool(body):
    """The first web search tool of the request, else its first web fetch tool, else None."""
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict) and isinstance(tool.get("type"), str)]
    for prefix in COUNTS:
        for tool in tools:
            if tool["type"].startswith(prefix + "_"):
                return prefix, tool
    return None


def plan_uses(body, query, new_id, echo=None, extra_uses=0):
    """``(blocks, citation, server_tool_use, input_tokens)`` for a request with a server tool, or
    None: the call and result blocks, the citation its text carries, usage's counts and the input
    tokens the result adds."""
    found = server_tool(body)
    if found is None:
        return None
    kind, tool = found
    ident = new_id("srvtoolu")
    name = tool.get("name") or kind
    arguments = {"query": query} if kind == "web_search" else {"url": URL}
    encoded = json.dumps(arguments, ensure_ascii=False)
    call = Block(
        {"type": "server_tool_use", "id": ident, "name": name, "input": arguments},
        {"type": "server_tool_use", "id": ident, "name": name, "input": {}},
        [{"type": "input_json_delta", "partial_json": part} for part in ["", *pieces(encoded)]],
    )
    title = "Stand-in result" if echo is None else f"Stand-in result quoting {echo}"
    url = URL if echo is None else f"{URL}?q={echo}"
    quoted = "A stand-in page that answers the question." if echo is None else f"The key was {echo}."
    secret = hashlib.sha256(f"{query}:{title}".encode("utf-8")).digest()
    encrypted = "Eu" + base64.b64encode(secret * 4).decode("ascii") + ("" if echo is None else echo)
    if kind == "web_search":
        content = [{"type": "web_search_result", "title": title, "url": url, "encrypted_content": encrypted, "page_age": "2 days ago"}]
        citation = {
            "type": "web_search_result_location",
            "cited_text": quoted,
            "url": url,
            "title": title,
            "encrypted_index": "Eo" + base64.b64encode(secret).decode("ascii"),
        }
    else:
        content = {
            "type": "web_fetch_result",
            "url": url,
            "content": {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": quoted}, "title": title},
            "retrieved_at": "2026-11-29T12:00:00Z",
        }
        citation = None
    result_block = {"type": f"{kind}_tool_result", "tool_use_id": ident, "content": content}
    result = Block(result_block, result_block, [])
    uses = {COUNTS[kind]: 1 + extra_uses}
    return [call, result], citation, uses, json_tokens(content)


def cite(block, citation):
    """The text ``block`` with ``citation``: in the final block, and as a citations_delta first."""
    if citation is None:
        return block
    return Block(
        {**block.final, "citations": [citation]},
        {**block.start, "citations": []},
        [{"type": "citations_delta", "citation": citation}, *block.deltas],
    )
