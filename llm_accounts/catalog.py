"""Which models each account serves, refreshed from ``GET /v1/models`` (docs/architecture.md "An
account declaration" and "Model lists").

``llm accounts refresh-models`` asks each account's organization which models it may use and
keeps the ids (never a key) in ``accounts-models.json`` beside ``accounts.json``, with when they
were fetched. New conversations then go only to accounts that serve the requested model. An
account never refreshed is assumed to serve every priced model, as before.

A refresh that fails keeps the account's previous list and records the failure (its error code
and when), so ``llm accounts status`` can say the list is old and why. A list older than a day is
refreshed automatically by a background thread that a routed prompt starts: the prompt never
waits for it (it routes on the list it read) and the next prompt uses the new list. The thread
resolves keys in this process exactly as an attempt does, so no key reaches ``os.environ`` or a
child process's environment; it never raises into the prompt.

The thread dies with its process, so an automatic refresh is recorded as started before it asks
(``started_at``, ``tries``): one cut off by its process exiting is seen by the next prompt as not
finished and retried after a ``backoff``, not by every prompt. Each account's result is saved as
soon as it is known, and every write replaces the file whole (``paths.write_private_json``), so
no process leaves a half-written list.
"""

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import pathlib
import threading

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from . import clock, keys
from .errors import AccountsError
from .paths import FileProblem, read_limited, user_dir, write_private_json
from .wire import transport

log = logging.getLogger("llm_accounts.catalog")

FILENAME = "accounts-models.json"
PAGE_LIMIT = 1000
MAX_PAGES = 20
# A list older than this is refreshed in the background by the next routed prompt.
STALE_AFTER = dt.timedelta(days=1)
# After a failed or unfinished automatic refresh, prompts wait this long before trying that
# account again, doubled for each further try in a row (at most STALE_AFTER), so a refused key or
# a stalled GET /v1/models is not asked on every prompt.
RETRY_AFTER = dt.timedelta(hours=1)
# The file holds every account's list: at most MAX_PAGES x PAGE_LIMIT ids of MAX_ID_CHARS each.
MAX_FILE_BYTES = 64 * 1024 * 1024

_background = None  # the last background refresh thread started by this process


def cache_path():
    return user_dir() / FILENAME


def load(path=None):
    """``{account: {"models": [...], "refreshed_at": iso, ...}}``; missing or not JSON means {}.

    A file that is not a regular file of at most ``MAX_FILE_BYTES`` is ``declaration_invalid``
    (docs/security.md "Files read"): a FIFO must not hang every prompt."""
    path = pathlib.Path(path or cache_path())
    try:
        data = json.loads(read_limited(path, MAX_FILE_BYTES))
    except FileNotFoundError:
        return {}
    except FileProblem as error:
        raise AccountsError(
            "declaration_invalid",
            f"{FILENAME}: {error.reason}; remove {path} (llm accounts refresh-models writes it again)",
        ) from None
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def _locked(path, purpose="edit", blocking=True):
    """An exclusive ``flock`` on a lock file beside ``path`` (one per ``purpose``: "edit" guards a
    read-modify-write, "refresh" an automatic refresh in flight); yields False when ``blocking``
    is off and another process holds it. Where ``fcntl`` is missing nothing is serialized."""
    if fcntl is None:
        yield True
        return
    fd = os.open(path.parent / f".{path.name}.{purpose}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _hold(path, purpose):
    """A descriptor holding the ``purpose`` lock beside ``path`` without waiting, or None when
    another process holds it; ``_release`` it (any thread may). -1 where ``fcntl`` is missing."""
    if fcntl is None:
        return -1
    fd = os.open(path.parent / f".{path.name}.{purpose}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _release(fd):
    if fd is not None and fd >= 0:
        os.close(fd)


def _save(data, path):
    write_private_json(path, data, sort_keys=True)


class Listed(list):
    """The model ids an account listed and kept, with how many were ``dropped``."""

    dropped = 0


MAX_ID_CHARS = 128


def kept_ids(candidates, holds):
    """``(ids, dropped)``: the listed ids that may be stored and shown. Provider strings are
    untrusted (docs/security.md "Provider strings"): an id holding a run of the key (``holds``,
    ``scrub.run_detector`` on the decoded value) is dropped whole, as is one that is not a short
    printable string; nothing of it is kept, logged or printed."""
    ids, dropped = [], 0
    for value in candidates:
        if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable() and not holds(value):
            ids.append(value)
        else:
            dropped += 1
    return ids, dropped


def fetch_model_ids(secret, http, base=None):
    """Every model id the key's organization lists, following ``has_more`` pages; a ``Listed``
    holding only ids that ``kept_ids`` keeps."""
    from .wire.scrub import run_detector

    base = base or transport.base_url()
    holds = run_detector(secret.reveal())
    ids, after = Listed(), None
    for _ in range(MAX_PAGES):
        params = {"limit": PAGE_LIMIT}
        if after:
            params["after_id"] = after
        body = transport.get_bounded(
            http, base + "/v1/models", params, transport.headers(secret, stream=False), "GET /v1/models", "a list"
        )
        page = json.loads(body)
        page = page if isinstance(page, dict) else {}
        data = page.get("data") if isinstance(page.get("data"), list) else []
        kept, dropped = kept_ids((item.get("id") if isinstance(item, dict) else None for item in data), holds)
        ids.extend(kept)
        ids.dropped += dropped
        if not page.get("has_more"):
            break
        # The next page starts after this one's last id, sent back in the URL (which httpx logs):
        # only an id that would itself be kept.
        after, bad = kept_ids([page.get("last_id")], holds)
        if bad:
            break
        after = after[0]
    return ids


def refresh(declaration, names=None, *, automatic=False, path=None, base=None, cwd=None, now=None):
    """Refresh the listed accounts (default all); returns ``{account: ids or AccountsError}``.

    A failure keeps the account's previous list and records ``failed_at`` and ``error`` (a code,
    never provider text); a success clears them. ``automatic`` marks a background refresh.
    """
    path = pathlib.Path(path or cache_path())
    wanted = [a for a in declaration.accounts if names is None or a.name in names]
    results = {}
    with transport.client() as http:
        for account in wanted:
            secret = None
            try:
                secret = keys.resolve_key(account.key_env, declaration, cwd=cwd)
                ids = fetch_model_ids(secret, http, base)
            except AccountsError as error:
                results[account.name] = error
            except Exception as error:  # transport failures: name the class, never the text
                results[account.name] = AccountsError("transport_error", f"GET /v1/models failed ({type(error).__name__})")
            else:
                results[account.name] = Listed(sorted(set(ids)))
                results[account.name].dropped = ids.dropped
            finally:
                secret = None
            # Saved now: a later account's request may outlive the process.
            _record(path, account.name, results[account.name], clock.isoformat(now or clock.now()), automatic)
    return results


def _record(path, name, result, at, automatic):
    with _locked(path):
        data = load(path)
        entry = data.get(name)
        if isinstance(result, list):
            data[name] = {"models": result, "refreshed_at": at}
        elif isinstance(entry, dict) and isinstance(entry.get("models"), list):
            # The old list stays in force; the failure is recorded beside it, and the refresh has
            # finished (its tries still count for the backoff).
            entry = {key: value for key, value in entry.items() if key != "started_at"}
            data[name] = {**entry, "failed_at": at, "error": result.code, "automatic": automatic}
        else:
            return
        _save(data, path)


def _mark_started(path, names, at):
    """Record that an automatic refresh of ``names`` starts now, before anything is asked: if the
    process exits first, the next prompt sees a refresh that did not finish."""
    with _locked(path):
        data = load(path)
        for name in names:
            entry = data[name]
            tries = entry.get("tries")
            data[name] = {**entry, "started_at": at, "tries": (tries if type(tries) is int and tries > 0 else 0) + 1}
        _save(data, path)


# Automatic refresh off the request path


def stale_accounts(declaration, served, now):
    """Names of declared accounts whose list is older than ``STALE_AFTER`` and whose last refresh
    since that list (failed, or started and not finished) is older than ``backoff``. Accounts
    never refreshed have no list to keep fresh: they serve every priced model until ``llm accounts
    refresh-models`` is run."""
    names = []
    for account in declaration.accounts:
        entry = served.get(account.name)
        if not isinstance(entry, dict) or not isinstance(entry.get("models"), list):
            continue
        fetched = clock.parse_aware(entry.get("refreshed_at"))
        if fetched is not None and now - fetched < STALE_AFTER:
            continue
        tried = [t for t in (clock.parse_aware(entry.get("failed_at")), clock.parse_aware(entry.get("started_at"))) if t is not None]
        if fetched is not None and tried and max(tried) > fetched and now - max(tried) < backoff(entry.get("tries")):
            continue
        names.append(account.name)
    return names


def backoff(tries):
    """How long after its last try an account's list is tried again: ``RETRY_AFTER`` doubled for
    each automatic try in a row after the first, at most ``STALE_AFTER``."""
    tries = tries if type(tries) is int and tries > 1 else 1
    return min(RETRY_AFTER * 2 ** min(tries - 1, 16), STALE_AFTER)


def refresh_stale_in_background(declaration, served=None, now=None):
    """Start a daemon thread refreshing the stale lists, or do nothing; returns the thread or None.

    Called by a routed prompt after it has read the lists it routes on, so the prompt never waits
    for ``GET /v1/models``. Anything that goes wrong is logged by class and swallowed: a prompt
    never fails because a list could not be refreshed."""
    global _background
    lock = None
    try:
        path = cache_path()
        now = now or clock.now()
        served = load(path) if served is None else served
        if not stale_accounts(declaration, served, now) or (_background is not None and _background.is_alive()):
            return None
        lock = _hold(path, "refresh")
        if lock is None:
            return None  # another process is refreshing
        # Under the lock: another process may have refreshed these, or started to, meanwhile.
        names = stale_accounts(declaration, load(path), now)
        if not names:
            return None
        # Recorded here, not in the thread: the prompt may end, and its process exit, before the
        # thread runs. A small file write, and only when a list is due; never GET /v1/models.
        _mark_started(path, names, clock.isoformat(now))
        # Where the thread writes and whom it asks are fixed now, not when it runs. The thread
        # releases the lock when it ends (or the process does, when it exits).
        thread = threading.Thread(
            target=_refresh_quietly,
            args=(declaration, frozenset(names), path, transport.base_url(), pathlib.Path.cwd(), lock),
            name="llm-accounts-refresh-models",
            daemon=True,
        )
        thread.start()
        lock = None
        _background = thread
        return thread
    except Exception as error:
        log.debug("automatic model list refresh not started (%s)", type(error).__name__)
        return None
    finally:
        _release(lock)


def _refresh_quietly(declaration, names, path, base, cwd, lock):
    try:
        # Never the secret lookup command off the request path: it may wake a password manager
        # nobody asked for. A key only it holds is recorded as credential_missing, and 'llm
        # accounts refresh-models' (which may run it) refreshes that list.
        quiet = dataclasses.replace(declaration, lookup=None)
        refresh(quiet, names, automatic=True, path=path, base=base, cwd=cwd)
    except Exception as error:
        log.debug("automatic model list refresh failed (%s)", type(error).__name__)
    finally:
        _release(lock)


def wait_for_background(timeout=None):
    """Join the last background refresh (tests, and a caller that wants the new list now)."""
    thread = _background
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


# Reading the lists


@dataclasses.dataclass(frozen=True)
class ListStatus:
    """What ``llm accounts status`` says about one account's model list."""

    models: int | None  # how many ids it lists; None: never refreshed (serves every priced model)
    refreshed_at: str | None
    stale: bool
    failed_at: str | None = None  # the latest refresh that failed after the list was fetched
    error: str | None = None
    automatic: bool = False
    started_at: str | None = None  # an automatic refresh that started after both and never finished

    def as_dict(self):
        return dataclasses.asdict(self)

    def note(self):
        """A short note for the status table, or None when there is nothing to say."""
        if self.models is None:
            return None
        fetched = _short(self.refreshed_at)
        if self.started_at is not None:
            return f"model list automatic refresh did not finish (started {_short(self.started_at)}); keeping the list from {fetched}"
        if self.failed_at is not None:
            how = "automatic refresh" if self.automatic else "refresh"
            return f"model list {how} failed ({self.error}) {_short(self.failed_at)}; keeping the list from {fetched}"
        if self.stale:
            return f"model list from {fetched} is stale"
        return None


def list_status(name, served, now):
    entry = served.get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("models"), list):
        return ListStatus(None, None, False)
    fetched, failed = clock.parse_aware(entry.get("refreshed_at")), clock.parse_aware(entry.get("failed_at"))
    failing = failed is not None and (fetched is None or failed > fetched)
    started = clock.parse_aware(entry.get("started_at"))
    unfinished = started is not None and (fetched is None or started > fetched) and (failed is None or started > failed)
    return ListStatus(
        models=len(entry["models"]),
        refreshed_at=entry.get("refreshed_at") if fetched is not None else None,
        stale=fetched is None or now - fetched >= STALE_AFTER,
        failed_at=entry.get("failed_at") if failing else None,
        error=entry.get("error") if failing and isinstance(entry.get("error"), str) else None,
        automatic=bool(entry.get("automatic")) if failing else False,
        started_at=entry.get("started_at") if unfinished else None,
    )


def why_not_served(account, model, revision, served):
    """Why ``account`` (as declared) does not serve ``model``: its declared ``models`` or its
    fetched list (docs/architecture.md "Model lists")."""
    wanted = _canonical((model,), revision)[0]
    if account.models is not None and wanted not in _canonical(account.models, revision):
        return f"does not serve {model}: not in its declared models"
    entry = served.get(account.name)
    if isinstance(entry, dict) and isinstance(entry.get("models"), list):
        return (
            f"does not serve {model}: its model list from {_short(entry.get('refreshed_at'))} lacks it "
            "(llm accounts refresh-models fetches it again)"
        )
    return f"does not serve {model}"


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


def _short(value):
    parsed = clock.parse_aware(value)
    return "an unknown time" if parsed is None else parsed.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
