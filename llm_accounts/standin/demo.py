"""The stand-in's built-in demo configuration (``llm accounts standin`` with no ``--config``).

Two keys, labels ``alpha`` and ``beta``, behaviour ``ok``, each a fresh random key shaped like a
real one (the ``sk-ant-`` prefix keeps the scrubbing rule from masking the first character of
every reply that quotes one, docs/security.md "Scrubbing"), each in its own organization with an
Admin API key that reads its reports. The keys go to llm's key store under ``STANDIN_ALPHA_KEY``,
``STANDIN_BETA_KEY``, ``STANDIN_ALPHA_ADMIN_KEY`` and ``STANDIN_BETA_ADMIN_KEY`` and nowhere else,
so accounts can name them.
"""

import json
import secrets
import string

from ..paths import FileProblem, read_limited, user_dir, write_private_json
from .config import ConfigError

DEMO_KEYS = (("alpha", "STANDIN_ALPHA_KEY"), ("beta", "STANDIN_BETA_KEY"))
# Each demo organization's Admin API key, which reads its usage and cost reports.
DEMO_ADMIN_KEYS = (("alpha", "STANDIN_ALPHA_ADMIN_KEY"), ("beta", "STANDIN_BETA_ADMIN_KEY"))


def _key(kind="api03"):
    alphabet = string.ascii_letters + string.digits
    return f"sk-ant-{kind}-standin" + "".join(secrets.choice(alphabet) for _ in range(80)) + "AA"


# Above the default model's ceiling ($3.828 for claude-sonnet-4-6 at its default max_tokens: `llm
# accounts prices`), so the suggested plain `claude-routed` prompt is admitted (docs/routing.md "Budgets
# and the ceiling").
SUGGESTED_BUDGET = "10.00"


def demo_config():
    """The demo configuration: fresh keys, held only in memory until ``store_demo_keys``.

    The stand-in binds its port first and stores the keys only once that worked: a second stand-in
    that cannot bind must not replace the keys a running one serves.
    """
    return {
        "keys": [
            {"label": label, "key": _key(), "organization": f"org-{label}", "behaviour": "ok"}
            for label, _ in DEMO_KEYS
        ],
        "admin_keys": [{"key": _key("admin01"), "organization": f"org-{label}"} for label, _ in DEMO_ADMIN_KEYS],
    }


def store_demo_keys(config):
    """Store the demo configuration's keys and Admin API keys in llm's keys.json (0600), each
    under its variable name."""
    env_names = dict(DEMO_KEYS)
    keys = {env_names[entry["label"]]: entry["key"] for entry in config["keys"]}
    admin_names = {f"org-{label}": env_name for label, env_name in DEMO_ADMIN_KEYS}
    keys.update({admin_names[entry["organization"]]: entry["key"] for entry in config.get("admin_keys", ())})
    _store(keys)


def suggestion(base_url):
    """The two commands that declare the first demo key and prompt through it, as printed."""
    label, env_name = DEMO_KEYS[0]
    return (
        f"llm accounts add {label} --key-env {env_name} --budget {SUGGESTED_BUDGET}",
        f'LLM_ACCOUNTS_BASE_URL={base_url} llm -m claude-routed "hi"',
    )


def description(base_url):
    """What ``llm accounts standin`` prints (to stderr) once it listens: where the keys are and
    how to use them."""
    names = " and ".join(env_name for _, env_name in DEMO_KEYS)
    lines = [
        f"Built-in demo configuration: keys alpha and beta (behaviour ok), stored in llm's key store as {names}. "
        "In another terminal:"
    ]
    lines += [f"  {command}" for command in suggestion(base_url)]
    admin = dict(DEMO_ADMIN_KEYS)[DEMO_KEYS[0][0]]
    lines.append(f"To settle open attempts from its usage report, add --admin-key-env {admin} to the account.")
    return "\n".join(lines)


def _store(keys):
    """Merge ``keys`` into llm's keys.json, atomically and user-only, keeping every other entry."""
    path = user_dir() / "keys.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = json.loads(read_limited(path))
    except FileNotFoundError:
        current = {"// Note": "This file stores secret API credentials. Do not share!"}
    except FileProblem as error:
        # Never replaced: it may hold every other key (docs/security.md "Files read").
        raise ConfigError(f"llm's keys.json {error.reason}; check it with 'llm keys path'") from None
    except ValueError:
        current = {"// Note": "This file stores secret API credentials. Do not share!"}
    if not isinstance(current, dict):
        current = {}
    current.update(keys)
    write_private_json(path, current)
