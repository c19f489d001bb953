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
import os
import pathlib
import threading
import uuid

from .. import clock, keys
from ..catalog import _locked  # the same flock helper the model-list refresh uses
from ..errors import AccountsError
from ..paths import FileProblem, read_limited, user_dir, write_private_json
from ..pricing import prices
from ..wire import scrub, transport
from . import client as admin_api, report, rules as provider_usage

log = logging.getLogger("llm_accounts.provider")

FILENAME = "accounts-provider.json"
REPORT_SETTING = "LLM_ACCOUNTS_PROVIDER_REPORT"
# "The API supports polling once per minute for sustained use": one claim per organization.
POLL_EVERY = dt.timedelta(minutes=1)
# Attempts reserved this long before a window are read with it: a stream that long may reach in.
LOOK_BEHIND = dt.timedelta(hours=6)
# Open attempts further apart than this are read as separate windows of the report.
WINDOW_GAP = dt.timedelta(minutes=60)
# Minutes read around a window's attempts, so a span that begins or ends near them is seen whole.
MARGIN = dt.timedelta(minutes=15)
RUN_EVERY = dt.timedelta(minutes=2)
# The automatic pass looks at attempts opened within this long; older ones have had their chances
# (what the report could settle, it settled) and 'llm accounts reconcile --from-provider' reads them all.
AUTOMATIC_LOOKBACK = dt.timedelta(hours=24)
RETRY_AFTER = dt.timedelta(minutes=15)
# An attempt the report keeps finding nothing for (an unbilled 5xx, say) is read again after
# BACKOFF_FIRST, then twice as long each time, up to BACKOFF_MOST; time alone cures these reasons.
BACKOFF_FIRST = dt.timedelta(minutes=2)
BACKOFF_MOST = dt.timedelta(hours=4)
TIME_CURES = frozenset({"in_flight", "not_final", "not_covered"})
# An organization whose Analytics API answered 404/403 is read on the legacy report alone this long.
UNOFFERED_FOR = dt.timedelta(hours=24)
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


def report_api():
    """Which usage report the pass reads: ``analytics`` (the default: the Analytics API, the
    legacy report where an organization's Analytics API refuses) or ``legacy``
    (``LLM_ACCOUNTS_PROVIDER_REPORT``; docs/architecture.md "Settling from the provider")."""
    value = os.environ.get(REPORT_SETTING, "analytics").strip().lower() or "analytics"
    if value not in ("analytics", "legacy"):
        raise AccountsError("declaration_invalid", f"{REPORT_SETTING}: must be analytics or legacy")
    return value


def _read(http, base, secret, start, end, key_ids, api, revision, organization, unoffered, now):
    """One window of the organization's usage report, as a ``report.Report``: the Analytics API
    unless told otherwise, the legacy report where the Analytics API is not offered (404/403).
    ``unoffered`` (``{organization: when}``) remembers such a refusal for ``UNOFFERED_FOR``, so
    each later window costs one request, not two."""
    known = clock.parse_aware(unoffered.get(organization)) if unoffered is not None else None
    if api == "analytics" and (known is None or now - known >= UNOFFERED_FOR):
        try:
            return report.parse(admin_api.analytics_usage(http, base, secret, start, end, key_ids), revision)
        except AccountsError as error:
            if not admin_api.refused_as_unoffered(error):
                raise
            if unoffered is not None:
                unoffered[organization] = clock.isoformat(now)
    return report.parse(admin_api.usage_minutes(http, base, secret, start, end, key_ids), revision)


def _organizations(accounts):
    """Accounts grouped by their organization's Admin API key variable, in declaration order."""
    out = {}
    for account in accounts:
        if account.admin_key_env:
            out.setdefault(account.admin_key_env, []).append(account)
    return out


def settle_organization(admin_key_env, accounts, declaration, ledger, http, *, base, cwd=None, now=None, since=None,
                        api=None, due=None, unoffered=None):
    """Run the pass for one organization's ``accounts``: one claim on its report (at most one
    poll a minute across every process on the ledger), one read per window covering every key id,
    the rules per account. ``due(row)``: whether an open attempt is read this time (the automatic
    pass backs off attempts the report keeps finding nothing for). Returns ``AccountResult``s."""
    now = now or clock.now()
    revision = prices.current_revision()
    results = {account.name: AccountResult(account.name) for account in accounts}
    try:
        ledger.abandoned()  # a gone process's attempt gets its outcome (docs/architecture.md "A process that is gone")
    except AccountsError as error:
        for result in results.values():
            result.error = error
        return list(results.values())
    open_by_account = {}
    for account in accounts:
        rows = [
            row for row in ledger.open_attempts(account=account.name)
            if (since is None or dt.datetime.fromisoformat(row["created_at"]) >= since) and (due is None or due(row))
        ]
        if rows:
            open_by_account[account.name] = rows
    if not open_by_account:
        return list(results.values())
    secret = None
    try:
        secret = keys.resolve_key(admin_key_env, declaration, cwd=cwd)
        key_ids = {}
        for account in accounts:
            if account.name not in open_by_account:
                continue
            key_id, inferred = key_id_for(account, http, base, secret)
            if inferred:
                results[account.name].skipped = (
                    f"api_key_id is not declared; the organization's only active API key is {key_id}: if it is "
                    f"{account.name}'s, confirm it with llm accounts set {account.name} --api-key-id {key_id}; "
                    "its open attempts stay open"
                )
                continue
            key_ids[account.name] = key_id
        if not key_ids:
            return list(results.values())
        if all(row["outcome"] is None for name in key_ids for row in open_by_account[name]):
            # Every one is in flight: nothing can be settled, so the report is not read (nor claimed).
            for name in key_ids:
                results[name].kept.extend(
                    provider_usage.Keep(row["id"], name, "in_flight", provider_usage.REASONS["in_flight"])
                    for row in open_by_account[name]
                )
            return list(results.values())
        if not ledger.claim_poll(admin_key_env, POLL_EVERY, now=now):
            for name in key_ids:
                results[name].skipped = (
                    "its organization's usage report was read less than a minute ago (the Admin API asks for at most "
                    "one poll a minute); its open attempts wait for the next pass"
                )
            return list(results.values())
        api = api or report_api()
        wanted = [row for name in key_ids for row in open_by_account[name]]
        decided = set()  # an attempt read in two windows is decided in the first
        for start, end in windows(wanted):
            end = min(end, provider_usage.minute_of(now) + provider_usage.MINUTE)
            read = _read(http, base, secret, start, end, sorted(set(key_ids.values())), api, revision,
                         admin_key_env, unoffered, now)
            for account in accounts:
                if account.name not in key_ids:
                    continue
                # Attempts reserved well before the window may still reach into it (a long stream):
                # they are read too, so their usage is never taken for another's.
                rows = ledger.attempts_between(account.name, start - LOOK_BEHIND, end)
                attempts = [provider_usage.Attempt.from_row(row, revision) for row in rows]
                verdicts = provider_usage.decide(
                    attempts, read, key_id=key_ids[account.name], dedicated=bool(getattr(account, "dedicated_key", False)),
                    now=now, price=provider_usage.price_with_revision,
                )
                wanted_ids = {row["id"] for row in open_by_account[account.name]} - decided
                verdicts = [v for v in verdicts if _ids(v) & wanted_ids and not _ids(v) & decided]
                for verdict in verdicts:
                    decided.update(_ids(verdict))
                _apply(ledger, results[account.name], verdicts, now)
    except AccountsError as error:
        for name in open_by_account:
            results[name].error = error
    except Exception as error:  # transport failures: the class, never the text
        failure = AccountsError("transport_error", f"the Admin API could not be read ({type(error).__name__})")
        for name in open_by_account:
            results[name].error = failure
    finally:
        secret = None
    return list(results.values())


def _ids(verdict):
    if isinstance(verdict, provider_usage.SettleGroup):
        return {attempt_id for attempt_id, _ in verdict.members}
    return {verdict.attempt_id}


def _apply(ledger, result, verdicts, now):
    """Record each settlement (one transaction each; a group's in one) and each verdict kept."""
    for verdict in verdicts:
        if isinstance(verdict, provider_usage.Keep):
            result.kept.append(verdict)
            continue
        if isinstance(verdict, provider_usage.Settle):
            members = [(adjustment_id(verdict.attempt_id), verdict.attempt_id, verdict.cost_nusd,
                        provider_usage.proven_usage_json(verdict.usage))]
            settled = [verdict]
        else:
            members = [(adjustment_id(attempt_id), attempt_id, share, None) for attempt_id, share in verdict.members]
            settled = [provider_usage.Settle(attempt_id, verdict.account, share, verdict.source_ref, verdict.usage)
                       for attempt_id, share in verdict.members]
        try:
            ledger.reconcile_group(members, verdict.source_ref, now=now)
        except AccountsError as error:
            if error.code != "settlement_conflict":
                raise
            continue  # its own process settled it meanwhile
        result.settled.extend(settled)


def settle_from_provider(declaration, ledger, names=None, *, base=None, cwd=None, now=None, since=None, api=None, due=None,
                         unoffered=None):
    """The pass over the declared accounts (``names``: only these); one ``AccountResult`` each,
    in declaration order. Accounts of one organization are read together."""
    base = base or transport.base_url()
    api = api or report_api()  # a bad setting is refused before any organization is claimed
    wanted = [a for a in declaration.accounts if names is None or a.name in names]
    results = {a.name: AccountResult(a.name, skipped="no admin_key_env declared") for a in wanted if not a.admin_key_env}
    with transport.client() as http:
        for admin_key_env, members in _organizations(wanted).items():
            for result in settle_organization(admin_key_env, members, declaration, ledger, http, base=base, cwd=cwd,
                                              now=now, since=since, api=api, due=due, unoffered=unoffered):
                results[result.account] = result
    return [results[a.name] for a in wanted]


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


def backoff_due(state, now):
    """``due(row)`` for the automatic pass: an attempt the report kept finding nothing for is
    read again only when its back-off has passed."""
    entries = state.get("backoff") if isinstance(state.get("backoff"), dict) else {}

    def due(row):
        entry = entries.get(row["id"])
        at = clock.parse_aware(entry[1]) if isinstance(entry, list) and len(entry) == 2 else None
        return at is None or at <= now

    return due


def next_backoff(state, results, now):
    """The back-off entries after a pass: an attempt kept for a reason time alone does not cure
    (anything but in flight, not final, not covered) waits ``BACKOFF_FIRST``, doubling to
    ``BACKOFF_MOST``; a settled one is dropped, and so is any entry older than the lookback."""
    old = state.get("backoff") if isinstance(state.get("backoff"), dict) else {}
    settled = {s.attempt_id for r in results for s in r.settled}
    out = {}
    for attempt_id, entry in old.items():
        at = clock.parse_aware(entry[1]) if isinstance(entry, list) and len(entry) == 2 else None
        if attempt_id not in settled and at is not None and now - at < AUTOMATIC_LOOKBACK:
            out[attempt_id] = entry
    for result in results:
        for kept in result.kept:
            if kept.reason in TIME_CURES:
                out.pop(kept.attempt_id, None)
                continue
            count = out.get(kept.attempt_id, [0])[0]
            count = count + 1 if isinstance(count, int) else 1
            wait = min(BACKOFF_FIRST * 2 ** min(count - 1, 16), BACKOFF_MOST)
            out[kept.attempt_id] = [count, clock.isoformat(now + wait)]
    return out


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
                state = load_state(path)
                unoffered = dict(state.get("analytics_unoffered") or {}) if isinstance(state.get("analytics_unoffered"), dict) else {}
                results = settle_from_provider(
                    quiet, ledger, base=base, cwd=cwd, now=now, since=now - AUTOMATIC_LOOKBACK,
                    due=backoff_due(state, now), unoffered=unoffered,
                )
            backoff = next_backoff(state, results, now)
            failed = [r for r in results if r.error is not None]
            settled = sum(len(r.settled) for r in results)
            log.debug("automatic provider pass: %d settled, %d accounts failed", settled, len(failed))

            def record(data):
                data["last_run"] = clock.isoformat(now)
                data["backoff"] = backoff
                data["analytics_unoffered"] = unoffered
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


