"""Price revisions, the worst-case ceiling and settlement from usage (docs/pricing.md "The price
revision", "Ceiling" and "Settlement cost").

A price revision is shipped data (``prices/<revision>.json``), or a file of the user's own read
the same way (``user_prices``; ``price_book`` decides which revision prices each model, docs/pricing.md
"Which price wins"): exact model ids and aliases, each
model's context window and maximum output, and five rates in integer nanodollars per token
(fresh input, 5-minute cache write, 1-hour cache write, cache read, output), optionally with a
long-context tier and data-residency multipliers (docs/pricing.md "Inference geo (data
residency)"). Nothing here guesses: a model or request feature the revision does not price
is refused before sending, and usage that cannot be priced exactly settles as ``None`` (the
ceiling stays open), never as zero.

Refusal messages name fields, paths and rules, never request content.
"""

import hashlib
import json
import math
import pathlib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from importlib import resources

from . import tool_bounds
from ..errors import AccountsError
from ..paths import FileProblem, read_limited

STATUSES = ("active", "deprecated", "retired")
RATE_NAMES = ("input", "write_5m", "write_1h", "cache_read", "output")

# Top-level request fields whose only cost is tokens, which the ceiling already bounds by the
# model's whole context window and the request's max_tokens. Anything else is a feature the
# revision does not price, refused before sending (docs/pricing.md "Refused before sending").
PRICED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "thinking",
        "output_config",
        "output_format",
        "cache_control",
        "service_tier",
        # Priced only on a model whose revision holds its geo multipliers, checked with the
        # model's price (request_geo_multiplier; docs/pricing.md "Inference geo (data residency)").
        "inference_geo",
    }
)
# Fields that carry a charge beyond tokens (or change the rates); named so the refusal says why.
UNPRICED_FIELDS = {
    "mcp_servers": "the MCP connector",
    "container": "code-execution containers",
    "context_management": "context management (context editing and compaction)",
    "speed": "fast mode (speed)",
    "requests": "Message Batches",
}
PRICED_SERVICE_TIERS = (None, "standard_only", "auto")
PRICED_BLOCK_TYPES = frozenset(
    {
        # A server tool's call and result replayed in a later turn: input tokens like any other.
        "server_tool_use",
        "web_search_tool_result",
        "web_search_result",
        "web_fetch_tool_result",
        "text",
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
    }
)
# A URL source is fetched by the provider and billed as input tokens like an inline one; a
# Files API source is not priced (docs/pricing.md "Refused before sending").
PRICED_SOURCE_TYPES = ("base64", "text", "url")
CACHE_TTLS = ("5m", "1h")

# Usage values that mean standard rates; anything else is an unknown rate modifier that keeps
# the attempt open (docs/pricing.md "What keeps an attempt open").
STANDARD_SPEEDS = (None, "standard")
STANDARD_SERVICE_TIERS = (None, "standard")
# The standard routing: billed at the model's own rates (a multiplier of 1). "not_available" is
# what a model without data residency reports (docs/pricing.md "Inference geo (data residency)").
STANDARD_INFERENCE_GEOS = (None, "not_available", "global")
# The geo a request names to ask for the standard routing explicitly.
GLOBAL_GEO = "global"

REVISION_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_FRACTION = re.compile(r"([0-9]+)/([1-9][0-9]*)")
# A geo name a revision may price ("us"), and its multiplier as a decimal string ("1.1").
_GEO_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MULTIPLIER = re.compile(r"[0-9]{1,3}(\.[0-9]{1,9})?")


@dataclass(frozen=True)
class Rates:
    """Nanodollars per token: an ``int``, or a ``Fraction`` when a rate is not whole."""

    input: int
    write_5m: int
    write_1h: int
    cache_read: int
    output: int

    def input_side(self, ttls=CACHE_TTLS):
        """The rates an input token can be billed at: fresh, read from the cache, and written
        for each TTL in ``ttls``, the TTLs the request's cache marks ask for (docs/pricing.md
        "Ceiling": the provider writes to the cache only at a request's own breakpoints)."""
        writes = {"5m": self.write_5m, "1h": self.write_1h}
        return (self.input, self.cache_read, *(writes[ttl] for ttl in CACHE_TTLS if ttl in ttls))


@dataclass(frozen=True)
class ModelPrice:
    id: str
    aliases: tuple[str, ...]
    display_name: str
    context_window: int
    max_output: int
    status: str  # "active" | "deprecated" | "retired" (kept to settle old attempts; never quoted)
    rates: Rates
    long_context: tuple[int, Rates] | None = None  # (threshold on total input tokens, rates above it)
    # Data residency: ((geo, multiplier), ...) sorted by geo, each multiplier an exact Fraction >= 1
    # applied to every token category (docs/pricing.md "Inference geo (data residency)"). Empty:
    # the model has only the standard routing, and a request naming a geo is not priced.
    inference_geo: tuple[tuple[str, Fraction], ...] = ()
    # A user revision's model priced at zero on purpose: only then may a rate be 0
    # (docs/pricing.md "Your own price revisions"; checked by user_prices).
    free: bool = False

    def rates_for(self, total_input_tokens):
        """The tier a request with this many input tokens (fresh + written + read) is billed at."""
        if self.long_context is not None and total_input_tokens > self.long_context[0]:
            return self.long_context[1]
        return self.rates

    def tiers_up_to(self, input_tokens):
        """Every tier a request of at most ``input_tokens`` input tokens can be billed at."""
        tiers = [self.rates]
        if self.long_context is not None and input_tokens > self.long_context[0]:
            tiers.append(self.long_context[1])
        return tiers

    @property
    def geo_multipliers(self):
        """``{geo: Fraction}`` of the geos this model prices beyond the standard routing."""
        return dict(self.inference_geo)


@dataclass(frozen=True)
class Revision:
    id: str  # a shipped id ("anthropic-2026-11-29"), or "user:<revision>" for a user's file
    read_on: str
    sources: tuple[str, ...]
    models: dict[str, ModelPrice]
    notes: tuple[str, ...] = ()
    # The date its prices apply from (a shipped revision's is its read_on), and whether a user
    # revision asks to replace shipped prices (docs/pricing.md "Your own price revisions").
    applies_from: str | None = None
    overrides_shipped: bool = False
    # Nanodollars per server-tool use, by usage.server_tool_use count name (docs/pricing.md
    # "Server tools"); a count not listed is not priced.
    server_tool_fees: dict = field(default_factory=dict)
    _names: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        names = {}
        for price in self.models.values():
            for name in (price.id, *price.aliases):
                if name in names:
                    raise ValueError(f"price revision {self.id}: model name {name} is listed twice")
                names[name] = price
        object.__setattr__(self, "_names", names)
        if self.applies_from is None:
            object.__setattr__(self, "applies_from", self.read_on)

    @property
    def is_user(self):
        return self.id.startswith(USER_PREFIX)

    def model(self, model_id):
        """The price for an exact model id or exact alias; never a prefix or substring match."""
        if not isinstance(model_id, str):
            return None
        return self._names.get(model_id)


@dataclass(frozen=True)
class Quote:
    requested_model: str
    ceiling_nusd: int
    price_revision: str
    request_digest: str
    cert: str | None = None  # warm-prefix certificate (docs/architecture.md "Warm prefixes")
    hour_after_key: bool = False
    # The worst case in billed tokens, for client token caps (docs/architecture.md "Client caps"):
    # the same input window the dollar ceiling prices (the model's context window) plus max_tokens.
    ceiling_tokens: int | None = None
    # The request's server tools (tool_bounds.Bounds): their usage counts and most uses. A request
    # with any sums several samplings in one usage (docs/architecture.md "Warm prefixes").
    tool_uses: tool_bounds.Bounds = tool_bounds.NONE
    # The most output tokens the request can be billed for: max_tokens per sampling. A usage
    # report's remainder above it is not this attempt's (docs/architecture.md "Settling from the provider").
    max_output: int | None = None

    @property
    def server_tools(self):
        return self.tool_uses.any


# Loading revisions ---------------------------------------------------------------------------


# A price file is refused whole, in one line naming the field's path and the rule it breaks, never
# its value (docs/pricing.md "Your own price revisions"): a user's file may hold anything, a pasted
# key included. The tables name every field a file may hold, with whether it is required; a field
# outside them is refused, so a typo never silently drops a price. A new optional field is one
# line here plus its reading below.
SHIPPED, USER = "shipped", "user"
USER_PREFIX = "user:"
REVISION_FIELDS = {
    # name: required in a shipped file, required in a user file
    "revision": (True, True),
    "read_on": (True, False),
    "applies_from": (False, True),
    "overrides_shipped": (False, False),
    "provider": (False, False),
    "unit": (False, False),
    "sources": (False, False),
    "notes": (False, False),
    "server_tool_fees": (False, False),  # docs/pricing.md "Server tools"
    "models": (True, True),
}
MODEL_FIELDS = {
    "id": True,
    "aliases": False,
    "display_name": False,
    "context_window": True,
    "max_output": True,
    "status": True,
    "rates": True,
    "long_context": False,
    "inference_geo": False,  # docs/pricing.md "Inference geo (data residency)"
    "free": False,
}
LONG_CONTEXT_FIELDS = {"above_input_tokens": True, "rates": True}
MAX_MODEL_ID_CHARS = 128  # as long as an id a model list may hold (catalog.MAX_ID_CHARS)
MAX_TEXT_CHARS = 1000
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class PriceFileError(ValueError):
    """A price file breaks a rule; ``str()`` names the field's path and the rule, never a value."""


def _fields(data, table, where, origin=SHIPPED):
    if not isinstance(data, dict):
        raise PriceFileError(f"{where or 'the file'}: must be a JSON object")
    where_shown = where or "top level"
    unknown = [name for name in data if name not in table]
    if unknown:
        # The name is not shown: it is the file's text, which may hold anything.
        raise PriceFileError(f"{where_shown}: {len(unknown)} unknown field(s); allowed: {', '.join(table)}")
    for name, required in table.items():
        if isinstance(required, tuple):
            required = required[origin == USER]
        if required and name not in data:
            raise PriceFileError(f"{_path(where, name)}: required")


def _path(where, name):
    return f"{where}.{name}" if where else name


def _rate(value, where):
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        match = _FRACTION.fullmatch(value)
        if match:
            rate = Fraction(int(match.group(1)), int(match.group(2)))
            return rate.numerator if rate.denominator == 1 else rate
    raise PriceFileError(
        f"{where}: a rate must be a non-negative integer of nanodollars per token ($1 per million "
        'tokens is 1000) or a string fraction "n/d"'
    )


def _rates(data, where):
    if not isinstance(data, dict) or set(data) != set(RATE_NAMES):
        raise PriceFileError(f"{where}: needs exactly the rates {', '.join(RATE_NAMES)}")
    return Rates(**{name: _rate(data[name], f"{where}.{name}") for name in RATE_NAMES})


def _positive_int(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PriceFileError(f"{where}: must be a positive integer")
    return value


def _text(value, where, limit=MAX_TEXT_CHARS):
    """A string shown to people: printable, bounded, and not holding the public start of an
    Anthropic key (docs/security.md "Price files")."""
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise PriceFileError(f"{where}: must be a printable string of 1 to {limit} characters")
    if looks_like_key(value):
        raise PriceFileError(f"{where}: must not hold an API key")
    return value


def looks_like_key(text):
    from ..wire.scrub import PUBLIC_PREFIX

    return PUBLIC_PREFIX in text.lower()


def _model_name(value, where):
    """A model id or alias: the id the provider lists, sent as the request's ``model`` and shown
    in ``claude-routed/<id>``."""
    _text(value, where, MAX_MODEL_ID_CHARS)
    if not value.isascii() or any(char.isspace() or char == "/" for char in value):
        raise PriceFileError(f"{where}: a model id is ASCII without spaces or '/'")
    return value


def _texts(value, where):
    if not isinstance(value, list):
        raise PriceFileError(f"{where}: must be a list of strings")
    return tuple(_text(item, f"{where}[{index}]") for index, item in enumerate(value))


def _date(value, where):
    import datetime as dt

    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            dt.date.fromisoformat(value)
            return value
        except ValueError:
            pass
    raise PriceFileError(f"{where}: must be a date YYYY-MM-DD")


def _model_price(data, where):
    _fields(data, MODEL_FIELDS, where)
    model_id = _model_name(data["id"], f"{where}.id")
    if data["status"] not in STATUSES:
        raise PriceFileError(f"{where}.status: must be one of {', '.join(STATUSES)}")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list):
        raise PriceFileError(f"{where}.aliases: must be a list of model ids")
    aliases = tuple(_model_name(alias, f"{where}.aliases[{index}]") for index, alias in enumerate(aliases))
    long_context = None
    if data.get("long_context") is not None:
        tier = data["long_context"]
        _fields(tier, LONG_CONTEXT_FIELDS, f"{where}.long_context")
        long_context = (
            _positive_int(tier["above_input_tokens"], f"{where}.long_context.above_input_tokens"),
            _rates(tier["rates"], f"{where}.long_context.rates"),
        )
    display_name = data.get("display_name")
    inference_geo = _geo_multipliers(data["inference_geo"], f"{where}.inference_geo") if "inference_geo" in data else ()
    free = data.get("free", False)
    if not isinstance(free, bool):
        raise PriceFileError(f"{where}.free: must be true or false")
    return ModelPrice(
        id=model_id,
        aliases=aliases,
        display_name=model_id if display_name is None else _text(display_name, f"{where}.display_name", 100),
        context_window=_positive_int(data["context_window"], f"{where}.context_window"),
        max_output=_positive_int(data["max_output"], f"{where}.max_output"),
        status=data["status"],
        rates=_rates(data["rates"], f"{where}.rates"),
        long_context=long_context,
        inference_geo=inference_geo,
        free=free,
    )


def _geo_multipliers(data, where):
    """``{"us": "1.1"}``: per geo a model prices, the multiplier its every token category is
    billed at there, as an exact decimal string (docs/pricing.md "Inference geo (data
    residency)"). The standard routing ("global", "not_available") is always 1 and is not listed.
    A multiplier below 1 is refused: no geo is billed below the standard rates, and a mistyped one
    ("0.11" for "1.1") would settle every answer there at a fraction of its bill, which no ceiling
    catches."""
    if not isinstance(data, dict) or not data:
        raise PriceFileError(f'{where}: must be a non-empty object of geo to multiplier, such as {{"us": "1.1"}}')
    multipliers = []
    for name, value in data.items():
        # The name is the file's text: it is shown only once it has the shape of a geo name.
        if not isinstance(name, str) or not _GEO_NAME.fullmatch(name) or looks_like_key(name):
            raise PriceFileError(f"{where}: each name must be a geo such as us (lower-case letters, digits, '_' or '-')")
        if name in STANDARD_INFERENCE_GEOS:
            raise PriceFileError(f"{where}.{name}: the standard routing is billed at the model's own rates and is not listed")
        if not isinstance(value, str) or not _MULTIPLIER.fullmatch(value) or Fraction(value) < 1:
            raise PriceFileError(
                f'{where}.{name}: a multiplier must be a decimal string of at least 1, such as "1.1" '
                "(at most 3 digits before the point and 9 after)"
            )
        multipliers.append((name, Fraction(value)))
    return tuple(sorted(multipliers))


def revision_from_dict(data, origin=SHIPPED):
    """Build a ``Revision`` from a parsed price file, checking every field and rate.

    A user's file (``origin=USER``) gets the id ``user:<revision>`` and needs ``applies_from``;
    a shipped one needs ``read_on``. Raises ``PriceFileError`` naming the first field that is
    wrong.
    """
    _fields(data, REVISION_FIELDS, "", origin)
    revision_id = data["revision"]
    if not isinstance(revision_id, str) or not REVISION_ID.fullmatch(revision_id) or looks_like_key(revision_id):
        raise PriceFileError("revision: must be a lower-case id of letters, digits and '-' such as 2026-12-05-mine")
    read_on = _date(data["read_on"], "read_on") if "read_on" in data else None
    applies_from = _date(data["applies_from"], "applies_from") if "applies_from" in data else read_on
    overrides = data.get("overrides_shipped", False)
    if not isinstance(overrides, bool):
        raise PriceFileError("overrides_shipped: must be true or false")
    for name in ("provider", "unit"):
        if name in data:
            _text(data[name], name)
    sources = _texts(data.get("sources", []), "sources")
    notes = _texts(data.get("notes", []), "notes")
    entries = data["models"]
    if not isinstance(entries, list) or not entries:
        raise PriceFileError("models: must be a non-empty list of models")
    models, seen = {}, {}
    for index, entry in enumerate(entries):
        where = f"models[{index}]"
        price = _model_price(entry, where)
        for position, name in enumerate((price.id, *price.aliases)):
            if name in seen:
                field_path = f"{where}.id" if position == 0 else f"{where}.aliases[{position - 1}]"
                raise PriceFileError(f"{field_path}: the same model name as {seen[name]}")
            seen[name] = f"models[{index}]"
        models[price.id] = price
    return Revision(
        id=(USER_PREFIX + revision_id) if origin == USER else revision_id,
        read_on=read_on or applies_from,
        sources=sources,
        models=models,
        notes=notes,
        applies_from=applies_from,
        overrides_shipped=overrides,
        server_tool_fees=_server_tool_fees(data.get("server_tool_fees"), "server_tool_fees"),
    )


_COUNT_NAME = re.compile(r"[a-z][a-z_]{0,62}_requests")


def _server_tool_fees(data, where):
    """``{"web_search_requests": 10000000, ...}``: integer nanodollars per use, by the
    usage.server_tool_use count that reports the uses; absent means no server tool is priced."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PriceFileError(f"{where}: must be an object of usage count name to nanodollars per use")
    fees = {}
    for name, value in data.items():
        if not _COUNT_NAME.fullmatch(name):
            raise PriceFileError(f"{where}: each name must be a usage.server_tool_use count such as web_search_requests")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PriceFileError(f"{where}.{name}: must be a non-negative integer of nanodollars per use")
        fees[name] = value
    return fees


def parse_price_file(raw, origin=SHIPPED):
    """A ``Revision`` from a price file's bytes: UTF-8 JSON, no field twice in one object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PriceFileError("the file is not UTF-8 text") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        # error.msg names the rule and the position only, never the text around it.
        raise PriceFileError(f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:
        raise PriceFileError("not valid JSON (nested too deeply)") from None
    return revision_from_dict(data, origin)


def _no_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise PriceFileError("a JSON object holds the same field twice")
    return dict(pairs)


def _no_constant(name):
    raise PriceFileError("not valid JSON (NaN and Infinity are not numbers)")


def _price_files():
    # The shipped revisions stay in llm_accounts/prices/ (package data, pyproject.toml).
    return resources.files("llm_accounts").joinpath("prices")


def shipped_revision_ids():
    """The ids of every shipped price revision (one JSON file each)."""
    return sorted(
        entry.name[: -len(".json")]
        for entry in _price_files().iterdir()
        if entry.name.endswith(".json")
    )


def load_revision(revision_id):
    """A shipped revision by id (docs/pricing.md "The price revision"). A ``user:<revision>`` is
    read by ``price_book.load_revision``, which reads either kind: the user's files are read with
    this module's reader, so this module does not import theirs."""
    return _load_shipped(revision_id)


@lru_cache(maxsize=None)
def _load_shipped(revision_id):
    if not isinstance(revision_id, str) or not REVISION_ID.fullmatch(revision_id):
        raise AccountsError("unsupported_pricing", "price revision id is not a valid revision id")
    path = _price_files().joinpath(revision_id + ".json")
    missing = AccountsError(
        "unsupported_pricing", "price revision is not shipped with this version; see 'llm accounts prices'"
    )
    if not isinstance(path, pathlib.Path):  # a package inside an archive: its own reader
        if not path.is_file():
            raise missing
        raw = path.read_bytes()
    else:
        try:
            raw = read_limited(path)  # docs/security.md "Files read"
        except FileNotFoundError:
            raise missing from None
        except FileProblem as error:
            raise AccountsError("unsupported_pricing", f"price revision file {revision_id}.json: {error.reason}") from None
    revision = parse_price_file(raw)
    if revision.id != revision_id:
        raise ValueError(f"{revision_id}.json: holds revision {revision.id}")
    return revision


@lru_cache(maxsize=None)
def current_revision():
    """The newest shipped revision (latest ``read_on``), used for every new quote of a model it
    prices, unless a user's revision overrides it (``price_book``)."""
    revisions = [load_revision(revision_id) for revision_id in shipped_revision_ids()]
    return max(revisions, key=lambda revision: (revision.read_on, revision.id))


def _resolve(revision):
    if revision is None:
        return current_revision()
    if isinstance(revision, Revision) or hasattr(revision, "revision_of"):
        return revision  # a Revision, or a price_book.Book
    return load_revision(revision)


def revision_pricing(revision, model_id):
    """The one revision that prices ``model_id``: a book (price_book.Book) names it."""
    return revision.revision_of(model_id) if hasattr(revision, "revision_of") else revision


# Walking a request ---------------------------------------------------------------------------


def _refuse(where, rule, revision):
    raise AccountsError("unsupported_pricing", f"{where}: {rule} (price revision {revision.id})")


def _blocks(request):
    """Every block of the request in prefix order (tools, system, messages), nested ones included.

    Yields ``(path, block, tier, top)``. A string system prompt or message content stands for one
    unmarked text block. Nested blocks are those a block's content reaches (a tool_result's
    content, a document's source.content, a search_result's content); a tool_use's input is
    data, not content, and is never walked.
    """
    tools = request.get("tools")
    if isinstance(tools, list):
        for index, tool in enumerate(tools):
            yield f"tools[{index}]", tool, "tools", True
    system = request.get("system")
    if isinstance(system, str):
        yield "system", {"type": "text", "text": system}, "system", True
    elif isinstance(system, list):
        for index, block in enumerate(system):
            yield from _nested(f"system[{index}]", block, "system")
    messages = request.get("messages")
    if isinstance(messages, list):
        for index, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                yield f"messages[{index}].content", {"type": "text", "text": content}, "messages", True
            elif isinstance(content, list):
                for position, block in enumerate(content):
                    yield from _nested(f"messages[{index}].content[{position}]", block, "messages")


def _nested(path, block, tier, top=True):
    yield path, block, tier, top
    if not isinstance(block, dict):
        return
    children = [("content", block.get("content"))]
    source = block.get("source")
    if isinstance(source, dict):
        children.append(("source.content", source.get("content")))
    for name, content in children:
        if isinstance(content, list):
            for index, child in enumerate(content):
                yield from _nested(f"{path}.{name}[{index}]", child, tier, top=False)


def _ttl(block):
    """The cache TTL a block's own cache_control asks for, or None when it carries none."""
    mark = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(mark, dict):
        return None
    return mark.get("ttl", "5m")


def _markable(block, tier):
    """A block a cache mark can sit on: not blank text, not thinking."""
    if tier == "tools":
        return True
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return isinstance(text, str) and text.strip() != ""
    return kind not in ("thinking", "redacted_thinking")


def _check_cache_control(where, mark, revision):
    if (
        not isinstance(mark, dict)
        or mark.get("type") != "ephemeral"
        or not set(mark) <= {"type", "ttl"}
        or mark.get("ttl", "5m") not in CACHE_TTLS
    ):
        _refuse(
            f"{where}.cache_control",
            'only {"type": "ephemeral"} with an optional ttl of "5m" or "1h" is priced',
            revision,
        )


def _check_features(request, revision):
    """Refuse every request feature the revision does not price (docs/pricing.md "Refused before
    sending")."""
    for name in request:
        if name in UNPRICED_FIELDS:
            _refuse(name, f"{UNPRICED_FIELDS[name]} is not priced; remove the field", revision)
    unknown = [name for name in request if name not in PRICED_FIELDS]
    if unknown:
        _refuse(
            "request",
            f"{len(unknown)} top-level field(s) outside the priced set are not priced "
            f"(priced: {', '.join(sorted(PRICED_FIELDS))})",
            revision,
        )
    if request.get("service_tier") not in PRICED_SERVICE_TIERS:
        _refuse("service_tier", 'only "auto" or "standard_only" is priced (priority and batch are not)', revision)
    if "cache_control" in request:
        _check_cache_control("request", request["cache_control"], revision)
    for name in ("tools", "messages"):
        if name in request and not isinstance(request[name], list):
            _refuse(name, "must be a list to be priced", revision)
    if "system" in request and not isinstance(request["system"], (str, list)):
        _refuse("system", "must be a string or a list of blocks to be priced", revision)
    for index, message in enumerate(request.get("messages") or []):
        if not isinstance(message, dict) or not isinstance(message.get("content"), (str, list)):
            _refuse(f"messages[{index}]", "must be an object whose content is a string or a list of blocks", revision)
    for where, block, tier, _ in _blocks(request):
        if not isinstance(block, dict):
            _refuse(where, "must be an object to be priced", revision)
        if tier == "tools":
            pass  # server tools: tool_bounds.bounds, called by quote
        elif block.get("type") not in PRICED_BLOCK_TYPES:
            _refuse(
                where,
                f"this block type is not priced (priced: {', '.join(sorted(PRICED_BLOCK_TYPES))})",
                revision,
            )
        elif block["type"] in ("image", "document"):
            source = block.get("source")
            if not isinstance(source, dict) or source.get("type") not in PRICED_SOURCE_TYPES:
                _refuse(
                    f"{where}.source",
                    "only base64, text and URL sources are priced; Files API sources are not",
                    revision,
                )
        if "cache_control" in block:
            _check_cache_control(where, block["cache_control"], revision)


def _warm_prefix(request, model_id):
    """The warm-prefix certificate and hour_after_key (docs/architecture.md "Warm prefixes").

    The key block is the last markable tools-tier or system-tier block whose cache_control asks
    for one hour. The certificate hashes the model id and the tools and system blocks up to and
    including it, each without its own cache_control (the mark does not change the cached
    prefix, so requests that mark the same prefix differently share a certificate).
    """
    blocks = list(_blocks(request))
    key = None
    for index, (_, block, tier, top) in enumerate(blocks):
        if top and tier in ("tools", "system") and _markable(block, tier) and _ttl(block) == "1h":
            key = index
    if key is None:
        return None, False
    prefix = {"model": model_id, "tools": [], "system": []}
    for _, block, tier, top in blocks[: key + 1]:
        if top:
            prefix[tier].append({k: v for k, v in block.items() if k != "cache_control"})
    canonical = json.dumps(prefix, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    cert = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    after = blocks[key + 1 :]
    hour_after_key = any(_ttl(block) == "1h" for _, block, _, _ in after)
    if not hour_after_key and _ttl(request) == "1h":
        # Automatic caching puts a one-hour breakpoint on the last cacheable block.
        hour_after_key = any(_markable(block, tier) for _, block, tier, _ in after)
    return cert, hour_after_key


# Inference geo (data residency) --------------------------------------------------------------


def geo_multiplier(model_price, geo):
    """The multiplier a model's every token category is billed at for inference in ``geo``, as an
    exact ``Fraction``; None when the revision does not price that geo for the model.

    The standard routing (``"global"``, ``"not_available"``, a null or absent geo) is 1 on every
    model; any other geo is priced only where the model's price lists it (``{"us": "1.1"}`` on
    the models from Claude Opus 4.6 and Sonnet 4.6 on in the shipped revision). Server-tool fees
    are never multiplied (docs/pricing.md "Inference geo (data residency)").
    """
    if geo in STANDARD_INFERENCE_GEOS:
        return Fraction(1)
    if not isinstance(geo, str):
        return None
    return model_price.geo_multipliers.get(geo)


def ceiling_geo_multiplier(model_price, pinned=None):
    """The geo multiplier a ceiling must cover (docs/pricing.md "Inference geo (data residency)").

    A request that names no geo runs where its workspace's default geo says, which the request
    cannot see and the provider may bill at any geo the model has: the worst case is the largest
    multiplier (never below 1). A request that pins a geo is billed at that geo's multiplier.
    """
    if pinned is None:
        return max((Fraction(1), *model_price.geo_multipliers.values()))
    return geo_multiplier(model_price, pinned)


def request_geo_multiplier(request, model_price, revision):
    """The ceiling's geo multiplier for a request, or ``unsupported_pricing`` when its
    ``inference_geo`` is not priced: a model with no geo pricing (the provider answers 400 to the
    field on models before Claude Opus 4.6), or a value other than "global" and the geos the model
    prices. The value itself is never repeated."""
    if "inference_geo" not in request:
        return ceiling_geo_multiplier(model_price)
    geos = sorted(model_price.geo_multipliers)
    if not geos:
        _refuse(
            "inference_geo",
            f"{model_price.id} has no data-residency pricing in this revision (models before Claude Opus 4.6 "
            "do not take the field); remove it",
            revision,
        )
    pinned = request["inference_geo"]
    if not isinstance(pinned, str) or (pinned != GLOBAL_GEO and pinned not in geos):
        _refuse(
            "inference_geo",
            f"only {', '.join(repr(name) for name in (GLOBAL_GEO, *geos))} are priced on {model_price.id}",
            revision,
        )
    return ceiling_geo_multiplier(model_price, pinned)


# Quote and settlement ------------------------------------------------------------------------


def quote(body, revision=None):
    """Price the worst case of the frozen request ``body`` (the exact bytes to be sent).

    ``C = ceil(Imax * Pin + Omax * Pout)`` (docs/pricing.md "Ceiling"): Imax is the model's
    context window, Pin the greatest input-side rate that applies (fresh, cache read, and the
    cache writes of the TTLs the request's marks ask for) and Pout the greatest output rate of
    every tier a request of Imax input tokens can be billed at, Omax the request's max_tokens. Raises
    ``AccountsError("unsupported_pricing")`` for anything the revision does not price.

    With server tools (docs/pricing.md "Server tools") the provider samples up to
    ``tool_bounds.ITERATIONS`` times within the request, each sampling reading at most the window
    and writing at most max_tokens, and each fee-bearing use is bounded by its tool's max_uses:
    ``C = ceil(N * (Imax * Pin + Omax * Pout)) + sum(max_uses * fee)``, the tiers taken over the
    N windows' input.

    Every token part is multiplied by the geo multiplier the request can be billed at
    (``request_geo_multiplier``), fees are not: ``C = ceil(G * N * (...)) + fees``
    (docs/pricing.md "Inference geo (data residency)").
    """
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError("quote() takes the frozen request bytes")
    revision = _resolve(revision)
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        request = None
    if not isinstance(request, dict):
        _refuse("request", "the body is not a JSON object", revision)
    model_id = request.get("model")
    revision = revision_pricing(revision, model_id)
    price = revision.model(model_id)
    if price is None:
        _refuse(
            "model",
            "this model is not priced; run 'llm accounts prices' for the priced models, or give its "
            "prices with 'llm accounts prices add FILE' (docs/pricing.md \"Your own price revisions\")",
            revision,
        )
    if price.status == "retired":
        _refuse("model", f"{price.id} is retired; choose an active model from 'llm accounts prices'", revision)
    _check_features(request, revision)
    geo = request_geo_multiplier(request, price, revision)
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        _refuse("max_tokens", "required, a positive integer", revision)
    if max_tokens > price.max_output:
        _refuse("max_tokens", f"above {price.id}'s maximum output of {price.max_output} tokens", revision)
    tools = tool_bounds.bounds(request.get("tools"), revision.server_tool_fees, revision.id)
    samplings = tool_bounds.ITERATIONS if tools.any else 1
    tiers = price.tiers_up_to(samplings * price.context_window)
    # Cache writes happen only at the request's own cache marks, each at its TTL, so only those
    # write rates apply; how the server-side sampling loop caches is not documented, so a
    # request with a server tool is priced at every write rate (docs/pricing.md "Ceiling").
    ttls = CACHE_TTLS if tools.any else _marked_ttls(request)
    pin = max(rate for tier in tiers for rate in tier.input_side(ttls))
    pout = max(tier.output for tier in tiers)
    ceiling = math.ceil(geo * samplings * (price.context_window * pin + max_tokens * pout)) + tools.fees_nusd
    cert, hour_after_key = _warm_prefix(request, model_id)
    return Quote(
        requested_model=model_id,
        ceiling_nusd=ceiling,
        price_revision=revision.id,
        request_digest=hashlib.sha256(bytes(body)).hexdigest(),
        cert=cert,
        hour_after_key=hour_after_key,
        ceiling_tokens=samplings * (price.context_window + max_tokens),
        tool_uses=tools,
        max_output=samplings * max_tokens,
    )


class _Incomplete(Exception):
    """Usage that cannot be priced exactly; settlement_cost turns it into None."""


def _count(value, *, required=False):
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Incomplete
    return value


def _marked_ttls(request):
    """The cache TTLs a parsed request's marks ask for: its blocks' and its top-level
    (automatic caching) ``cache_control``."""
    ttls = {_ttl(block) for _, block, _, _ in _blocks(request)}
    ttls.add(_ttl(request))
    ttls.discard(None)
    return ttls


def _request_ttls(request_body):
    try:
        request = json.loads(request_body)
    except (TypeError, ValueError, RecursionError):
        raise _Incomplete from None
    if not isinstance(request, dict):
        raise _Incomplete
    return _marked_ttls(request)


def _cache_writes(usage, created, request_body):
    """Split cache writes into (5m, 1h) exactly, or raise _Incomplete (docs/pricing.md "Cache
    writes")."""
    breakdown = usage.get("cache_creation")
    if breakdown is not None:
        if not isinstance(breakdown, dict):
            raise _Incomplete
        w5 = _count(breakdown.get("ephemeral_5m_input_tokens"))
        w1h = _count(breakdown.get("ephemeral_1h_input_tokens"))
        if w5 + w1h != created:
            raise _Incomplete
        return w5, w1h
    if created == 0:
        return 0, 0
    ttls = _request_ttls(request_body)
    if ttls == {"5m"}:
        return created, 0
    if ttls == {"1h"}:
        return 0, created
    raise _Incomplete  # mixed TTLs (or none at all): the split cannot be derived


# Every usage field the revision knows how to bill, or knows bills nothing (docs/pricing.md
# "What keeps an attempt open").
# Anything else that is present and not empty is a billing dimension it cannot price: the
# settlement keeps the ceiling open rather than guess (unknown is never zero).
KNOWN_USAGE_FIELDS = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "cache_creation",
        "server_tool_use",
        "service_tier",
        "inference_geo",
        "speed",
        "output_tokens_details",  # a breakdown already counted in output_tokens
    }
)
KNOWN_CACHE_CREATION_FIELDS = frozenset({"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"})


def _check_dimensions(usage):
    """Refuse a usage object that bills something this revision does not know."""
    for name, value in usage.items():
        if name not in KNOWN_USAGE_FIELDS and not _empty(value):
            raise _Incomplete
    breakdown = usage.get("cache_creation")
    if isinstance(breakdown, dict):
        for name, value in breakdown.items():
            if name not in KNOWN_CACHE_CREATION_FIELDS and not _empty(value):
                raise _Incomplete


def _empty(value):
    return value is None or (type(value) is int and value == 0) or (type(value) in (str, dict, list) and not value)


def _check_modifiers(usage):
    """Refuse rate modifiers the revision does not price (fast, batch, priority) and server-tool
    counts that are not counts. The geo is priced per model (``geo_multiplier``)."""
    if usage.get("speed") not in STANDARD_SPEEDS:
        raise _Incomplete
    if usage.get("service_tier") not in STANDARD_SERVICE_TIERS:
        raise _Incomplete
    server_tools = usage.get("server_tool_use")
    if server_tools is not None:
        if not isinstance(server_tools, dict):
            raise _Incomplete
        for value in server_tools.values():
            _count(value)


def settlement_cost(usage, served_model, request_body, revision):
    """The exact cost ``A`` of final ``usage`` at the served model's rates, or None.

    ``A = ceil(input*Pin + read*Pread + w5*P5m + w1h*P1h + output*Pout)`` at the tier the
    request's total input (fresh + written + read) falls in (docs/pricing.md "Settlement cost"),
    plus each ``server_tool_use`` count times its fee in the revision.

    The usage's ``inference_geo`` multiplies the whole token cost before it is rounded up, and
    never the fees: ``ceil(A_tokens * G) + fees``, G from ``geo_multiplier`` (1 for "global",
    "not_available", null or absent; docs/pricing.md "Inference geo (data residency)"). A geo
    the model's price does not list settles as None. ``request_body`` may be None when the usage
    carries its cache-write breakdown (a provider report row's counts, say).

    None means the usage is incomplete or carries something the revision does not price: keep
    the ceiling open.
    """
    revision = revision_pricing(_resolve(revision), served_model)
    price = revision.model(served_model)
    if price is None or not isinstance(usage, dict):
        return None
    try:
        fresh = _count(usage.get("input_tokens"), required=True)
        output = _count(usage.get("output_tokens"), required=True)
        read = _count(usage.get("cache_read_input_tokens"))
        created = _count(usage.get("cache_creation_input_tokens"))
        _check_modifiers(usage)
        _check_dimensions(usage)
        w5, w1h = _cache_writes(usage, created, request_body)
    except _Incomplete:
        return None
    geo = geo_multiplier(price, usage.get("inference_geo"))
    if geo is None:
        return None
    fees = tool_bounds.fees_due(usage.get("server_tool_use"), revision.server_tool_fees)
    if fees is None:
        return None
    rates = price.rates_for(fresh + created + read)
    tokens = (
        fresh * rates.input
        + read * rates.cache_read
        + w5 * rates.write_5m
        + w1h * rates.write_1h
        + output * rates.output
    )
    return fees + math.ceil(geo * tokens)



COUNTED_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass(frozen=True)
class CountedHold:
    """What an attempt still holds once ``message_start`` has counted its input
    (docs/pricing.md "Shrinking a hold on message_start")."""

    hold_nusd: int
    hold_tokens: int
    counts: dict  # the input counts it rests on: COUNTED_INPUT_FIELDS plus any cache-write breakdown


def counted_hold(usage, served_model, request_body, revision, max_output, ceiling_nusd):
    """The hold of an attempt whose input the provider has counted, or None to keep the ceiling.

    ``H = ceil(G * (input*Pin + read*Pread + w5*P5m + w1h*P1h + max_output*Pout))``: the input
    counted in ``message_start``'s usage at the served model's rates, at the tier that input
    falls in, plus the most output the request can be billed for (max_tokens) at that tier's
    output rate. G is the geo multiplier the ceiling covered (``request_geo_multiplier``), never
    less. Only the output is still unknown, and max_tokens bounds it (docs/pricing.md
    "Shrinking a hold on message_start").

    None, so the ceiling stays, whenever the counts are not that bound: the request has server
    tools (their samplings add input), the usage lacks a count or bills a tier, speed or field
    the revision does not price, its cache writes cannot be split by TTL, the served model is
    not priced, or the hold would not be below ``ceiling_nusd``.
    """
    if not isinstance(usage, dict) or not isinstance(max_output, int) or max_output <= 0:
        return None
    try:
        request = json.loads(request_body)
    except (TypeError, ValueError, RecursionError):
        return None
    tools = request.get("tools") if isinstance(request, dict) else None
    if not isinstance(request, dict) or any(
        tool_bounds.is_server_tool(tool) for tool in (tools if isinstance(tools, list) else ())
    ):
        return None
    try:
        revision = revision_pricing(_resolve(revision), served_model)
        price = revision.model(served_model)
        if price is None:
            return None
        geo = request_geo_multiplier(request, price, revision)
    except AccountsError:
        return None
    if "output_tokens" in usage:
        usage = {name: value for name, value in usage.items() if name != "output_tokens"}
    try:
        fresh = _count(usage.get("input_tokens"), required=True)
        read = _count(usage.get("cache_read_input_tokens"))
        created = _count(usage.get("cache_creation_input_tokens"))
        _check_modifiers(usage)
        if usage.get("server_tool_use"):
            raise _Incomplete
        _check_dimensions(usage)
        w5, w1h = _cache_writes(usage, created, request_body)
    except _Incomplete:
        return None
    if geo_multiplier(price, usage.get("inference_geo")) is None:
        return None
    total_input = fresh + created + read
    rates = price.rates_for(total_input)
    tokens = fresh * rates.input + read * rates.cache_read + w5 * rates.write_5m + w1h * rates.write_1h
    hold = math.ceil(geo * (tokens + max_output * rates.output))
    if hold >= ceiling_nusd:
        return None
    counts = {"input_tokens": fresh, "cache_creation_input_tokens": created, "cache_read_input_tokens": read}
    if isinstance(usage.get("cache_creation"), dict):
        counts["cache_creation"] = {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1h}
    return CountedHold(hold, total_input + max_output, counts)


def contradicts(counts, usage):
    """Whether a final ``usage`` contradicts the input ``counts`` a hold was shrunk on: any of
    the counted input fields differs (an absent count is 0, as in settlement)."""
    if not isinstance(usage, dict):
        return True
    for name in COUNTED_INPUT_FIELDS:
        final = usage.get(name, 0)
        if final is None:
            final = 0
        if final != counts.get(name, 0):
            return True
    return False


def multiplier_text(multiplier):
    """A geo multiplier as the exact decimal string a price file writes: Fraction(11, 10) -> "1.1"."""
    multiplier = Fraction(multiplier)
    whole, rest = divmod(multiplier.numerator, multiplier.denominator)
    digits = ""
    while rest and len(digits) < 12:
        digit, rest = divmod(rest * 10, multiplier.denominator)
        digits += str(digit)
    if rest:
        return f"{multiplier.numerator}/{multiplier.denominator}"
    return f"{whole}.{digits}" if digits else str(whole)


def per_mtok(rate):
    """A per-token nanodollar rate as exact US dollars per million tokens: 3750 -> "3.75"."""
    dollars = Fraction(rate) / 1000
    whole, rest = divmod(dollars.numerator, dollars.denominator)
    if rest == 0:
        return f"{whole}.00"
    digits = ""
    remainder = rest
    for _ in range(12):
        remainder *= 10
        digit, remainder = divmod(remainder, dollars.denominator)
        digits += str(digit)
        if remainder == 0:
            break
    else:
        return f"{dollars.numerator}/{dollars.denominator}"
    return f"{whole}.{digits.ljust(2, '0')}"
