"""The stand-in's JSON config: keys, their organizations and their behaviours.

Errors name the field and the rule, never the value: a config holds keys.
"""

import hashlib
import json
import math
import re

BEHAVIOURS = (
    "ok",
    "rate_limited",
    "spend_limit",
    "overloaded",
    "overloaded_final",
    "api_error",
    "api_error_final",
    "bad_gateway",
    "unavailable",
    "gateway_timeout",
    "unauthorized",
    "forbidden",
    "credit_balance_too_low",
    "usage_limit_reached",
    "prompt_too_long",
    "max_tokens_too_large",
    "stream_error",
    "stream_rate_limit_error",
    "stream_authentication_error",
    "stream_permission_error",
    "stream_billing_error",
    "stream_credit_balance_too_low",
    "slow",
    "drop",
    "echo_key",
    "refusal",
    "search_overrun",
    "counts_grow",
)

KEY_FIELDS = (
    "label", "key", "organization", "behaviour", "script", "delay", "min_cache_tokens", "retry_after", "api_key_id",
    "shapes", "inference_geo", "inference_geo_default",
)
TOP_FIELDS = ("keys", "min_cache_tokens", "admin_keys", "report_delay", "report_bucketing", "organizations", "models")
# Per organization: its workspace's default inference geo, and whether it has the Usage and Cost
# Analytics API beta (without it the endpoints answer 404, as to an organization not enrolled).
ORGANIZATION_FIELDS = ("inference_geo_default", "analytics")
MODEL_FIELDS = ("id", "context_window", "max_output")
_MODEL_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")
ADMIN_KEY_FIELDS = ("key", "organization")
# The id shape the Admin API gives API keys ("apikey_" then base62).
API_KEY_ID = re.compile(r"apikey_[A-Za-z0-9]{1,64}")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
# Fields set_behaviour() may change at run time.
RUNTIME_FIELDS = ("script", "delay", "min_cache_tokens", "retry_after", "shapes", "inference_geo")
# Shapes real answers carry that a key's answers take on when listed in its ``shapes`` (they
# combine with any behaviour): gzip (a gzip-encoded body or stream, to a client that accepts it),
# stop_details_null (``stop_details: null`` in messages and message_delta), caller (a ``caller``
# on tool_use blocks), parallel_tools (a tool_use block per tool, at least two, in one answer),
# text_before_thinking (a text block before the thinking block), retry_after_200 (a
# ``retry-after`` header on a 200), set_cookie (a ``set-cookie`` header on every answer).
SHAPES = (
    "gzip", "stop_details_null", "caller", "parallel_tools", "text_before_thinking", "retry_after_200", "set_cookie",
)
INFERENCE_GEOS = ("not_available", "global", "us")
# Where a request may ask to run (``inference_geo`` in a Messages body, or a workspace default).
GEO_CHOICES = ("global", "us")
# Which instant puts a request in its report bucket: when it arrived, or when it completed.
BUCKETINGS = ("arrival", "completion")


class ConfigError(ValueError):
    """A config (or a set_behaviour call) is invalid; the message names the field and the rule."""


def load_config(path):
    """Read and validate a stand-in config file; returns the normalized config dict."""
    from ..paths import FileProblem, read_limited

    try:
        text = read_limited(path).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError("--config: cannot read the file (No such file or directory)") from None
    except FileProblem as error:
        raise ConfigError(f"--config: the file {error.reason}") from None
    except UnicodeDecodeError:
        raise ConfigError("--config: the file is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        # error.msg names the rule and the position only, never the text around it.
        raise ConfigError(
            f"--config: not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    return validate_config(data)


def validate_config(data):
    """Check a config dict and return a normalized copy with every optional field filled in."""
    if not isinstance(data, dict):
        raise ConfigError("config: must be a JSON object with a 'keys' list")
    _no_unknown(data, TOP_FIELDS, "config")
    keys = data.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ConfigError("keys: must be a non-empty list of key objects")
    default_minimum = _optional_int(data, "min_cache_tokens", "min_cache_tokens")
    normalized, labels, secrets = [], {}, {}
    for index, entry in enumerate(keys):
        where = f"keys[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be an object")
        _no_unknown(entry, KEY_FIELDS, where)
        label = entry.get("label")
        if not isinstance(label, str) or not label.strip() or len(label) > 64:
            raise ConfigError(f"{where}.label: must be a non-empty string of at most 64 characters")
        if "sk-ant" in label.lower():
            raise ConfigError(f"{where}.label: must not look like a key (it appears in logs)")
        if label in labels:
            raise ConfigError(f"{where}.label: duplicate of keys[{labels[label]}].label")
        labels[label] = index
        key = entry.get("key")
        if not isinstance(key, str) or not key or key != key.strip():
            raise ConfigError(f"{where}.key: must be a non-empty string without surrounding spaces")
        if key in secrets:
            raise ConfigError(f"{where}.key: the same key is already declared at keys[{secrets[key]}]")
        secrets[key] = index
        organization = entry.get("organization", f"org-{label}")
        if not isinstance(organization, str) or not organization:
            raise ConfigError(f"{where}.organization: must be a non-empty string")
        behaviour = entry.get("behaviour", "ok")
        check_behaviour(behaviour, f"{where}.behaviour")
        settings = check_settings(entry, where)
        minimum = settings["min_cache_tokens"]
        geo_default = _geo_default(entry, where)
        api_key_id = entry.get("api_key_id", default_api_key_id(label))
        if not isinstance(api_key_id, str) or not API_KEY_ID.fullmatch(api_key_id):
            raise ConfigError(f"{where}.api_key_id: must be 'apikey_' followed by 1-64 letters or digits")
        normalized.append(
            {
                "label": label,
                "key": key,
                "organization": organization,
                "behaviour": behaviour,
                "script": settings["script"],
                "delay": settings["delay"],
                "min_cache_tokens": default_minimum if minimum is None else minimum,
                "retry_after": settings["retry_after"],
                "api_key_id": api_key_id,
                "shapes": settings["shapes"],
                "inference_geo": settings["inference_geo"],
                "inference_geo_default": geo_default,
            }
        )
    admin_keys = _admin_keys(data.get("admin_keys", []), secrets)
    delay = data.get("report_delay", 0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
        raise ConfigError("report_delay: must be a number of seconds >= 0")
    bucketing = data.get("report_bucketing", "arrival")
    if bucketing not in BUCKETINGS:
        raise ConfigError(f"report_bucketing: must be one of {', '.join(BUCKETINGS)}")
    return {
        "keys": normalized,
        "min_cache_tokens": default_minimum,
        "admin_keys": admin_keys,
        "report_delay": float(delay),
        "report_bucketing": bucketing,
        "organizations": _organizations(data.get("organizations", {})),
        "models": _models(data.get("models", [])),
    }


def _organizations(value):
    """``{organization: {"inference_geo_default": "global"|"us", "analytics": true|false}}``:
    the settings of an organization rather than of one key (``analytics`` defaults to true)."""
    if not isinstance(value, dict):
        raise ConfigError("organizations: must be an object of organization settings")
    out = {}
    for index, (name, entry) in enumerate(value.items()):
        where = f"organizations[{index}]"  # by position: a name is the config's, never echoed
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: the organization must be a non-empty string")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be an object")
        _no_unknown(entry, ORGANIZATION_FIELDS, where)
        analytics = entry.get("analytics", True)
        if not isinstance(analytics, bool):
            raise ConfigError(f"{where}.analytics: must be true or false")
        out[name] = {"inference_geo_default": _geo_default(entry, where), "analytics": analytics}
    return out


def _geo_default(entry, where):
    """A workspace's default inference geo: None (requests run where the API chooses, and report
    what the key's ``inference_geo`` says), ``global`` or ``us``."""
    value = entry.get("inference_geo_default")
    if value is not None and value not in GEO_CHOICES:
        raise ConfigError(f"{where}.inference_geo_default: must be one of {', '.join(GEO_CHOICES)}")
    return value


def _models(value):
    """Models served besides the stand-in's own table (``models.configured_model``)."""
    if not isinstance(value, list):
        raise ConfigError("models: must be a list of {id, context_window, max_output} objects")
    out = []
    for index, entry in enumerate(value):
        where = f"models[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be an object")
        _no_unknown(entry, MODEL_FIELDS, where)
        if not isinstance(entry.get("id"), str) or not _MODEL_ID.fullmatch(entry["id"]):
            raise ConfigError(f"{where}.id: must be a lower-case model id")
        for name in ("context_window", "max_output"):
            number = entry.get(name)
            if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
                raise ConfigError(f"{where}.{name}: must be a positive integer")
        out.append(dict(entry))
    return out


def default_api_key_id(label):
    """A stable id per label, shaped like the Admin API's (``apikey_01`` and base62)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = int.from_bytes(hashlib.sha256(f"api_key_id:{label}".encode()).digest(), "big")
    digits = []
    while len(digits) < 22:
        number, digit = divmod(number, 62)
        digits.append(alphabet[digit])
    return "apikey_01" + "".join(digits)


def _admin_keys(value, secrets):
    """Admin API keys, each for one organization: they read its usage and cost reports."""
    if not isinstance(value, list):
        raise ConfigError("admin_keys: must be a list of {key, organization} objects")
    out = []
    for index, entry in enumerate(value):
        where = f"admin_keys[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be an object")
        _no_unknown(entry, ADMIN_KEY_FIELDS, where)
        key, organization = entry.get("key"), entry.get("organization")
        if not isinstance(key, str) or not key or key != key.strip():
            raise ConfigError(f"{where}.key: must be a non-empty string without surrounding spaces")
        if key in secrets or any(key == other["key"] for other in out):
            raise ConfigError(f"{where}.key: the same key is already declared")
        if not isinstance(organization, str) or not organization:
            raise ConfigError(f"{where}.organization: must be a non-empty string")
        out.append({"key": key, "organization": organization})
    return out


def check_behaviour(value, where):
    if value not in BEHAVIOURS:
        raise ConfigError(f"{where}: must be one of {', '.join(BEHAVIOURS)}")
    return value


def check_settings(entry, where):
    """Validate the fields a key may carry besides its identity (also used by set_behaviour)."""
    script = entry.get("script", [])
    if not isinstance(script, list):
        raise ConfigError(f"{where}.script: must be a list of behaviours")
    for position, step in enumerate(script):
        check_behaviour(step, f"{where}.script[{position}]")
    delay = entry.get("delay", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
        raise ConfigError(f"{where}.delay: must be a number of seconds >= 0")
    retry_after = entry.get("retry_after", 1)
    if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0:
        raise ConfigError(f"{where}.retry_after: must be an integer number of seconds >= 0")
    shapes = entry.get("shapes", [])
    if not isinstance(shapes, list) or any(shape not in SHAPES for shape in shapes):
        raise ConfigError(f"{where}.shapes: must be a list of shapes, each one of {', '.join(SHAPES)}")
    inference_geo = entry.get("inference_geo", "not_available")
    if inference_geo not in INFERENCE_GEOS:
        raise ConfigError(f"{where}.inference_geo: must be one of {', '.join(INFERENCE_GEOS)}")
    return {
        "script": list(script),
        "delay": float(delay),
        "min_cache_tokens": _optional_int(entry, "min_cache_tokens", f"{where}.min_cache_tokens"),
        "retry_after": retry_after,
        "shapes": list(dict.fromkeys(shapes)),
        "inference_geo": inference_geo,
    }


def _optional_int(entry, field, where):
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: must be an integer >= 0")
    return value


def _no_unknown(entry, allowed, where):
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        name = unknown[0]
        # Name the field only when it is plainly a field name (never echo something key-shaped).
        shown = f" {name!r}" if _FIELD_NAME.fullmatch(name) and "sk-ant" not in name.lower() else ""
        raise ConfigError(f"{where}: unknown field{shown}; allowed: {', '.join(allowed)}")
