"""Account declarations: where they come from and what makes one valid.

Contracts: docs/architecture.md "Environment" and "An account declaration".

A declaration is read from, highest first, the process environment's ``ANTHROPIC_ACCOUNTS``, the
working directory's ``.env.local`` then ``.env``, then ``accounts.json`` in the llm user
directory. The first present one replaces the rest whole (no merging). Absence or ``[]`` means
unrouted. Anything else that is not a valid declaration is an error, never an empty pool.

A pasted key can land in any field, so every error names a source, a field path and a rule, and
never the value: not in its message, not in a chained exception (JSON parser errors quote the
document, so they are never chained), not in a repr.
"""

import contextlib
import dataclasses
import difflib
import json
import os
import pathlib
import re

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from .errors import AccountsError
from .money import INT64_MAX, NANO, parse_usd
from .paths import FileProblem, read_limited, write_private_json

VARIABLE = "ANTHROPIC_ACCOUNTS"
ACCOUNTS_FILE = "accounts.json"
DOTENV_FILES = (".env.local", ".env")  # highest first

NAME_RULE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# A variable-name rule with a length bound (docs/architecture.md "An account declaration"); used
# unchanged as the environment variable, the dotenv key, the `llm keys` name and the lookup's
# {name}.
KEY_ENV_RULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# The Admin API's API key ids ("apikey_01Rj2N8SVvo6BePZj99NhmiT"): an id, not a secret
# (docs/architecture.md "Settling from the provider").
API_KEY_ID_RULE = re.compile(r"apikey_[A-Za-z0-9]{1,64}")
MODEL_RULE = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")
# The ledger's rule for the attempt's client label (llm_accounts.records.CLIENT_RE), so every label
# a cap names can be the one a caller sets with -o client or LLM_ACCOUNTS_CLIENT.
CLIENT_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,63}")
CLIENT_FIELDS = ("budget_usd", "tokens")
FIELDS = (
    "name",
    "key_env",
    "budget_usd",
    "daily_budget_usd",
    "rank",
    "weight",
    "models",
    "clients",
    "clients_only",
    "admin_key_env",
    "api_key_id",
    "dedicated_key",
    "warn_at",
)
REQUIRED = ("name", "key_env", "budget_usd")
# Ranks and weights are small orderings, not money; the bound keeps them far inside SQLite's int64.
MAX_RANK = 1_000_000
MAX_WEIGHT = 1_000_000
MAX_LOOKUP_ARGS = 64
MAX_LOOKUP_ARG_CHARS = 4096


@dataclasses.dataclass(frozen=True)
class Account:
    """One declared account. Holds the *name* of the variable with its key, never the key."""

    name: str
    key_env: str
    budget_nusd: int
    daily_budget_nusd: int | None = None
    rank: int = 0  # lower is preferred (docs/architecture.md "Selection")
    weight: int = 1
    models: tuple[str, ...] | None = None  # None: every priced model
    # Per-client caps (docs/architecture.md "Client caps"): ((client label, monthly cap in nanodollars),
    # ...) sorted by label, a tuple so the account stays hashable. With clients_only, only these
    # clients (and those in client_tokens) may use it.
    clients: tuple[tuple[str, int], ...] = ()
    clients_only: bool = False
    # Per-client token caps: ((client label, monthly cap in billed tokens), ...) sorted by label. A
    # client may have a dollar cap, a token cap or both.
    client_tokens: tuple[tuple[str, int], ...] = ()
    # The organization's Admin API key (the *name* of its variable, resolved like key_env) and this
    # key's id in the usage report (docs/architecture.md "Settling from the provider").
    admin_key_env: str | None = None
    api_key_id: str | None = None
    # The user's promise that this key is used through the ledger alone, so every request the
    # usage report shows for api_key_id is one of the ledger's attempts (docs/architecture.md
    # "Settling from the provider"). Policy, not credit: it may change at any time. Needs
    # admin_key_env and api_key_id.
    dedicated_key: bool = False
    # Budget warning thresholds in percent, rising (docs/architecture.md "Budget warnings"); None:
    # the default (thresholds.DEFAULT_WARN_AT), () no warnings.
    warn_at: tuple[int, ...] | None = None

    @property
    def warn_thresholds(self):
        from .thresholds import DEFAULT_WARN_AT

        return DEFAULT_WARN_AT if self.warn_at is None else self.warn_at


@dataclasses.dataclass(frozen=True)
class Declaration:
    accounts: tuple[Account, ...]
    # "environment" | ".env.local" | ".env" | "accounts.json" | None (nothing declared)
    source: str | None
    # argv template with "{name}"; only ever from accounts.json, since a project directory
    # declares no lookup command (docs/security.md "Child processes")
    lookup: tuple[str, ...] | None = None

    @property
    def routed(self):
        return bool(self.accounts)


def invalid(message):
    return AccountsError("declaration_invalid", message)


def looks_like_key(text):
    """Names and references reject credential-shaped text, in any case (docs/security.md "Reading a
    key")."""
    return "sk-ant" in text.lower()


def _root(source):
    """How errors name the top of a declaration from ``source``."""
    if source == "environment":
        return VARIABLE
    if source == ACCOUNTS_FILE:
        return f"accounts in {ACCOUNTS_FILE}"
    return f"{VARIABLE} in {source}"


def _field(source, index, name=None):
    """How errors name item ``index`` (or its field ``name``) of a declaration from ``source``."""
    path = f"[{index}]" + (f".{name}" if name else "")
    if source == "environment":
        return f"{VARIABLE}{path}"
    if source == ACCOUNTS_FILE:
        return f"accounts{path} in {ACCOUNTS_FILE}"
    return f"{VARIABLE}{path} in {source}"


class _DuplicateField(Exception):
    pass


def _strict_object(pairs):
    """``object_pairs_hook`` refusing a repeated field, which JSON would silently resolve."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateField()
        seen[key] = value
    return seen


def loads(text, what):
    """``json.loads`` whose errors give a line number only.

    ``json.JSONDecodeError`` carries the whole document (``.doc``) and its context could reach a
    traceback, so the error is raised after the ``except`` block: no ``__cause__``, no
    ``__context__``. Its column is left out too: after a pasted key it would tell the key's length.
    """
    problem = None
    try:
        return json.loads(text, object_pairs_hook=_strict_object)
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON (error on line {error.lineno})"
    except _DuplicateField:
        problem = "is not valid: a JSON object repeats a field"
    except (ValueError, RecursionError):
        problem = "is not valid JSON"
    raise invalid(f"{what}: {problem}")


def _name(value, field):
    if not isinstance(value, str):
        raise invalid(f"{field}: must be a string")
    if looks_like_key(value):
        raise invalid(
            f"{field}: looks like an API key (it contains sk-ant); put the key in the variable named by key_env instead"
        )
    if not NAME_RULE.fullmatch(value):
        raise invalid(
            f"{field}: must be 1-32 characters of lower-case letters, digits, '-' or '_', starting with a letter, such as \"work\""
        )
    return value


def _key_env(value, field):
    if not isinstance(value, str):
        raise invalid(f"{field}: must be a string")
    if looks_like_key(value):
        raise invalid(
            f'{field}: looks like an API key (it contains sk-ant); give the *name* of a variable that holds the key, such as "WORK_ANTHROPIC_KEY"'
        )
    if not KEY_ENV_RULE.fullmatch(value):
        raise invalid(
            f"{field}: must be a variable name of 1-64 letters, digits or '_', not starting with a digit, such as \"WORK_ANTHROPIC_KEY\""
        )
    return value


def _api_key_id(value, field):
    if not isinstance(value, str) or looks_like_key(value) or not API_KEY_ID_RULE.fullmatch(value):
        raise invalid(
            f"{field}: must be an API key id from the console or the Admin API, 'apikey_' and 1-64 letters or digits "
            "(an id, never the key itself)"
        )
    return value


MAX_WARN_AT = 5


def _warn_at(value, field):
    """Budget warning thresholds: a list of up to 5 whole percents from 1 to 100, rising; [] is off."""
    rule = f"must be a list of up to {MAX_WARN_AT} rising whole percents from 1 to 100, such as [80, 95] ([] turns warnings off)"
    if not isinstance(value, list) or len(value) > MAX_WARN_AT:
        raise invalid(f"{field}: {rule}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 100:
            raise invalid(f"{field}: {rule}")
    if any(later <= earlier for earlier, later in zip(value, value[1:])):
        raise invalid(f"{field}: {rule}")
    return tuple(value)


def _warn_at_option(text, option="--warn-at"):
    """``--warn-at 80,95`` (or ``off``) as thresholds; errors name the option, never the value."""
    if text.strip().lower() in ("off", "none", ""):
        return ()
    parts = text.split(",")
    if not all(re.fullmatch(r"\s*[0-9]{1,3}\s*", part) for part in parts):
        raise invalid(f"{option}: must be whole percents separated by commas, such as 80,95, or off")
    return _warn_at([int(part) for part in parts], option)


def _integer(value, field, minimum, maximum, example):
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(
            f"{field}: must be a whole number from {minimum} to {maximum:,}, such as {example}"
        )
    if not minimum <= value <= maximum:
        raise invalid(f"{field}: must be from {minimum} to {maximum:,}, such as {example}")
    return value


def _models(value, field):
    if not isinstance(value, list):
        raise invalid(f'{field}: must be a list of model id strings, such as ["claude-sonnet-4-5"]')
    if not value:
        raise invalid(
            f"{field}: must name at least one model; leave it out to serve every priced model"
        )
    seen = set()
    for index, item in enumerate(value):
        item_field = f"{field}[{index}]"
        if not isinstance(item, str):
            raise invalid(f"{item_field}: must be a string")
        if looks_like_key(item):
            raise invalid(f"{item_field}: looks like an API key (it contains sk-ant)")
        if not MODEL_RULE.fullmatch(item):
            raise invalid(
                f"{item_field}: must be an Anthropic model id of lower-case letters, digits, '.' or '-', such as \"claude-sonnet-4-5\""
            )
        if item in seen:
            raise invalid(f"{item_field}: repeats an earlier model")
        seen.add(item)
    return tuple(value)


def _client_label(label, field):
    """A client label; the error never repeats it (a key could be pasted as a label)."""
    if not isinstance(label, str):
        raise invalid(f"{field}: the client label must be a string")
    if looks_like_key(label):
        raise invalid(
            f"{field}: the client label looks like an API key (it contains sk-ant); name the client, such as \"ci-bot\""
        )
    if not CLIENT_RULE.fullmatch(label):
        raise invalid(
            f"{field}: the client label must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-', starting with a letter or digit, such as \"ci-bot\""
        )
    return label


def _client_tokens(value, field):
    """A token cap: a JSON integer, not a string, float or boolean (a count, like ``rank``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
        raise invalid(
            f"{field}: must be a whole number of tokens from 1 to 2**63-1 written as a JSON integer, such as 2000000"
        )
    return value


def _clients(value, field):
    """Per-client caps: ``{"<client label>": {"budget_usd": "5.00", "tokens": 2000000}, ...}``, either
    or both (docs/architecture.md "Client caps"). Returns ``(dollar caps, token caps)``.

    Entries are named by position in errors (``clients.<entry 1>``), never by their label.
    """
    example = '{"ci-bot": {"budget_usd": "5.00", "tokens": 2000000}}'
    if not isinstance(value, dict):
        raise invalid(f"{field}: must be an object mapping client labels to caps, such as {example}")
    if not value:
        raise invalid(f"{field}: must name at least one client; leave it out for no client caps")
    caps, token_caps = [], []
    for number, (label, cap) in enumerate(value.items(), start=1):
        entry = f"{field}.<entry {number}>"
        _client_label(label, entry)
        if not isinstance(cap, dict):
            raise invalid(f'{entry}: must be an object such as {{"budget_usd": "5.00"}} or {{"tokens": 2000000}}')
        if any(key not in CLIENT_FIELDS for key in cap):
            raise invalid(f"{entry}: unknown field; allowed fields are {', '.join(CLIENT_FIELDS)}")
        if not cap:
            raise invalid(f"{entry}.budget_usd: is required unless tokens is given (either or both)")
        if "budget_usd" in cap:
            caps.append((label, parse_usd(cap["budget_usd"], f"{entry}.budget_usd")))
        if "tokens" in cap:
            token_caps.append((label, _client_tokens(cap["tokens"], f"{entry}.tokens")))
    return tuple(sorted(caps)), tuple(sorted(token_caps))


def _dedicated_key(value, field, admin_key_env, api_key_id):
    """``dedicated_key``: a JSON boolean; true needs the key's id and its organization's Admin API
    key (docs/architecture.md "Settling from the provider")."""
    if not isinstance(value, bool):
        raise invalid(f"{field}: must be true or false")
    if value and api_key_id is None:
        raise invalid(f"{field}: is true but no api_key_id is declared; declare this key's api_key_id, or leave dedicated_key out")
    if value and admin_key_env is None:
        raise invalid(f"{field}: is true but no admin_key_env is declared; declare the organization's admin_key_env, or leave dedicated_key out")
    return value


def _clients_only(value, field, clients):
    if not isinstance(value, bool):
        raise invalid(f"{field}: must be true or false")
    if value and not clients:
        raise invalid(f"{field}: is true but no clients are listed; list them in clients, or leave clients_only out")
    return value


def parse_account(item, field):
    """Validate one declaration object; ``field(name)`` gives the path of one of its fields."""
    unknown = [key for key in item if key not in FIELDS]
    if unknown:
        # The unknown field's name is not repeated (a key could be pasted as a field name); the
        # hint names only a field of ours.
        close = difflib.get_close_matches(str(unknown[0]), FIELDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise invalid(f"{field(None)}: unknown field{hint}; allowed fields are {', '.join(FIELDS)}")
    for required in REQUIRED:
        if required not in item:
            raise invalid(f"{field(required)}: is required")
    daily = item.get("daily_budget_usd")
    clients, client_tokens = _clients(item["clients"], field("clients")) if "clients" in item else ((), ())
    admin_key_env = _key_env(item["admin_key_env"], field("admin_key_env")) if "admin_key_env" in item else None
    api_key_id = _api_key_id(item["api_key_id"], field("api_key_id")) if "api_key_id" in item else None
    return Account(
        name=_name(item["name"], field("name")),
        key_env=_key_env(item["key_env"], field("key_env")),
        budget_nusd=parse_usd(item["budget_usd"], field("budget_usd")),
        daily_budget_nusd=(
            parse_usd(daily, field("daily_budget_usd")) if "daily_budget_usd" in item else None
        ),
        rank=_integer(item.get("rank", 0), field("rank"), 0, MAX_RANK, 1),
        weight=_integer(item.get("weight", 1), field("weight"), 1, MAX_WEIGHT, 2),
        models=_models(item["models"], field("models")) if "models" in item else None,
        clients=clients,
        clients_only=_clients_only(item.get("clients_only", False), field("clients_only"), clients or client_tokens),
        client_tokens=client_tokens,
        admin_key_env=admin_key_env,
        api_key_id=api_key_id,
        dedicated_key=_dedicated_key(item.get("dedicated_key", False), field("dedicated_key"), admin_key_env, api_key_id),
        warn_at=_warn_at(item["warn_at"], field("warn_at")) if "warn_at" in item else None,
    )


def parse_accounts(value, source):
    """Validate a whole declaration: JSON text, or the already-parsed value, from ``source``.

    Returns the accounts (empty for ``[]``). ``source`` is "environment", ".env.local", ".env",
    "accounts.json" or another label used to name where an error is.
    """
    root = _root(source)
    if isinstance(value, str):
        if not value.strip():
            raise invalid(
                f"{root}: is empty; declare a JSON array of accounts, or use [] (or remove it) for unrouted"
            )
        value = loads(value, root)
    if value is None:
        raise invalid(
            f"{root}: is null; declare a JSON array of accounts, or use [] (or remove it) for unrouted"
        )
    if not isinstance(value, list):
        raise invalid(f"{root}: must be a JSON array of account objects")
    accounts = []
    names = {}
    key_envs = {}
    api_key_ids = {}
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise invalid(f"{_field(source, index)}: must be a JSON object")

        def field(name, index=index):
            return _field(source, index, name)

        account = parse_account(item, field)
        if account.name in names:
            raise invalid(
                f"{field('name')}: repeats the name of account [{names[account.name]}]; names must be unique"
            )
        if account.key_env in key_envs:
            raise invalid(
                f"{field('key_env')}: repeats the key_env of account [{key_envs[account.key_env]}]; each account needs its own key"
            )
        if account.api_key_id is not None and account.api_key_id in api_key_ids:
            # Whatever the admin_key_env: two accounts settled from one key's usage would each
            # take the same report row (docs/architecture.md "Settling from the provider").
            raise invalid(
                f"{field('api_key_id')}: repeats the api_key_id of account [{api_key_ids[account.api_key_id]}]; one API key id belongs to one account"
            )
        if account.admin_key_env is not None and account.admin_key_env in key_envs:
            raise invalid(f"{field('admin_key_env')}: names the key_env of account [{key_envs[account.admin_key_env]}]; an Admin API key is not an API key")
        if account.admin_key_env == account.key_env or any(account.key_env == other.admin_key_env for other in accounts):
            raise invalid(f"{field('key_env')}: is also named as an admin_key_env; an Admin API key is not an API key")
        names[account.name] = index
        key_envs[account.key_env] = index
        if account.api_key_id is not None:
            api_key_ids[account.api_key_id] = index
        accounts.append(account)
    return tuple(accounts)


def _whole(text, option, minimum, maximum, example):
    """A whole-number option (``--rank``, ``--weight``); None gives ``minimum``, the default."""
    if text is None:
        return minimum
    if not re.fullmatch(r"[0-9]{1,7}", text):
        raise invalid(f"{option}: must be a whole number from {minimum} to {maximum:,}, such as {example}")
    return _integer(int(text), option, minimum, maximum, example)


def _slips(text, option):
    """The two slips people make typing dollars; named without repeating the value."""
    if isinstance(text, str) and "," in text:
        raise invalid(f"{option}: use a dot for cents and no thousands separators, such as 12.50")
    if isinstance(text, str) and text.startswith("$"):
        raise invalid(f"{option}: give the amount without '$', such as 12.50")


def _usd_option(text, option):
    _slips(text, option)
    return parse_usd(text, option)


def _client_cap_options(client_caps):
    """``--client-cap`` texts as ``({label: nanodollars}, {label: tokens})``.

    Each is ``LABEL=USD`` or ``LABEL=<N>tokens`` (one of each kind per client gives it both caps);
    ``--client-cap <entry N>`` names a bad one by position, never by its text.
    """
    found, tokens = {}, {}
    for number, text in enumerate(client_caps, start=1):
        option = f"--client-cap <entry {number}>"
        label, equals, amount = text.partition("=") if isinstance(text, str) else ("", "", "")
        if not equals:
            raise invalid(f"{option}: must be LABEL=USD or LABEL=<N>tokens, such as ci-bot=5.00 or ci-bot=2000000tokens")
        _client_label(label, option)
        if amount.endswith("tokens"):
            count = amount[: -len("tokens")]
            if not re.fullmatch(r"[0-9]{1,19}", count):
                raise invalid(f"{option}: a token cap must be LABEL=<N>tokens with N a whole number, such as ci-bot=2000000tokens")
            if label in tokens:
                raise invalid(f"{option}: repeats an earlier client's token cap; give each client one token cap")
            tokens[label] = _client_tokens(int(count), option)
            continue
        if label in found:
            raise invalid(f"{option}: repeats an earlier client's dollar cap; give each client one dollar cap")
        found[label] = _usd_option(amount, option)
    return found, tokens


def account_from_options(
    name,
    key_env,
    budget,
    daily_budget=None,
    rank=None,
    weight=None,
    models=(),
    client_caps=(),
    clients_only=False,
    admin_key_env=None,
    api_key_id=None,
    warn_at=None,
    dedicated_key=False,
):
    """Build an account from ``llm accounts add``'s text options; errors name the option."""
    for text, option in ((budget, "--budget"), (daily_budget, "--daily-budget")):
        _slips(text, option)
    fields = dict(
        name=_name(name, "NAME"),
        key_env=_key_env(key_env, "--key-env"),
        budget_nusd=parse_usd(budget, "--budget"),
        daily_budget_nusd=(
            parse_usd(daily_budget, "--daily-budget") if daily_budget is not None else None
        ),
        rank=_whole(rank, "--rank", 0, MAX_RANK, 1),
        weight=_whole(weight, "--weight", 1, MAX_WEIGHT, 2),
        models=_models(list(models), "--model") if models else None,
    )
    dollar_caps, token_caps = _client_cap_options(client_caps)
    if clients_only and not (dollar_caps or token_caps):
        raise invalid("--clients-only: needs at least one --client-cap naming a client it serves")
    if admin_key_env is not None:
        fields["admin_key_env"] = _key_env(admin_key_env, "--admin-key-env")
        if fields["admin_key_env"] == fields["key_env"]:
            raise invalid("--admin-key-env: names the same variable as --key-env; an Admin API key is not an API key")
    if api_key_id is not None:
        fields["api_key_id"] = _api_key_id(api_key_id, "--api-key-id")
    if dedicated_key:
        if api_key_id is None:
            raise invalid("--dedicated-key: needs --api-key-id naming this key's id in the usage report")
        if admin_key_env is None:
            raise invalid("--dedicated-key: needs --admin-key-env naming the organization's Admin API key")
        fields["dedicated_key"] = True
    if warn_at is not None:
        fields["warn_at"] = _warn_at_option(warn_at)
    return Account(
        **fields,
        clients=tuple(sorted(dollar_caps.items())),
        clients_only=bool(clients_only),
        client_tokens=tuple(sorted(token_caps.items())),
    )


#: What ``llm accounts set --clear`` takes: each optional setting, named like its option.
CLEARABLE = ("daily-budget", "rank", "weight", "models", "client-caps", "admin-key", "warn-at")


def changed_settings(account, *, budget=None, daily_budget=None, rank=None, weight=None, models=(),
                     client_caps=(), remove_clients=(), clients_only=None, admin_key_env=None, api_key_id=None,
                     warn_at=None, dedicated_key=None, clear=()):
    """``account`` with only the settings given changed (``llm accounts set``); the rest are kept.

    ``clear`` names settings (``CLEARABLE``) that return to their defaults; client caps are
    cleared before ``client_caps`` are applied, so the two together replace every cap. A client
    cap changes that client's cap of that kind and keeps its other one and every other client's.
    The key_env is not a setting: it is the account's credit (docs/architecture.md "What a credit
    period fixes").
    """
    for setting, given in (
        ("daily-budget", daily_budget), ("rank", rank), ("weight", weight), ("models", models or None),
        ("admin-key", admin_key_env or api_key_id or (True if dedicated_key else None)), ("warn-at", warn_at),
    ):
        if setting in clear and given is not None:
            option = {"models": "--model", "admin-key": "--admin-key-env, --api-key-id or --dedicated-key"}.get(setting, f"--{setting}")
            raise invalid(f"--clear {setting}: {option} is given too; give one of them")
    changes = {}
    if budget is not None:
        changes["budget_nusd"] = _usd_option(budget, "--budget")
    if daily_budget is not None:
        changes["daily_budget_nusd"] = _usd_option(daily_budget, "--daily-budget")
    elif "daily-budget" in clear:
        changes["daily_budget_nusd"] = None
    if rank is not None or "rank" in clear:
        changes["rank"] = _whole(rank, "--rank", 0, MAX_RANK, 1)
    if weight is not None or "weight" in clear:
        changes["weight"] = _whole(weight, "--weight", 1, MAX_WEIGHT, 2)
    if models:
        changes["models"] = _models(list(models), "--model")
    elif "models" in clear:
        changes["models"] = None
    dollars, tokens = ({}, {}) if "client-caps" in clear else (dict(account.clients), dict(account.client_tokens))
    for number, label in enumerate(remove_clients, start=1):
        option = f"--remove-client <entry {number}>"
        _client_label(label, option)
        if label not in dollars and label not in tokens:
            raise AccountsError(
                "not_found", f"{option}: no client cap on account {account.name} has this label; see 'llm accounts list'"
            )
        dollars.pop(label, None)
        tokens.pop(label, None)
    given_dollars, given_tokens = _client_cap_options(client_caps)
    dollars.update(given_dollars)
    tokens.update(given_tokens)
    changes["clients"] = tuple(sorted(dollars.items()))
    changes["client_tokens"] = tuple(sorted(tokens.items()))
    if clients_only is not None:
        changes["clients_only"] = bool(clients_only)
    if "admin-key" in clear:
        changes["admin_key_env"] = changes["api_key_id"] = None
    if admin_key_env is not None:
        changes["admin_key_env"] = _key_env(admin_key_env, "--admin-key-env")
        if changes["admin_key_env"] == account.key_env:
            raise invalid("--admin-key-env: names the same variable as the account's key_env; an Admin API key is not an API key")
    if api_key_id is not None:
        changes["api_key_id"] = _api_key_id(api_key_id, "--api-key-id")
    if warn_at is not None:
        changes["warn_at"] = _warn_at_option(warn_at)
    elif "warn-at" in clear:
        changes["warn_at"] = None
    if dedicated_key is not None:
        changes["dedicated_key"] = bool(dedicated_key)
    changed = dataclasses.replace(account, **changes)
    if changed.dedicated_key and (changed.api_key_id is None or changed.admin_key_env is None):
        if "admin-key" in clear:
            raise invalid(
                "--clear admin-key: the account declares dedicated_key, which needs admin_key_env and api_key_id; "
                "add --no-dedicated-key to drop it too"
            )
        if changed.api_key_id is None:
            raise invalid("--dedicated-key: the account declares no api_key_id; give --api-key-id naming this key's id in the usage report")
        raise invalid("--dedicated-key: the account declares no admin_key_env; give --admin-key-env naming the organization's Admin API key")
    if changed.clients_only and not (dollars or tokens):
        if "client-caps" in clear:
            raise invalid(
                "--clear client-caps: the account serves only its listed clients; add --all-clients to open it "
                "to every client, or give the caps to keep with --client-cap"
            )
        if clients_only:
            raise invalid("--clients-only: needs at least one --client-cap naming a client it serves")
        raise invalid(
            "--remove-client: that leaves no client on an account that serves only its listed clients; "
            "add --all-clients to open it to every client"
        )
    return changed


def _setting_texts(account):
    """The settings of ``account`` as ``{field: text}``, for saying what changed: accounts.json's
    field names, dollars as $ amounts, defaults said in words."""
    money = lambda nusd: "none" if nusd is None else f"${usd_text(nusd)}"  # noqa: E731
    texts = {
        "budget_usd": money(account.budget_nusd),
        "daily_budget_usd": money(account.daily_budget_nusd),
        "rank": str(account.rank),
        "weight": str(account.weight),
        "models": ", ".join(account.models) if account.models else "every priced model",
        "clients_only": "true" if account.clients_only else "false",
        "admin_key_env": account.admin_key_env or "none",
        "api_key_id": account.api_key_id or "none",
        "dedicated_key": "true" if account.dedicated_key else "false",
        "warn_at": (
            "default (80, 95)" if account.warn_at is None else ", ".join(map(str, account.warn_at)) or "off"
        ),
    }
    for label, cap in account.clients:
        texts[f"clients.{label}.budget_usd"] = money(cap)
    for label, cap in account.client_tokens:
        texts[f"clients.{label}.tokens"] = f"{cap:,}"
    return texts


def describe_changes(old, new):
    """``[(field, old text, new text), ...]`` for each setting that differs, in a stable order:
    accounts.json's fields, then each client's caps by label."""
    before, after = _setting_texts(old), _setting_texts(new)
    fields = list(before) + [field for field in after if field not in before]
    order = {name: index for index, name in enumerate(FIELDS)}
    fields.sort(key=lambda field: (order.get(field.split(".")[0], len(order)), field))
    return [
        (field, before.get(field, "none"), after.get(field, "none"))
        for field in fields
        if before.get(field, "none") != after.get(field, "none")
    ]


def parse_lookup(value, root="lookup", where=" in accounts.json"):
    """Validate a secret lookup command: an argv list whose arguments may hold ``{name}``."""
    example = 'such as ["op", "read", "op://Private/{name}/credential"]'
    if not isinstance(value, list) or not value:
        raise invalid(
            f"{root}{where}: must be a non-empty list of program and arguments, {example}"
        )
    if len(value) > MAX_LOOKUP_ARGS:
        raise invalid(f"{root}{where}: has more than {MAX_LOOKUP_ARGS} arguments")
    for index, item in enumerate(value):
        field = f"{root}[{index}]{where}"
        if (
            not isinstance(item, str)
            or not item
            or "\0" in item
            or len(item) > MAX_LOOKUP_ARG_CHARS
        ):
            raise invalid(f"{field}: must be a non-empty string")
        if looks_like_key(item):
            raise invalid(
                f"{field}: looks like an API key (it contains sk-ant); the command must look the key up, not hold it"
            )
    if not any("{name}" in item for item in value):
        raise invalid(
            f"{root}{where}: no argument holds {{name}}, which is replaced by the key_env to look up, {example}"
        )
    return tuple(value)


def read_dotenv(path):
    """Read a dotenv file into a dict, without touching ``os.environ``.

    Rules (the common subset of dotenv dialects): ``NAME=value`` lines, optional ``export ``,
    ``#`` comments, blank lines; values in single quotes are literal and may span lines; values in
    double quotes may span lines and understand ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r``;
    unquoted values end at the line's end or at `` #``, with surrounding spaces removed. A bare
    ``NAME`` is present and empty (an empty key is invalid, not a miss: docs/architecture.md "Key
    resolution"). Nothing is interpolated. A missing file is empty; a malformed one is an error
    naming the file and line.
    """
    path = pathlib.Path(path)
    label = path.name
    problem = None
    try:
        text = read_limited(path).decode("utf-8-sig")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except FileProblem as error:
        problem = error.reason
        if problem.startswith("is not a regular file"):
            problem += f"; make {label} a plain file or remove it"
    if problem:
        raise invalid(f"{label}: {problem}")
    return _parse_dotenv(text, label)


_DOTENV_NAME = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


def _parse_dotenv(text, label):
    values = {}
    pos = 0
    line = 1
    size = len(text)
    while pos < size:
        end_of_line = text.find("\n", pos)
        if end_of_line == -1:
            end_of_line = size
        raw = text[pos:end_of_line]
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            pos = end_of_line + 1
            line += 1
            continue
        match = _DOTENV_NAME.match(text, pos, end_of_line)
        if match is None:
            raise invalid(f"{label} line {line}: expected NAME=value")
        name = match.group(1)
        pos = match.end()
        if pos >= end_of_line or text[pos] == "#":
            # A bare NAME (or NAME and a comment): present and empty.
            values[name] = ""
            pos = end_of_line + 1
            line += 1
            continue
        if text[pos] != "=":
            raise invalid(f"{label} line {line}: expected NAME=value")
        pos += 1
        value_start = pos
        while pos < end_of_line and text[pos] in " \t":
            pos += 1
        start_line = line
        quote = text[pos] if pos < end_of_line else ""
        if quote in ("'", '"'):
            value, pos = _quoted(text, pos + 1, quote)
            if pos is None:
                raise invalid(f"{label} line {start_line}: a quoted value is never closed")
            line += text.count("\n", match.start(), pos)
            rest_end = text.find("\n", pos)
            rest_end = size if rest_end == -1 else rest_end
            rest = text[pos:rest_end].strip()
            if rest and not rest.startswith("#"):
                raise invalid(f"{label} line {line}: unexpected text after a quoted value")
            pos = rest_end + 1
        else:
            # The blanks after "=" count for the comment rule: "A =  # note" is empty, "A=#x" is "#x".
            value = text[value_start:end_of_line]
            comment = re.search(r"[ \t]#", value)
            if comment:
                value = value[: comment.start()]
            value = value.strip()
            pos = end_of_line + 1
        values[name] = value
        line += 1
    return values


def _quoted(text, pos, quote):
    """Read a quoted value starting after its opening quote; returns (value, position after)."""
    if quote == "'":
        close = text.find("'", pos)
        if close == -1:
            return None, None
        return text[pos:close], close + 1
    out = []
    while pos < len(text):
        char = text[pos]
        if char == '"':
            return "".join(out), pos + 1
        if char == "\\" and pos + 1 < len(text) and text[pos + 1] in _ESCAPES:
            out.append(_ESCAPES[text[pos + 1]])
            pos += 2
            continue
        out.append(char)
        pos += 1
    return None, None


def llm_user_dir():
    """``llm.user_dir()``'s path without creating it (``paths.user_dir()`` creates it with the
    umask's mode), so ``save_accounts_file`` can create it 0700."""
    configured = os.environ.get("LLM_USER_PATH")
    if configured:
        return pathlib.Path(configured)
    import click

    return pathlib.Path(click.get_app_dir("io.datasette.llm"))


def accounts_file_path():
    return llm_user_dir() / ACCOUNTS_FILE


def read_accounts_file(path=None):
    """``(accounts, lookup)`` from accounts.json; ``accounts`` is None when the file declares none.

    The file is ``{"accounts": [...], "lookup": ["argv", "{name}"]}``, either key optional.
    """
    path = pathlib.Path(path) if path else accounts_file_path()
    problem = None
    try:
        text = read_limited(path).decode("utf-8")
    except FileNotFoundError:
        return None, None
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except FileProblem as error:
        problem = error.reason
    if problem:
        raise invalid(f"{ACCOUNTS_FILE}: {problem}; fix or remove {path}")
    data = loads(text, ACCOUNTS_FILE)
    if not isinstance(data, dict):
        raise invalid(f'{ACCOUNTS_FILE}: must be a JSON object with "accounts" and/or "lookup"')
    if any(key not in ("accounts", "lookup") for key in data):
        raise invalid(
            f"{ACCOUNTS_FILE}: unknown top-level field; allowed fields are accounts, lookup"
        )
    accounts = parse_accounts(data["accounts"], ACCOUNTS_FILE) if "accounts" in data else None
    lookup = parse_lookup(data["lookup"]) if "lookup" in data else None
    return accounts, lookup


def overriding_source(*, environ=None, cwd=None):
    """The source above accounts.json that is present here, or None (its validity aside)."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ:
        return "environment"
    cwd = pathlib.Path.cwd() if cwd is None else pathlib.Path(cwd)
    for filename in DOTENV_FILES:
        if VARIABLE in read_dotenv(cwd / filename):
            return filename
    return None


def load_declaration(*, environ=None, cwd=None):
    """The declaration in force for this process and working directory (docs/architecture.md
    "Environment")."""
    environ = os.environ if environ is None else environ
    cwd = pathlib.Path.cwd() if cwd is None else pathlib.Path(cwd)
    file_accounts, lookup = read_accounts_file()
    if VARIABLE in environ:
        return Declaration(parse_accounts(environ[VARIABLE], "environment"), "environment", lookup)
    for filename in DOTENV_FILES:
        values = read_dotenv(cwd / filename)
        if VARIABLE in values:
            return Declaration(parse_accounts(values[VARIABLE], filename), filename, lookup)
    if file_accounts is not None:
        return Declaration(file_accounts, ACCOUNTS_FILE, lookup)
    return Declaration((), None, lookup)


def usd_text(nusd):
    """Nanodollars as the shortest exact decimal string with at least two places: "12.50"."""
    whole, frac = divmod(nusd, NANO)
    digits = f"{frac:09d}".rstrip("0").ljust(2, "0")
    return f"{whole}.{digits}"


def account_to_json(account):
    """The declaration object for ``account``, defaults left out; parses back to an equal Account."""
    data = {
        "name": account.name,
        "key_env": account.key_env,
        "budget_usd": usd_text(account.budget_nusd),
    }
    if account.daily_budget_nusd is not None:
        data["daily_budget_usd"] = usd_text(account.daily_budget_nusd)
    if account.rank != 0:
        data["rank"] = account.rank
    if account.weight != 1:
        data["weight"] = account.weight
    if account.models is not None:
        data["models"] = list(account.models)
    if account.clients or account.client_tokens:
        clients = {}
        for label, cap in account.clients:
            clients.setdefault(label, {})["budget_usd"] = usd_text(cap)
        for label, cap in account.client_tokens:
            clients.setdefault(label, {})["tokens"] = cap
        data["clients"] = dict(sorted(clients.items()))
    if account.clients_only:
        data["clients_only"] = True
    if account.admin_key_env is not None:
        data["admin_key_env"] = account.admin_key_env
    if account.api_key_id is not None:
        data["api_key_id"] = account.api_key_id
    if account.dedicated_key:
        data["dedicated_key"] = True
    if account.warn_at is not None:
        data["warn_at"] = list(account.warn_at)
    return data


def save_accounts_file(accounts, lookup):
    """Write accounts.json: validated first, then atomically (temp file + ``os.replace``), 0600.

    No accounts leaves "accounts" out (nothing declared). The llm user directory is created 0700
    if it does not exist yet. The result is validated by parsing it back, so a file this writes
    always loads.
    """
    data = {}
    if accounts:
        data["accounts"] = [account_to_json(account) for account in accounts]
        parse_accounts(data["accounts"], ACCOUNTS_FILE)
    if lookup is not None:
        data["lookup"] = list(lookup)
        parse_lookup(data["lookup"])
    directory = llm_user_dir()
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return write_private_json(directory / ACCOUNTS_FILE, data)


# The edits ``llm accounts add/remove/lookup`` make. They change accounts.json only: a higher
# source (see ``overriding_source``) still replaces it wherever that source is present.


@contextlib.contextmanager
def _editing():
    """Hold the accounts.json edit lock across a read-modify-write, so two ``llm accounts add``
    at once both land (an exclusive ``flock`` on a lock file beside it, released on exit or
    crash). Where ``fcntl`` is missing (Windows) edits are not serialized."""
    directory = llm_user_dir()
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    fd = os.open(directory / f".{ACCOUNTS_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add_account(account, *, replace=False):
    """Add ``account`` to accounts.json, or replace the one of that name.

    Returns ``(path, replaced)``: ``replaced`` is the account it replaced, or None.

    A name is one budget allocation with one immutable key reference (docs/architecture.md "What a
    credit period fixes"), so
    replacing an account may change its budgets, rank, weight and models but not its key_env.
    """
    with _editing():
        return _add_account(account, replace)


def _add_account(account, replace):
    accounts, lookup = read_accounts_file()
    accounts = list(accounts or ())
    existing = next((i for i, a in enumerate(accounts) if a.name == account.name), None)
    if existing is None:
        accounts.append(account)
    elif not replace:
        raise invalid(
            f"NAME: an account named {account.name} already exists; use 'llm accounts set' to change some of its settings, "
            "use --replace to declare it anew, or choose another name"
        )
    elif accounts[existing].key_env != account.key_env:
        raise AccountsError(
            "account_config_conflict",
            f"account {account.name} uses another key_env; an account keeps its key_env (docs/architecture.md \"What a credit period fixes\"), so declare a new account for a different key",
            account=account.name,
        )
    else:
        replaced, accounts[existing] = accounts[existing], account
    for other in accounts:
        if other.name != account.name and other.key_env == account.key_env:
            raise invalid(
                f"--key-env: account {other.name} already uses this key_env; each account needs its own key"
            )
    _refuse_a_shared_api_key_id(account, accounts)
    return save_accounts_file(accounts, lookup), None if existing is None else replaced


def _refuse_a_shared_api_key_id(account, accounts):
    """``add`` and ``set`` name the option and the other account, never the id (the declaration's
    own rule, ``parse_accounts``, names field paths)."""
    if account.api_key_id is None:
        return
    for other in accounts:
        if other.name != account.name and other.api_key_id == account.api_key_id:
            raise invalid(
                f"--api-key-id: account {other.name} already declares this api_key_id; one API key id belongs to one account"
            )


def set_account(name, change, *, check=None):
    """Change the account ``name`` in accounts.json: ``change(account)`` returns the new account
    (``changed_settings``), ``check(account)`` may refuse it (the ledger's credit-period rule)
    before anything is written. Returns ``(path, old, new)``; nothing is written when nothing
    changed."""
    name = _name(name, "NAME")
    with _editing():
        accounts, lookup = read_accounts_file()
        accounts = list(accounts or ())
        index = next((i for i, a in enumerate(accounts) if a.name == name), None)
        if index is None:
            raise AccountsError(
                "not_found", f"NAME: no account in {ACCOUNTS_FILE} has this name; see 'llm accounts list' (or declare it with 'llm accounts add')"
            )
        old = accounts[index]
        new = change(old)
        if new == old:
            return accounts_file_path(), old, new
        if new.api_key_id != old.api_key_id:
            _refuse_a_shared_api_key_id(new, accounts)
        if check is not None:
            check(new)
        accounts[index] = new
        return save_accounts_file(accounts, lookup), old, new


def remove_account(name):
    """Remove the account ``name`` from accounts.json; returns the file path."""
    name = _name(name, "NAME")
    with _editing():
        return _remove_account(name)


def _remove_account(name):
    accounts, lookup = read_accounts_file()
    remaining = [a for a in accounts or () if a.name != name]
    if len(remaining) == len(accounts or ()):
        # An unknown name is not repeated: a key pasted as NAME must not be echoed.
        raise AccountsError("not_found", f"NAME: no account in {ACCOUNTS_FILE} has this name; see 'llm accounts list'")
    return save_accounts_file(remaining, lookup)


def set_lookup(argv):
    """Set (``argv``) or clear (``None``) the secret lookup command in accounts.json."""
    lookup = parse_lookup(list(argv), "COMMAND", "") if argv is not None else None
    with _editing():
        accounts, _ = read_accounts_file()
        return save_accounts_file(accounts or (), lookup)
