"""Per-account health: a class-aware cooldown breaker with one half-open probe.

Pure functions over a small ``Health`` record (one ``health`` row); the ledger reads the row,
calls these inside its transaction, and writes what they return. ``None`` means "write nothing":
the row changes only on a change of state or class.

The rules (docs/architecture.md "Failure classes and health"):

- Seven failure classes. ``semantic`` (the model answered, the work was wrong) never touches
  health; an unrecognised failure is ``semantic``, never "unavailable".
- Each class has its own dwell: a credit cap is proven by one response and is not re-proven for
  an hour, a 429 is re-probed in a minute, and transport noise needs a run of three failures
  before it costs an account its place.
- ``auth`` blocks the account until ``llm accounts unblock`` (the ledger sets the block; a
  restart never clears it), so it has no dwell.
- After the dwell exactly one attempt is admitted as the half-open probe. Its success clears the
  failure; its failure starts a new dwell. A probe whose process died is given up after
  ``PROBE_LEASE`` so the account cannot stay cooling forever. The probe in flight is not written
  to the row: it is the attempt admitted at or after the dwell's end whose outcome is not yet
  recorded (the ledger finds it), so a probe cycle writes the row once, with its outcome, and
  ``probe_attempt_id`` names the probe that outcome came from.
- ``transport`` describes the path from one machine, not the account (``HOST_CLASSES``): it is kept
  per host, so one machine's broken network never cools the account for the fleet; every other
  class is a fact about the account and is shared. Each row, the account's and a host's, follows
  the same rules; an attempt is gated by the worse of the account's row and its machine's
  (``worse``).
- A success supersedes an older failure, whichever attempt it came from, but only a failure
  recorded before that attempt was admitted: an attempt that started before the credit ran out
  and finished after proves nothing about the failure (``succeeded_after``).
- ``model_unavailable`` (a 404 on a model) says something about one model on the account, not
  the account: it cools that model there (``ModelHealth``) and other models still route.
- ``llm accounts unblock`` ends any dwell (``clear``), not only an authentication block.
"""

import dataclasses
import datetime as dt

from .wire.classify import FAILURE_CLASSES

#: Classes that say something about the account: all but semantic.
HEALTH_CLASSES = tuple(name for name in FAILURE_CLASSES if name != "semantic")
#: Of those, the classes that say something about one model on the account: they cool the model
#: there (a ``model_health`` row), never the whole account.
MODEL_CLASSES = ("model_unavailable",)
#: Of those, the classes that say something about the path from one machine to the provider, not
#: about the account: they are kept per host (a ``host_health`` row), so a machine whose network
#: is broken cools the account for itself only (docs/architecture.md "Failure classes and health").
HOST_CLASSES = ("transport",)

DWELL = {
    "quota_exhausted": dt.timedelta(hours=1),
    "rate_limited": dt.timedelta(seconds=60),
    "provider_outage": dt.timedelta(seconds=30),
    "model_unavailable": dt.timedelta(minutes=10),
    "transport": dt.timedelta(seconds=30),
}
#: A short outage is tried again soon; the longer it lasts, the longer the wait, up to the
#: class's dwell (docs/architecture.md "Failure classes and health"). A retry-after from the provider
#: sets the wait instead, within the same bounds.
GROWING = ("rate_limited", "provider_outage")
FIRST_DWELL = dt.timedelta(seconds=2)
MIN_RETRY_AFTER = dt.timedelta(seconds=1)
#: Consecutive transport failures before the account starts cooling.
TRANSPORT_RUN = 3
#: How long an unsettled probe holds the half-open slot (its process may have died).
PROBE_LEASE = dt.timedelta(minutes=10)
#: A healthy account's ``last_success_at`` is refreshed at most this often.
SUCCESS_REFRESH = dt.timedelta(minutes=10)

#: The routed error code a cooling account refuses a bound conversation with.
COOLING_CODES = {
    # Out of credit at the provider is the provider's refusal, remembered: not our ledger's budget
    # (docs/architecture.md "Quota exhaustion").
    "quota_exhausted": "request_rejected",
    "rate_limited": "rate_limited",
    "provider_outage": "provider_error",
    "model_unavailable": "request_rejected",
    "transport": "transport_error",
    "auth": "auth_failed",
}


@dataclasses.dataclass(frozen=True)
class Health:
    """One account's health row. Times are aware UTC datetimes or ``None``.

    With ``state == "ok"``, ``failure_class`` and ``http_status`` keep the last failure as
    history, and ``transport_failures`` counts a run of transport failures still below
    ``TRANSPORT_RUN``.
    """

    state: str = "ok"
    failure_class: str | None = None
    http_status: int | None = None
    since: dt.datetime | None = None
    last_failure_at: dt.datetime | None = None
    last_success_at: dt.datetime | None = None
    cooldown_until: dt.datetime | None = None
    probe_attempt_id: str | None = None
    transport_failures: int = 0


def probe_outstanding(health, probe_created_at, now):
    """Whether the half-open slot is taken. ``probe_created_at`` is when the newest attempt
    admitted at or after the dwell's end, whose outcome is not yet recorded, was admitted (None:
    there is none): it holds the slot for ``PROBE_LEASE``."""
    if health is None or health.state != "failing" or probe_created_at is None:
        return False
    return now - probe_created_at < PROBE_LEASE


def probe_since(health):
    """The instant from which an admitted attempt is this row's probe: the dwell's end (the last
    failure's time for a class with no dwell). None for a healthy row."""
    if health is None or health.state != "failing":
        return None
    return health.cooldown_until or health.last_failure_at


def was_probe(health, admitted_at):
    """Whether an attempt admitted at ``admitted_at`` was admitted as this row's probe."""
    since = probe_since(health)
    return since is not None and admitted_at is not None and admitted_at >= since


def shared(health):
    """An account's shared row as admission reads it: a dwell of a host class there (written by
    an older build, or one still running in the fleet) is ignored, since that class belongs to the
    machine that saw it (``HOST_CLASSES``)."""
    if health is not None and health.state == "failing" and health.failure_class in HOST_CLASSES:
        return None
    return health


_GATE_ORDER = ("open", "probe", "cooling", "blocked")


def worse(*gated):
    """Of ``(gate, health, probe_taken)`` triples, the one that restricts most (the first on a
    tie): an attempt needs both its account and its machine to admit it."""
    return max(gated, key=lambda item: _GATE_ORDER.index(item[0]))


def gate(health, now, probe_taken=False):
    """May a new attempt go to this account? One of:

    ``"open"`` (healthy), ``"probe"`` (cooldown over, slot free: admit as the probe),
    ``"cooling"`` (dwell not over, or another attempt holds the probe) or ``"blocked"`` (auth).
    """
    if health is None or health.state == "ok":
        return "open"
    if health.failure_class == "auth":
        return "blocked"
    if health.cooldown_until is not None and now < health.cooldown_until:
        return "cooling"
    return "cooling" if probe_taken else "probe"


def view(health, now, probe_taken=False):
    """The state people see in ``llm accounts status``: ok, cooling, probe_due, probing, auth_failed."""
    verdict = gate(health, now, probe_taken)
    if verdict == "open":
        return "ok"
    if verdict == "blocked":
        return "auth_failed"
    if verdict == "probe":
        return "probe_due"
    past_dwell = health.cooldown_until is None or now >= health.cooldown_until
    return "probing" if past_dwell and probe_taken else "cooling"


def dwell_for(failure_class, now, since, retry_after=None):
    """How long an account cools after a failure of ``failure_class`` (None: no dwell).

    ``since`` is when its run of failures began; ``retry_after`` a ``timedelta`` the provider
    asked for. A rate limit or an outage grows from ``FIRST_DWELL`` with the run's length, so one
    transient 529 costs seconds, not minutes, while a lasting outage is probed rarely."""
    dwell = DWELL.get(failure_class)
    if dwell is None or failure_class not in GROWING:
        return dwell
    if retry_after is not None:
        return min(dwell, max(MIN_RETRY_AFTER, retry_after))
    return min(dwell, max(FIRST_DWELL, now - since))


def _failing(health, failure_class, http_status, now, since, retry_after=None, probe=None):
    dwell = dwell_for(failure_class, now, since, retry_after)
    return Health(
        state="failing",
        failure_class=failure_class,
        http_status=http_status,
        since=since,
        last_failure_at=now,
        last_success_at=health.last_success_at,
        cooldown_until=None if dwell is None else now + dwell,
        probe_attempt_id=probe,
        transport_failures=0,
    )


def record_failure(health, failure_class, http_status, now, attempt_id, retry_after=None, admitted_at=None):
    """The row after a failed attempt of ``failure_class``, admitted at ``admitted_at``, or
    ``None`` when nothing changes."""
    if failure_class not in HEALTH_CLASSES:
        return None
    health = health or Health()
    if health.state == "ok":
        if failure_class == "transport" and health.transport_failures + 1 < TRANSPORT_RUN:
            return dataclasses.replace(
                health,
                failure_class="transport",
                http_status=http_status,
                last_failure_at=now,
                transport_failures=health.transport_failures + 1,
            )
        return _failing(health, failure_class, http_status, now, since=now, retry_after=retry_after)
    if health.failure_class == "auth":
        # Blocked until unblock; later failures add nothing.
        return None
    if failure_class == "auth":
        return _failing(health, "auth", http_status, now, since=health.since or now)
    probe = was_probe(health, admitted_at)
    past_dwell = health.cooldown_until is None or now >= health.cooldown_until
    if probe or past_dwell:
        # The half-open probe (or any attempt after the dwell) failed: a new dwell.
        return _failing(
            health, failure_class, http_status, now, since=health.since or now, retry_after=retry_after,
            probe=attempt_id if probe else None,
        )
    if failure_class == health.failure_class or failure_class == "transport":
        # Still cooling for the same reason; transport noise never overrides a stronger class.
        return None
    changed = _failing(health, failure_class, http_status, now, since=health.since or now)
    # A class change never shortens a dwell already running.
    cooldown = max(health.cooldown_until, changed.cooldown_until)
    return dataclasses.replace(changed, cooldown_until=cooldown, probe_attempt_id=health.probe_attempt_id)


def succeeded_after(last_failure_at, admitted_at):
    """Whether a success can speak for a failure recorded at ``last_failure_at``: its attempt was
    admitted at or after it. An unknown time on either side counts as after."""
    return last_failure_at is None or admitted_at is None or admitted_at >= last_failure_at


def record_success(health, now, admitted_at=None, attempt_id=None):
    """The row after a complete attempt admitted at ``admitted_at``: the success supersedes any
    failure recorded before that admission. A failure recorded later stands (the attempt was
    already under way when the credit ran out, say), and nothing is written."""
    if health is None:
        return Health(state="ok", since=now, last_success_at=now)
    if not succeeded_after(health.last_failure_at, admitted_at):
        return None
    if health.state != "ok" or health.transport_failures:
        return Health(
            state="ok",
            failure_class=health.failure_class,
            http_status=health.http_status,
            since=now,
            last_failure_at=health.last_failure_at,
            last_success_at=now,
            probe_attempt_id=attempt_id if was_probe(health, admitted_at) else None,
        )
    if health.last_success_at is None or now - health.last_success_at >= SUCCESS_REFRESH:
        return dataclasses.replace(health, last_success_at=now)
    return None


def clear_auth(health, now):
    """``llm accounts unblock`` ends an auth failure: the account is healthy until it fails again."""
    if health is not None and health.state == "failing" and health.failure_class == "auth":
        return dataclasses.replace(
            health, state="ok", since=now, cooldown_until=None, probe_attempt_id=None
        )
    return None


def clear(health, now):
    """``llm accounts unblock`` ends any dwell: an authentication failure, a cooldown (rate limits,
    exhausted credit, outages), a probe in flight, a run of transport failures. The failure stays
    as history; ``None`` when there is nothing to clear."""
    if health is None or (health.state == "ok" and not health.transport_failures):
        return None
    return dataclasses.replace(
        health, state="ok", since=now, cooldown_until=None, probe_attempt_id=None, transport_failures=0
    )


# Per-model health on one account


@dataclasses.dataclass(frozen=True)
class ModelHealth:
    """One model's cooldown on one account (a ``model_health`` row); aware UTC datetimes."""

    model: str
    since: dt.datetime
    last_failure_at: dt.datetime
    cooldown_until: dt.datetime


def record_model_failure(current, model, now):
    """The row after ``model`` failed as ``model_unavailable`` on an account, or ``None`` when
    nothing changes: a failure while the model still cools adds nothing, a later one starts a new
    dwell."""
    if current is not None and current.cooldown_until is not None and now < current.cooldown_until:
        return None
    since = current.since if current is not None and current.since is not None else now
    return ModelHealth(model=model, since=since, last_failure_at=now, cooldown_until=now + DWELL["model_unavailable"])


def model_cooling(current, now):
    """Whether the model may not be sent to this account now."""
    return current is not None and current.cooldown_until is not None and now < current.cooldown_until


def model_success_clears(current, admitted_at):
    """Whether a complete attempt of the model, admitted at ``admitted_at``, ends its cooldown row."""
    return current is not None and succeeded_after(current.last_failure_at, admitted_at)
