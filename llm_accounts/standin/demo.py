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


def demo_config():
    """``(config, description)``: the demo keys, stored in llm's keys.json (0600)."""
    keys = {env_name: _key() for _, env_name in DEMO_KEYS}
    keys.update({env_name: _key("admin01") for _, env_name in DEMO_ADMIN_KEYS})
    _store(keys)
    config = {
        "keys": [
            {"label": label, "key": keys[env_name], "organization": f"org-{label}", "behaviour": "ok"}
            for label, env_name in DEMO_KEYS
        ],
        "admin_keys": [{"key": keys[env_name], "organization": f"org-{label}"} for label, env_name in DEMO_ADMIN_KEYS],
    }
    names = " and ".join(env_name for _, env_name in DEMO_KEYS)
    description = (
        f"Built-in demo configuration: keys alpha and beta (behaviour ok), stored in llm's key store as {names}; "
        "declare them with: llm accounts add alpha --key-env STANDIN_ALPHA_KEY --budget 5.00 "
        "(add --admin-key-env STANDIN_ALPHA_ADMIN_KEY to settle open attempts from its usage report)"
    )
    return config, description


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
