"""Which models each account serves, refreshed from ``GET /v1/models`` (docs/architecture.md "An
account declaration").

``llm accounts refresh-models`` asks each account's organization which models it may use and
keeps the ids (never a key) in ``accounts-models.json`` beside ``accounts.json``. New
conversations then go only to accounts that serve the requested model. An account never
refreshed, or whose refresh failed, is assumed to serve every priced model, as before.
"""

import dataclasses
import json
import os
import tempfile

from . import clock, keys, transport
from .errors import AccountsError
from .paths import user_dir

FILENAME = "accounts-models.json"
PAGE_LIMIT = 1000
MAX_PAGES = 20


def cache_path():
    return user_dir() / FILENAME


def load():
    """``{account: {"models": [...], "refreshed_at": iso}}``; missing or unreadable means {}."""
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(data):
    path = cache_path()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".accounts-models-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fetch_model_ids(secret, http):
    """Every model id the key's organization lists, following ``has_more`` pages."""
    ids, after = [], None
    for _ in range(MAX_PAGES):
        params = {"limit": PAGE_LIMIT}
        if after:
            params["after_id"] = after
        response = http.get(
            transport.base_url() + "/v1/models", params=params, headers=transport.headers(secret, stream=False)
        )
        if response.status_code != 200:
            from . import classify

            info = classify.parse_error_body(response.content[: transport.ERROR_BODY_LIMIT + 1])
            raise AccountsError(
                classify.error_code_for(classify.outcome_for_status(response.status_code)),
                f"GET /v1/models answered HTTP {response.status_code} {info.provider_error_type}",
                http_status=response.status_code,
            )
        page = response.json()
        ids.extend(item["id"] for item in page.get("data", []) if isinstance(item.get("id"), str))
        if not page.get("has_more"):
            break
        after = page.get("last_id")
    return ids


def refresh(declaration, names=None):
    """Refresh the listed accounts (default all); returns ``{account: ids or AccountsError}``."""
    wanted = [a for a in declaration.accounts if names is None or a.name in names]
    data, results = load(), {}
    with transport.client() as http:
        for account in wanted:
            try:
                secret = keys.resolve_key(account.key_env, declaration)
                ids = fetch_model_ids(secret, http)
            except AccountsError as error:
                results[account.name] = error
                continue
            except Exception as error:  # transport failures: name the class, never the text
                results[account.name] = AccountsError("transport_error", f"GET /v1/models failed ({type(error).__name__})")
                continue
            finally:
                secret = None
            data[account.name] = {"models": sorted(set(ids)), "refreshed_at": clock.isoformat(clock.now())}
            results[account.name] = data[account.name]["models"]
    _save(data)
    return results


def effective_accounts(accounts, revision, served=None):
    """Accounts with ``models`` as canonical ids: declared models, narrowed to what each serves.

    The ledger compares ``models`` with the quote's model id, so aliases on either side are
    resolved through the price revision here.
    """
    served = load() if served is None else served
    out = []
    for account in accounts:
        allowed = _canonical(account.models, revision) if account.models is not None else None
        listed = served.get(account.name, {}).get("models") if isinstance(served.get(account.name), dict) else None
        if isinstance(listed, list):
            serving = _canonical(listed, revision)
            allowed = serving if allowed is None else tuple(m for m in allowed if m in serving)
        out.append(dataclasses.replace(account, models=allowed) if allowed != account.models else account)
    return tuple(out)


def _canonical(model_ids, revision):
    ids = []
    for model_id in model_ids:
        model = revision.model(model_id)
        ids.append(model.id if model is not None else model_id)
    return tuple(dict.fromkeys(ids))
