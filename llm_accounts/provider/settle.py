"""The provider pass: settle open attempts from the organization's usage report, by command
(``llm accounts reconcile --from-provider``) or by itself off the request path
(docs/architecture.md "Settling from the provider").

For each account that declares ``admin_key_env``: its open attempts are grouped into windows, the
usage report's one-minute buckets and the ledger's attempts of each window are read, the rules in
``provider_usage`` decide, and each settlement is one ``Ledger.reconcile`` naming the report and
the bucket. The adjustment id is derived from the attempt, so two processes running the pass at
once record one settlement, never two.

The account's API key id must be declared (``api_key_id``): the pass never settles from an inferred
one. An organization's only active key need not be this account's (an ``admin_key_env`` naming
another organization's admin key would settle this account's attempts from another key's usage),
so without the declaration the account's attempts stay open and the pass names the id it found and
how to confirm it. The Admin API never returns a key, only a partial hint of one; comparing a hint
would mean handling key material, so this project never matches the two.

The automatic pass is started by a routed prompt, as the model-list refresh is: a daemon thread
the prompt never waits for, at most once per ``RUN_EVERY`` across processes, backing off
``RETRY_AFTER`` after a failure, never raising into the prompt and never running the secret
lookup command (a password manager is not woken off the request path).
"""

import dataclasses
import datetime as dt
import json
import logging
import pathlib
import threading
import uuid

from .. import clock, keys, pricing, scrub, transport
from . import client as admin_api, rules as provider_usage
from ..catalog import _locked  # the same flock helper the model-list refresh uses
from ..errors import AccountsError
from ..paths import FileProblem, read_limited, user_dir, write_private_json

log = logging.getLogger("llm_accounts.provider")

FILENAME = "accounts-provider.json"
# Open attempts further apart than this are read as separate windows of the report.
WINDOW_GAP = dt.timedelta(minutes=60)
# Minutes read around a window's attempts, so a span that begins or ends near them is seen whole.
MARGIN = dt.timedelta(minutes=15)
RUN_EVERY = dt.timedelta(minutes=2)
# The automatic pass looks at attempts opened within this long; older ones have had their chances
# (what the report could settle, it settled) and 'llm accounts reconcile --from-provider' reads them all.
AUTOMATIC_LOOKBACK = dt.timedelta(hours=24)
RETRY_AFTER = dt.timedelta(minutes=15)
_NAMESPACE = uuid.UUID("6f1d0d3e-3c1e-4a4e-9b5e-3f3b8c1d2a10")

_background = None


@dataclasses.dataclass
class AccountResult:
    account: str
    settled: list = dataclasses.field(default_factory=list)  # provider_usage.Settle
    kept: list = dataclasses.field(default_factory=list)  # provider_usage.Keep
    error: AccountsError | None = None
    skipped: str | None = None  # why the account was not read (no admin key declared)

    def as_dict(self):
        return {
            "account": self.account,
            "settled": [
                {"attempt_id": s.attempt_id, "cost_nusd": s.cost_nusd, "source_ref": s.source_ref} for s in self.settled
            ],
            "kept_open": [{"attempt_id": k.attempt_id, "reason": k.reason, "message": k.message} for k in self.kept],
            "error": None if self.error is None else {"code": self.error.code, "message": self.error.message},
            "skipped": self.skipped,
        }


def state_path():
    return user_dir() / FILENAME


def load_state(path=None):
    path = pathlib.Path(path or state_path())
    try:
        data = json.loads(read_limited(path))
    except FileNotFoundError:
        return {}
    except FileProblem as error:  # a FIFO must not hang a prompt (docs/security.md "Files read")
        raise AccountsError("declaration_invalid", f"{FILENAME}: {error.reason}; remove {path}") from None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _update_state(path, change):
    with _locked(path):
        data = load_state(path)
        change(data)
        write_private_json(path, data, sort_keys=True)


def adjustment_id(attempt_id):
    """One id per attempt for a settlement from the report: a second pass records nothing new."""
    return uuid.uuid5(_NAMESPACE, f"usage_report:{attempt_id}").hex


def key_id_for(account, http, base, admin_secret):
    """``(key id, inferred)``: the declared ``api_key_id``, else the id of the organization's only
    active API key, which ``inferred`` marks as a guess nothing may be settled from."""
    if account.api_key_id:
        return account.api_key_id, False
    ids = admin_api.active_key_ids(http, base, admin_secret, scrub.run_detector(admin_secret.reveal()))
    if len(ids) != 1:
        raise AccountsError(
            "declaration_invalid",
            f"api_key_id: account {account.name}'s organization lists {len(ids)} active API keys and the Admin API "
            "returns no key to match ours with, only a partial hint this project does not compare; declare the key's id "
            f"(llm accounts set {account.name} --api-key-id apikey_...)",
            account=account.name,
        )
    return ids[0], True


def windows(open_rows):
    """Open attempts grouped into ``(start, end)`` windows to read, each with ``MARGIN`` around it."""
    times = sorted(dt.datetime.fromisoformat(row["created_at"]).astimezone(dt.timezone.utc) for row in open_rows)
    out = []
    for at in times:
        if out and at - out[-1][1] <= WINDOW_GAP:
            out[-1][1] = at
        else:
            out.append([at, at])
    return [
        (provider_usage.minute_of(first - MARGIN), provider_usage.minute_of(last + MARGIN) + provider_usage.MINUTE)
        for first, last in out
    ]


def settle_account(account, declaration, ledger, http, *, base, cwd=None, now=None, since=None):
    """Run the pass for one account (its attempts opened at ``since`` or later, default all);
    returns its ``AccountResult``. Errors reaching the Admin API or resolving its key are the
    result's ``error``: every open attempt then stays open."""
    result = AccountResult(account.name)
    if not account.admin_key_env:
        result.skipped = "no admin_key_env declared"
        return result
    now = now or clock.now()
    revision = pricing.current_revision()
    # An attempt whose process is gone gets its outcome recorded (cancelled), so the report may
    # settle it instead of keeping it as in flight (docs/architecture.md "A process that is gone").
    try:
        ledger.abandoned()
    except AccountsError as error:
        result.error = error
        return result
    open_rows = [
        row for row in ledger.open_attempts(account=account.name)
        if since is None or dt.datetime.fromisoformat(row["created_at"]) >= since
    ]
    if not open_rows:
        return result
    secret = None
    try:
        secret = keys.resolve_key(account.admin_key_env, declaration, cwd=cwd)
        key_id, inferred = key_id_for(account, http, base, secret)
        if inferred:
            result.skipped = (
                f"api_key_id is not declared; the organization's only active API key is {key_id}: if it is "
                f"{account.name}'s, confirm it with llm accounts set {account.name} --api-key-id {key_id}; "
                "its open attempts stay open"
            )
            return result
        for start, end in windows(open_rows):
            end = min(end, provider_usage.minute_of(now) + provider_usage.MINUTE)
            data = admin_api.usage_minutes(http, base, secret, start, end, key_id)
            report, covered = provider_usage.report_minutes(data, key_id, revision)
            # The first minute may hold usage of attempts reserved just before the window, which
            # were not read: nothing that touches it is matched.
            covered.discard(start)
            rows = ledger.attempts_between(account.name, start, end)
            attempts = [provider_usage.Attempt.from_row(row, revision) for row in rows]
            verdicts = provider_usage.decide(
                attempts, report, covered, key_id=key_id, now=now, price=provider_usage.price_with_revision
            )
            for verdict in verdicts:
                if isinstance(verdict, provider_usage.Keep):
                    result.kept.append(verdict)
                    continue
                try:
                    ledger.reconcile(adjustment_id(verdict.attempt_id), verdict.attempt_id, verdict.cost_nusd, verdict.source_ref, now=now)
                except AccountsError as error:
                    if error.code != "settlement_conflict":
                        raise
                    continue  # its own process settled it meanwhile
                result.settled.append(verdict)
    except AccountsError as error:
        result.error = error
    except Exception as error:  # transport failures: the class, never the text
        result.error = AccountsError("transport_error", f"the Admin API could not be read ({type(error).__name__})")
    finally:
        secret = None
    return result


def settle_from_provider(declaration, ledger, names=None, *, base=None, cwd=None, now=None, since=None):
    """The pass over the declared accounts (``names``: only these); one ``AccountResult`` each."""
    base = base or transport.base_url()
    wanted = [a for a in declaration.accounts if names is None or a.name in names]
    with transport.client() as http:
        return [
            settle_account(a, declaration, ledger, http, base=base, cwd=cwd, now=now, since=since)
            for a in wanted
        ]


# The automatic pass, off the request path.


def due(declaration, state, now):
    """Whether an automatic pass should start: an account declares an Admin API key, and no pass
    ran within ``RUN_EVERY`` nor failed within ``RETRY_AFTER``."""
    if not any(account.admin_key_env for account in declaration.accounts):
        return False
    last = clock.parse_aware(state.get("last_run"))
    if last is not None and now - last < RUN_EVERY:
        return False
    failed = clock.parse_aware(state.get("failed_at"))
    return failed is None or now - failed >= RETRY_AFTER


def settle_in_background(declaration, now=None):
    """Start a daemon thread running the pass, or do nothing; returns the thread or None. Never
    raises: a prompt never fails because the report could not be read."""
    global _background
    if not any(account.admin_key_env for account in declaration.accounts):
        return None  # nothing to read: no file is opened on the prompt's path
    try:
        path = state_path()
        if not due(declaration, load_state(path), now or clock.now()):
            return None
        if _background is not None and _background.is_alive():
            return None
        from ..paths import ledger_path

        # Where the thread writes and whom it asks are fixed now, not when it runs.
        args = (declaration, path, transport.base_url(), pathlib.Path.cwd(), ledger_path())
        thread = threading.Thread(target=_settle_quietly, args=args, name="llm-accounts-provider-pass", daemon=True)
        thread.start()
        _background = thread
        return thread
    except Exception as error:
        log.debug("automatic provider pass not started (%s)", type(error).__name__)
        return None


def _settle_quietly(declaration, path, base, cwd, ledger_location):
    from ..ledger import Ledger

    try:
        with _locked(path, "pass", blocking=False) as mine:
            if not mine:
                return  # another process is running the pass
            now = clock.now()
            if not due(declaration, load_state(path), now):
                return
            # Never the secret lookup command off the request path (docs/security.md "Child processes").
            quiet = dataclasses.replace(declaration, lookup=None)
            with Ledger(ledger_location) as ledger:
                results = settle_from_provider(
                    quiet, ledger, base=base, cwd=cwd, now=now, since=now - AUTOMATIC_LOOKBACK
                )
            failed = [r for r in results if r.error is not None]
            settled = sum(len(r.settled) for r in results)
            log.debug("automatic provider pass: %d settled, %d accounts failed", settled, len(failed))

            def record(data):
                data["last_run"] = clock.isoformat(now)
                if failed:
                    data["failed_at"], data["error"] = clock.isoformat(now), failed[0].error.code
                else:
                    data.pop("failed_at", None)
                    data.pop("error", None)

            _update_state(path, record)
    except Exception as error:
        log.debug("automatic provider pass failed (%s)", type(error).__name__)


def status_note(state):
    """What ``llm accounts status`` says about the automatic pass: its last failure, if the latest
    pass failed, else None (a failure is otherwise silent: the pass never speaks in a prompt)."""
    failed, error = clock.parse_aware(state.get("failed_at")), state.get("error")
    if failed is None or not isinstance(error, str) or not error.isidentifier():
        return None
    when = failed.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"The automatic provider pass failed ({error}) at {when}; open attempts wait for the next one "
        "or for 'llm accounts reconcile --from-provider', which says why"
    )


def wait_for_background(timeout=None):
    thread = _background
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


