"""Server tools priced by their documented bounds (docs/pricing.md "Server tools").

A server tool runs at the provider, inside the request: the API samples, runs the tool, puts the
result in the context and samples again, until the model stops calling server tools or the
server-side loop reaches its iteration limit (``stop_reason: pause_turn``). Two things are billed
beyond one sampling's tokens, and a ceiling must bound both before sending:

- **fees per use**: a web search costs a fixed fee whatever it returns (a failed search is not
  billed). Uses are bounded only by the tool's ``max_uses``: a tool whose use carries a fee and
  whose definition has no ``max_uses`` is refused before sending, naming the field to add;
- **tokens per iteration**: every iteration reads the whole context so far (each tool result
  re-enters it as input tokens) and writes up to ``max_tokens``. One iteration's input is bounded
  by the context window, and the documented loop limit (``ITERATIONS``) bounds the iterations.
  ``max_uses`` does not bound them: a call past ``max_uses`` gets a ``max_uses_exceeded`` error
  result and the model samples again.

So a request with server tools is priced at ``ITERATIONS`` times the ceiling of one sampling, plus
each fee-bearing tool's ``max_uses`` times its fee. A tool type whose cost has no documented bound
(code execution is billed by container time) is refused, and so is every type not listed here.

Pure logic: the request and the revision's fees in, bounds or a refusal out.
"""

from dataclasses import dataclass

from ..errors import AccountsError

# "The default limit is 10 iterations per request" (Handling stop reasons, pause_turn).
ITERATIONS = 10

# Accepted tool types and the usage.server_tool_use count each one's uses are reported in. The
# dynamic-filtering versions (web_search_20260209 and later) run code execution inside the tool,
# whose usage this table does not price yet; they are refused with the version to use instead.
COUNTS = {
    "web_search_20250305": "web_search_requests",
    "web_fetch_20250910": "web_fetch_requests",
}
BASIC_VERSION = {"web_search": "web_search_20250305", "web_fetch": "web_fetch_20250910"}
# Server tools whose documentation gives no per-request bound: what is missing, said once.
UNBOUNDED = {
    "code_execution": "code execution is billed by container time (a 5-minute minimum, then per hour), "
    "and nothing in a request bounds that time",
    "mcp_toolset": "the MCP connector runs tools on a remote server, and nothing in a request bounds their calls",
    "tool_search_tool": "tool search has no documented per-request bound",
}


@dataclass(frozen=True)
class Bounds:
    """What a request's server tools can add: the most uses of each count (None when its uses
    carry no fee and are not bounded by the request), and the fees those uses can cost."""

    max_uses: dict  # usage count name -> max uses, or None
    fees_nusd: int

    @property
    def any(self):
        return bool(self.max_uses)


NONE = Bounds({}, 0)


def _refuse(where, rule, revision_id):
    raise AccountsError("unsupported_pricing", f"{where}: {rule} (price revision {revision_id})")


def is_server_tool(tool):
    """A tool definition the client does not run: one with a ``type`` other than ``custom``."""
    return isinstance(tool, dict) and tool.get("type") not in (None, "custom")


def bounds(tools, fees, revision_id):
    """The ``Bounds`` of a request's ``tools`` under a revision's ``fees`` (nanodollars per use,
    by usage count name), or ``unsupported_pricing`` naming the tool and what to set."""
    max_uses, total = {}, 0
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        if not is_server_tool(tool):
            continue
        where = f"tools[{index}]"
        kind = tool.get("type")
        count = COUNTS.get(kind)
        if count is None:
            _refuse(where, _unaccepted(kind), revision_id)
        # Named by its accepted type, never by the request's own text (docs/errors.md).
        name = kind.rsplit("_", 1)[0]
        if count not in fees:
            _refuse(where, f"{name} ({kind}) has no fee in this price revision, so it is not priced", revision_id)
        uses = tool.get("max_uses")
        if uses is not None and (isinstance(uses, bool) or not isinstance(uses, int) or uses <= 0):
            _refuse(f"{where}.max_uses", "must be a positive integer", revision_id)
        if uses is None and fees[count]:
            _refuse(
                where,
                f"{name} needs max_uses: add it to the tool definition (for example WebSearch(max_uses=5)); "
                "each use is billed and nothing else bounds how many there are",
                revision_id,
            )
        if uses is not None:
            max_uses[count] = (max_uses.get(count) or 0) + uses
            total += uses * fees[count]
        else:
            max_uses.setdefault(count, None)
    return Bounds(max_uses, total)


def _unaccepted(kind):
    """Why a tool type is refused, naming its family, never repeating the type itself (request
    text, which could hold anything)."""
    if not isinstance(kind, str):
        return "a server tool's type must be a string"
    for prefix, version in BASIC_VERSION.items():
        if kind.startswith(prefix + "_"):
            return (
                f"this {prefix} version is not priced (the newer versions filter results by running code "
                f"execution inside the tool); use {version}"
            )
    for prefix, why in UNBOUNDED.items():
        if kind.startswith(prefix):
            return f"{prefix} cannot be priced: {why}; remove the tool"
    return f"server tools other than {', '.join(COUNTS)} are not priced; use client tools"


def fees_due(server_tool_use, fees):
    """The fees a usage's ``server_tool_use`` counts bill, or None when a non-zero count has no
    fee in the revision (a billing dimension it cannot price). Counts are checked by the caller."""
    if server_tool_use is None:
        return 0
    total = 0
    for name, value in server_tool_use.items():
        if not value:
            continue
        if name not in fees:
            return None
        total += value * fees[name]
    return total


def overrun(server_tool_use, request_bounds):
    """The usage count names whose uses exceed the request's bound: usage no request could have
    caused (a count of a tool the request did not carry has the bound 0)."""
    if not isinstance(server_tool_use, dict):
        return []
    over = []
    for name, value in server_tool_use.items():
        if type(value) is not int or value <= 0:
            continue
        if name not in request_bounds.max_uses:
            over.append(name)
        elif request_bounds.max_uses[name] is not None and value > request_bounds.max_uses[name]:
            over.append(name)
    return over
