"""One routed prompt: quote once, then reserve, sign, send and settle every physical attempt.

The I/O loops (sync and async HTTP) live in ``models.py``; this module holds the decisions, so
both loops make the same ones:

- every physical attempt reserves before it is sent and settles once (docs/architecture.md "Ceilings
  and settlement");
- a key is resolved only for the account the ledger chose, and a failure to resolve settles the
  attempt as never sent (docs/architecture.md "Key resolution");
- a *new* conversation whose first attempt was refused with 429 or 529, or never sent, or found
  no key at all, moves to the next candidate, at most four accounts; nothing else moves
  (docs/architecture.md "Failover");
- a 500, 502, 503 or 504 is unknown (its attempt stays open) but retried on the same account, as
  the SDK does, never moved (docs/architecture.md "Retries");
- a refusal that only ceilings in flight caused waits for room, up to the prompt's bound, then
  says the money is held, not spent (docs/architecture.md "Waiting for room").
"""

import asyncio
import dataclasses
import time
import uuid
import weakref

from . import catalog, clock, keys, notices, room, selection, thresholds
from .errors import AccountsError
from .ledger import Complete, NotSent, Refused, Scope, Unknown, wakeup
from .pricing import price_book, prices, tool_bounds
from .money import INT64_MAX
from .provider import settle as provider_pass
from .records import clients_only, lists_client
from .retries import DEFAULT_RETRIES, Retries, sdk_retries
from .wire import classify, transport
from .wire.scrub import run_detector

MAX_ACCOUNTS = 4  # the bound on moving on (docs/architecture.md "Failover")
MOVE_ON_STATUSES = (429, 529)
RETRIED_CLASSES = ("rate_limited", "provider_outage")  # a 429 or 529 that a wait may cure
# Unknown outcomes the SDK retries: sent again on the same account only, the failed attempt
# keeping its ceiling (docs/architecture.md "Retries").
RETRIED_SERVER_ERRORS = (500, 502, 503, 504)
SMALL_WINDOW_MODEL = "claude-haiku-4-5"  # suggested when a window's ceiling outgrows a budget
GONE_EVERY_S = 5.0  # how often a waiting prompt looks for attempts whose process is gone


@dataclasses.dataclass
class Attempt:
    """A reserved attempt and the key that signs it; the key is dropped when it settles."""

    reservation: object
    secret: object
    # Once message_start counted the input: the shrunk hold and the counts it rests on
    # (docs/pricing.md "Shrinking a hold on message_start").
    hold_nusd: int | None = None
    counts: dict | None = None

    @property
    def id(self):
        return self.reservation.attempt_id

    @property
    def account(self):
        return self.reservation.account


class RoutedCall:
    def __init__(
        self, *, declaration, ledger, body, scope, pinned=None, client=None, revision=None, retries=DEFAULT_RETRIES,
        llm_response_id=None, wait=room.DEFAULT_WAIT_S, notice=None, board=None,
    ):
        self.declaration = declaration
        self.ledger = ledger
        self.body = body
        self.scope = scope
        self.pinned = pinned
        self.client = client
        self.llm_response_id = llm_response_id
        # The one revision that prices the model, shipped or the user's (docs/pricing.md "Which
        # price wins"); the book resolves account model lists across all of them.
        book = revision or price_book.current()
        self.revision = revision or book.revision_for_body(body)
        # Raises unsupported_pricing before anything is reserved or sent.
        self.quote = prices.quote(body, self.revision)
        # Declared models, narrowed to what each account serves (llm accounts refresh-models).
        served = catalog.load()
        self.accounts = catalog.effective_accounts(declaration.accounts, book, served)
        # A list older than a day is fetched again in a background thread: this prompt routes on
        # the lists just read and never waits; the next prompt uses the new ones.
        catalog.refresh_stale_in_background(declaration, served)
        # Likewise, open attempts are settled from the usage report where it leaves no doubt
        # (docs/architecture.md "Settling from the provider").
        provider_pass.settle_in_background(declaration)
        self.records = []
        self.tried = []
        # (account, short summary, error) of each attempt a new conversation moved on from.
        self.failures = []
        self.new_scope = None
        self.retries = Retries(left=retries)
        self.retrying = None  # the account a retry goes back to
        self.pending_wait = None  # seconds the caller waits before calling begin() again
        self.last_retriable = None  # (account, retry-after) of the last refusal worth retrying
        self.retried_error = None  # the 5xx a retry is going back for, raised if it is not admitted
        # Waiting for room: the prompt's place among waiters (docs/architecture.md "Waiting for room").
        self.room = room.Wait(wait)
        self.waiter = str(uuid.uuid4()) if wait > 0 else None
        self.gone_checked = None  # when attempts of processes that are gone were last looked for
        self.notice = notice or _to_stderr
        self.board = board or room.BOARD  # the process's "waiting for" lines
        self.wake = None  # wake-ups while waiting for room (ledger/wakeup.py), or None: poll
        self.waiting_for_room = False  # whether the pending wait is one for room
        self._stop_wake = None

    # Reservation -------------------------------------------------------------------------------

    def begin(self):
        """Reserve the next attempt and resolve its key; raises when nothing may be sent.

        Returns None when the caller should wait ``take_wait()`` seconds and call again: a
        cooldown that ends within the retry wait bound, or a retry of the last account once a new
        conversation has no other account to move on to (docs/architecture.md "Retries").

        After a new conversation moved on, a refusal to reserve another account raises the last
        attempt's real failure instead, naming the accounts tried (docs/errors.md "Move-on that
        runs out").
        """
        attempt_id = str(uuid.uuid4())
        refusal = None
        if self.wake is not None:
            self.wake.mark()  # a wake-up from now on is not lost while this reservation runs
        try:
            reservation = self.ledger.reserve(
                self.scope,
                attempt_id,
                self.quote,
                self.accounts,
                pinned=self.pinned,
                client=self.client,
                llm_response_id=self.llm_response_id,
                exclude=tuple(name for name in self.tried if name != self.retrying),
                waiter=self.waiter,
            )
        except AccountsError as error:
            refusal = error
        if refusal is not None:
            if refusal.held and self._gone_recorded():
                self.waiting_for_room = True
                return None
            if self._wait_out(refusal):
                return None
            self._stop_waiting()
            if refusal.held:
                refusal = self._held(refusal)
                raise self._retry_refused(refusal) or refusal
            raise self._retry_refused(refusal) or self._last_failure(refusal) or self._explained(refusal)
        # Admitted: no longer waiting, so the wake-up passes on to the prompt behind it, for
        # whatever room is left (ledger/wakeup.py).
        self._stop_waiting()
        self.waiting_for_room = False
        if self.new_scope is None:
            self.new_scope = reservation.new_binding
        self.tried.append(reservation.account)
        self.retrying = self.retried_error = None
        self.records.append(
            {
                "id": attempt_id,
                "account": reservation.account,
                "outcome": None,
                "cost_nusd": None,
                "ceiling_nusd": reservation.ceiling_nusd,
            }
        )
        account = self._account(reservation.account)
        missing = None
        try:
            secret = keys.resolve_key(account.key_env, self.declaration)
        except AccountsError as error:
            missing = error
        if missing is not None:
            self._settle(attempt_id, NotSent(), "not_sent", 0)
            error = AccountsError(
                missing.code, f"account '{account.name}': {missing.message}", account=account.name, attempt_id=attempt_id
            )
            if missing.code == "credential_missing" and self._may_move_on():
                # Nothing was sent, so a new conversation moves on as after a 429: within the
                # same bound, never retrying this account (docs/architecture.md "Failover").
                self.failures.append((account.name, "no key", error))
                self.last_retriable = None
                return self.begin()
            raise self._noted(error)
        return Attempt(reservation, secret)

    def take_wait(self):
        wait, self.pending_wait = self.pending_wait, None
        return wait

    def pause(self, seconds):
        """Sleep ``seconds`` before ``begin()`` again; a wait for room ends early when a write frees
        room (docs/architecture.md "Waiting for room")."""
        if self.waiting_for_room and self.wake is not None:
            self.wake.wait(seconds)
        else:
            time.sleep(seconds)

    async def pause_async(self, seconds):
        """``pause`` without blocking the event loop: the process's wake-up thread resolves it."""
        if self.waiting_for_room and self.wake is not None:
            await self.wake.wait_async(seconds)
        else:
            await asyncio.sleep(seconds)

    def _stop_waiting(self):
        """The prompt no longer waits for room: its wake-ups and its notice go."""
        if self._stop_wake is not None:
            self._stop_wake()
            self._stop_wake = self.wake = None

    def revision_knows(self, model_id):
        return self.revision.model(model_id) is not None

    def _wait_out(self, refusal):
        """Whether to wait and call begin() again instead of raising ``refusal``."""
        if refusal.retry_at is not None:
            self.pending_wait = self.retries.cooldown(refusal.retry_at, clock.now())
            return self.pending_wait is not None
        if refusal.held:
            return self._wait_for_room(refusal)
        if self.last_retriable is not None and refusal.code in ("no_account_available", "budget_exhausted"):
            # A new conversation moved on as far as it could: retry where it last failed.
            account, retry_after = self.last_retriable
            return self._retry(account, retry_after)
        return False

    def _gone_recorded(self):
        """Before waiting for ceilings in flight: an attempt of this host whose process is gone
        will never settle by itself, so it is recorded as cancelled (it stays open, no longer in
        flight) and the reservation is tried again at once. Looked for at most every
        ``GONE_EVERY_S`` (docs/architecture.md "A process that is gone")."""
        now = time.monotonic()
        if self.gone_checked is not None and now - self.gone_checked < GONE_EVERY_S:
            return False
        self.gone_checked = now
        try:
            recorded = self.ledger.abandoned()
        except AccountsError:
            return False  # the ledger is busy: wait as before, and look again later
        for attempt_id, name, ceiling in recorded:
            self._say_held_open(attempt_id, name, ceiling, "cancelled: the process that sent it is gone")
        if recorded:
            self.pending_wait = 0
        return bool(recorded)

    def _wait_for_room(self, refusal):
        """Only ceilings in flight stand in the way: wait and reserve again, up to the bound. The
        caller sleeps between reservations, holding no lock, transaction or connection."""
        if self.waiter is None:
            return False
        now = time.monotonic()
        self.pending_wait = self.room.next_delay(now, woken=self.wake is not None)
        if self.pending_wait is None:
            try:
                self.ledger.leave(self.waiter)
            except AccountsError:
                pass  # its place expires by itself (ledger.WAITER_TTL)
            return False
        if self.wake is not None:
            self.wake.refused()  # a wake-up that found no room here may find some for the next
        if self._stop_wake is None:
            # The first refusal: listen for wake-ups, then reserve again at once, so room freed
            # between that refusal and listening is not missed (ledger/wakeup.py).
            self.wake = wakeup.subscribe(self.ledger)
            self.board.start(self.waiter)
            self._stop_wake = weakref.finalize(self, _stopped, self.wake, self.board, self.waiter)
            self.pending_wait = 0
        self.waiting_for_room = True
        if not self.room.noticed and self.room.waited(now) >= room.NOTICE_AFTER_S:
            line = self.board.line(
                self.waiter,
                f"waiting for {selection.held_summary(refusal.held)} "
                f"(up to {self.room.bound_s:g} s; -o wait SECONDS or LLM_ACCOUNTS_WAIT sets it)",
            )
            if line is not None:
                self.room.noticed = True
                if line:
                    self.notice(line)
        return True

    def _held(self, refusal):
        """Past the wait bound: the money is held by attempts in flight, not spent."""
        message = selection.held_refusal(refusal.held, self.room.waited(time.monotonic()), self.room.bound_s)
        if "never moves by itself" in refusal.message:
            message += "; a conversation never moves by itself (llm accounts rebind)"
        return self._noted(AccountsError("budget_exhausted", message, account=refusal.account, held=refusal.held))

    def _retry(self, account, retry_after_s):
        self.pending_wait = self.retries.backoff(retry_after_s)
        if self.pending_wait is None:
            return False
        self.retrying, self.last_retriable = account, None
        return True

    def _retry_refused(self, refusal):
        """The 5xx a retry went back for, once the ledger does not admit the retry (its own
        open ceiling may be what fills the budget): that failure is the news, the refusal why
        it was not retried."""
        if self.retried_error is None:
            return None
        return self._noted(self.retried_error, f"the retry was refused: {refusal.code}: {refusal.message}")

    def _last_failure(self, refusal):
        """The failure that made a new conversation move on, once no other account can take it."""
        if not self.failures or refusal.code not in ("no_account_available", "budget_exhausted"):
            return None
        error = self.failures[-1][2]
        rest = "no other account could take it" + (" (budget_exhausted)" if refusal.code == "budget_exhausted" else "")
        return self._noted(error, rest)

    def _noted(self, error, *extra):
        """``error`` with the accounts tried before its own and the retries spent."""
        earlier = {}
        for name, summary, _ in self.failures:
            if name != error.account:
                earlier.setdefault(name, summary)
        notes = ["also tried " + ", ".join(f"{name} ({summary})" for name, summary in earlier.items())] if earlier else []
        notes += extra
        if self.retries.used:
            notes.append(self.retries.spent())
        if not notes:
            return error
        return AccountsError(
            error.code,
            f"{error.message}; {'; '.join(notes)}",
            account=error.account,
            attempt_id=error.attempt_id,
            http_status=error.http_status,
        )

    def _explained(self, error):
        """A ceiling larger than the room of every account that could take the prompt can never be
        admitted: say why and what helps (docs/errors.md "Move-on that runs out"). Only then: an
        account whose limits would hold the ceiling once spend resets or held money frees is
        no reason to change the model (its refusal already names what fills it)."""
        if error.code != "budget_exhausted":
            return error
        limits = [
            _smallest_limit(a) for a in self.accounts
            if (error.account is None or a.name == error.account)
            and selection.serves(a, self.quote.requested_model)
            and (not clients_only(a) or lists_client(a, self.client))
        ]
        if not limits or any(self.quote.ceiling_nusd <= limit for limit in limits):
            return error
        model = self.revision.model(self.quote.requested_model)
        window = f"{model.context_window:,}-token" if model else "whole"
        small = self.revision.model(SMALL_WINDOW_MODEL)
        if model is not None and small is not None and small.context_window < model.context_window:
            advice = f"try claude-routed/{SMALL_WINDOW_MODEL} (a smaller window) or raise the budget"
        else:
            advice = "lower -o max_tokens or raise the budget"
        who = f"account '{error.account}' cannot take this prompt" if error.account else "no account can take this prompt"
        bound = "; a conversation never moves by itself (llm accounts rebind)" if "never moves by itself" in error.message else ""
        what = f"the model's {window} window plus max_tokens"
        tools = getattr(self.quote, "tool_uses", None)
        if tools is not None and tools.any:
            # A server tool's loop samples up to ITERATIONS times, and each use may carry a fee
            # (docs/pricing.md "Server tools"): the figures add up to the ceiling refused.
            one = (self.quote.ceiling_nusd - tools.fees_nusd) // tool_bounds.ITERATIONS
            what = f"{tool_bounds.ITERATIONS} samplings of the server tools' loop at {selection.money(one)} each" + (
                f" plus {selection.money(tools.fees_nusd)} of fees" if tools.fees_nusd else ""
            )
        return AccountsError(
            error.code,
            f"{who}: its ceiling (up to {selection.money(self.quote.ceiling_nusd)}) prices {what}, "
            f"over {'its' if error.account else 'every'} budget; {advice}{bound}",
            account=error.account,
        )

    def _account(self, name):
        for account in self.declaration.accounts:
            if account.name == name:
                return account
        raise AccountsError("account_blocked", f"account '{name}' is bound but no longer declared", account=name)

    def _settle(self, attempt_id, evidence, outcome, cost, beyond_bounds=False):
        if isinstance(evidence, Complete):
            # Warm-prefix evidence (docs/architecture.md "Warm prefixes"): only a complete settlement
            # writes it.
            self.ledger.settle(
                attempt_id,
                evidence,
                cert=self.quote.cert,
                hour_after_key=self.quote.hour_after_key,
                server_tools=self.quote.server_tools,
                beyond_bounds=beyond_bounds,
            )
        else:
            self.ledger.settle(attempt_id, evidence)
        for record in self.records:
            if record["id"] == attempt_id:
                record["outcome"] = outcome
                record["cost_nusd"] = cost

    def _may_move_on(self):
        return bool(self.new_scope) and self.pinned is None and len(set(self.tried)) < MAX_ACCOUNTS

    # Outcomes ----------------------------------------------------------------------------------

    def refused(self, attempt, status, info, retry_after_s=None, should_retry=None):
        """A non-200 answer, already reduced to closed-set ``info`` (``transport.read_refusal``).

        Returns None to try again (the next account, or the same one after ``take_wait()``),
        else the routed error for the caller to raise (raised by the caller, outside every frame
        that held the key or the response). ``should_retry`` False (the provider's
        ``x-should-retry: false``) rules out sending it again on the same account; moving a new
        conversation on to another account is not a retry of this one.
        """
        outcome = classify.outcome_for_status(status)
        failure = classify.failure_class(status, info)
        documented = info.documented and (400 <= status < 500 or status == 529)
        if documented:
            # A documented refusal is evidence nothing was processed: it settles at zero.
            evidence = Refused(outcome, status, info.provider_error_type, info.rejection_class, failure, retry_after_s)
            self._settle(attempt.id, evidence, outcome, 0)
        else:
            evidence = Unknown(outcome, failure, status, info.provider_error_type, info.rejection_class)
            self._settle(attempt.id, evidence, outcome, None)
            self._held_open(attempt, outcome)
        attempt.secret = None
        detail = info.provider_error_type + (
            f" ({info.rejection_class})" if info.rejection_class != "other" else ""
        )
        fate = "nothing was billed" if documented else "the attempt stays open with its ceiling until reconciled"
        code, story = classify.error_code_for(outcome), ""
        if failure == "quota_exhausted":
            # One story for out of credit, whatever status carried it (docs/architecture.md "Quota exhaustion").
            code, story = classify.error_code_for(failure), f"; {selection.out_of_credit(attempt.account)}"
        elif failure == "auth":
            # The ledger blocked the account in that settlement (docs/architecture.md "Failure classes
            # and health"): say so, and what ends the block.
            key_env = self._account(attempt.account).key_env
            story = (
                f"; the account is now blocked: check its key ({key_env}), "
                f"then run: llm accounts unblock {attempt.account}"
            )
        error = AccountsError(
            code,
            f"account '{attempt.account}' answered HTTP {status} {detail}; {fate} (attempt {attempt.id}){story}",
            account=attempt.account,
            attempt_id=attempt.id,
            http_status=status,
        )
        moving = status in MOVE_ON_STATUSES and documented
        # A spending cap proves nothing was billed too, but retrying the same account cannot help.
        retriable = moving and failure in RETRIED_CLASSES and should_retry is not False
        if moving and self._may_move_on():
            self.failures.append((attempt.account, f"HTTP {status}", error))
            self.last_retriable = (attempt.account, retry_after_s) if retriable else None
            return None
        if retriable and self._retry(attempt.account, retry_after_s):
            return None
        if status in RETRIED_SERVER_ERRORS and should_retry is not False and self._retry(attempt.account, retry_after_s):
            self.retried_error = error
            return None
        return self._noted(error)

    def transport_failed(self, attempt, failure):
        """The connection failed (``transport.TransportFailure``). Returns None to try the next
        account, else the routed error for the caller to raise."""
        attempt.secret = None
        if failure.never_sent:
            self._settle(attempt.id, NotSent(), "not_sent", 0)
            fate = "nothing was sent"
        else:
            self._settle(attempt.id, Unknown("transport_error", "transport"), "transport_error", None)
            self._held_open(attempt, "transport_error")
            fate = "the request may have arrived, so the attempt stays open with its ceiling until reconciled"
        error = AccountsError(
            "transport_error",
            f"account '{attempt.account}' could not be reached {transport.where()} ({failure.kind}, failure class transport); "
            f"{fate} (attempt {attempt.id})",
            account=attempt.account,
            attempt_id=attempt.id,
        )
        if failure.never_sent and self._may_move_on():
            self.failures.append((attempt.account, failure.kind, error))
            self.last_retriable = (attempt.account, None)
            return None
        if failure.never_sent and self._retry(attempt.account, None):
            return None
        return self._noted(error)

    def completed(self, attempt, message, request_id=None):
        """Settle a finished message from its usage; returns the ``routing`` object for llm logs.

        What the ledger keeps of the provider's strings is matched against the key's runs first:
        a request id or a usage field holding a run is not stored at all (a masked id identifies
        nothing), and a served model holding one is no model the revision prices, so the attempt
        stays open as usage_incomplete.
        """
        holds = run_detector(attempt.secret.reveal()) if attempt.secret is not None else _holds_nothing
        attempt.secret = None
        usage = message.get("usage") or {}
        served = message.get("model") or self.quote.requested_model
        if not isinstance(served, str) or holds(served):
            served = None
        cost = prices.settlement_cost(usage, served, self.body, self.revision)
        if cost is None or cost > INT64_MAX:
            # Unknown is never zero: incomplete usage keeps the ceiling open (docs/pricing.md
            # "What keeps an attempt open").
            self._settle(attempt.id, Unknown("usage_incomplete"), "usage_incomplete", None)
            self._held_open(attempt, "usage_incomplete")
            if cost is not None:
                raise AccountsError(
                    "provider_error",
                    f"account '{attempt.account}': the response's usage prices beyond what the ledger can record; "
                    f"the attempt stays open with its ceiling until reconciled (attempt {attempt.id})",
                    account=attempt.account,
                    attempt_id=attempt.id,
                )
        else:
            evidence = Complete(cost, _numeric_usage(usage, holds), served, _request_id(request_id, holds))
            over = tool_bounds.overrun(usage.get("server_tool_use"), self.quote.tool_uses)
            self._settle(attempt.id, evidence, "complete", cost, beyond_bounds=bool(over))
            if over:
                self._say_overrun(attempt, over)
            else:
                self._say_contradiction(attempt, usage, cost)
        return self.routing(paid_by=attempt.account)

    def counted(self, attempt, model, usage):
        """``message_start`` counted the request's input: the hold becomes that input's exact
        cost plus max_tokens of output (docs/pricing.md "Shrinking a hold on message_start").
        Anything short of exact counts keeps the ceiling; a ledger that cannot take the write
        now keeps it too, which is never less safe."""
        if attempt.secret is None or attempt.counts is not None:
            return
        if not isinstance(model, str) or run_detector(attempt.secret.reveal())(model):
            return  # no model the revision prices: the ceiling stays
        hold = prices.counted_hold(
            usage, model, self.body, self.revision, self.quote.max_output, attempt.reservation.ceiling_nusd
        )
        if hold is None:
            return
        try:
            if self.ledger.shrink(attempt.id, hold.hold_nusd, hold.hold_tokens, hold.counts) != "shrunk":
                return
        except AccountsError:
            return
        attempt.hold_nusd, attempt.counts = hold.hold_nusd, hold.counts
        for record in self.records:
            if record["id"] == attempt.id:
                record["held_nusd"] = hold.hold_nusd  # ceiling_nusd stays what was reserved

    def _say_contradiction(self, attempt, usage, cost):
        """A final usage that breaks the counts a hold was shrunk on: the settlement recorded the
        true cost and blocked the account in its own transaction; say so."""
        if attempt.counts is None:
            return
        if prices.contradicts(attempt.counts, usage):
            why = "its final input counts differ from the ones message_start reported"
            reason = "settlement_conflict"
        elif cost > attempt.hold_nusd:
            why = "its cost is above the hold message_start's counts allowed"
            reason = "ceiling_exceeded"
        else:
            return
        notices.say(
            f"Warning: account '{attempt.account}' is blocked ({reason}): attempt {attempt.id} settled at its real "
            f"cost, but {why}; check it, then llm accounts unblock {attempt.account}"
        )

    def _say_overrun(self, attempt, over):
        """Server-tool uses above the request's bound are usage no request could cause: the real
        cost stands, and the settlement blocked the account in its own transaction, as for a cost
        above its ceiling, whose premise they break (docs/pricing.md "Server tools")."""
        # Count names are provider strings: only the ones this plugin knows are repeated.
        known = sorted(name for name in over if name in tool_bounds.COUNTS.values()) or ["server-tool uses"]
        error = AccountsError(
            "ceiling_exceeded",
            f"account '{attempt.account}': the answer reports more {', '.join(known)} than the request allows "
            f"(its tools' max_uses); attempt {attempt.id} is settled at its reported cost and the account is "
            f"blocked until checked (llm accounts unblock {attempt.account})",
            account=attempt.account,
            attempt_id=attempt.id,
        )
        notices.say(f"Warning: {error}")

    def not_sent(self, attempt):
        """The caller gave up before the request was built: proven never sent, and the caller's
        own doing, so warm prefixes stay."""
        attempt.secret = None
        self._settle(attempt.id, NotSent(caller_cancelled=True), "not_sent", 0)

    def stream_failed(self, attempt, outcome, failure_class=None, info=None):
        """A stream that ended without complete usage: the attempt stays open (unknown). ``info``
        is a mid-stream error event's closed-set values, stored like an HTTP error's."""
        attempt.secret = None
        if info is None:
            evidence = Unknown(outcome, failure_class)
        else:
            evidence = Unknown(outcome, failure_class, None, info.provider_error_type, info.rejection_class)
        self._settle(attempt.id, evidence, outcome, None)
        self._held_open(attempt, outcome)

    def _held_open(self, attempt, outcome):
        """Say at once what an unknown outcome keeps open, and what will settle it (docs/errors.md
        "Held open"); only once the ledger has recorded it."""
        held = attempt.hold_nusd if attempt.hold_nusd is not None else attempt.reservation.ceiling_nusd
        self._say_held_open(attempt.id, attempt.account, held, outcome)

    def _say_held_open(self, attempt_id, name, ceiling_nusd, outcome):
        account = next((a for a in self.declaration.accounts if a.name == name), None)
        automatic = notices.settles_automatically(account)
        notices.say(notices.held_open(attempt_id, name, ceiling_nusd, outcome, automatic=automatic))

    def warn_budget(self, name):
        """Warn before the wall (docs/architecture.md "Budget warnings")."""
        account = next((a for a in self.declaration.accounts if a.name == name), None)
        if account is not None:
            thresholds.warn_after_settlement(self.ledger, account)

    def routing(self, paid_by=None):
        return {
            "account": paid_by,
            "price_revision": self.revision.id,
            "attempts": [dict(record) for record in self.records],
        }


class UnroutedCall:
    """No accounts declared: send with llm's single Anthropic key, touching no ledger, and try
    again where llm-anthropic's SDK would (docs/architecture.md "Retries": the provider's
    ``x-should-retry`` first, else 408, 409, 429, every 5xx and a failed connection), within
    the same ``-o retries`` and wait bound as a routed prompt."""

    def __init__(self, key, retries=DEFAULT_RETRIES):
        self.key = keys.Secret(key)
        self.retries = Retries(left=retries)
        self.pending_wait = None

    def begin(self):
        return Attempt(reservation=None, secret=self.key)

    def take_wait(self):
        wait, self.pending_wait = self.pending_wait, None
        return wait

    def pause(self, seconds):
        time.sleep(seconds)

    async def pause_async(self, seconds):
        await asyncio.sleep(seconds)

    def revision_knows(self, model_id):
        return price_book.current().model(model_id) is not None

    def _retry(self, retry_after_s):
        self.pending_wait = self.retries.backoff(retry_after_s)
        return self.pending_wait is not None

    def _spent(self):
        return f"; {self.retries.spent()}" if self.retries.used else ""

    def refused(self, attempt, status, info, retry_after_s=None, should_retry=None):
        if sdk_retries(status, should_retry) and self._retry(retry_after_s):
            return None
        return AccountsError(
            classify.error_code_for(classify.outcome_for_status(status)),
            f"Anthropic answered HTTP {status} {info.provider_error_type} (unrouted: no accounts declared){self._spent()}",
            http_status=status,
        )

    def transport_failed(self, attempt, failure):
        if self._retry(None):
            return None
        return AccountsError(
            "transport_error",
            f"Anthropic could not be reached {transport.where()} ({failure.kind}) (unrouted: no accounts declared){self._spent()}",
        )

    def completed(self, attempt, message, request_id=None):
        return None

    def counted(self, attempt, model, usage):
        pass

    def not_sent(self, attempt):
        pass

    def stream_failed(self, attempt, outcome, failure_class=None, info=None):
        pass


def stream_error_story(account, failure_class, info):
    """What a stream that ended with an ``error`` event tells the user: the documented type, the
    rejection class and the failure class (never the provider's text), and what the class did to
    the account (docs/errors.md "From an answer to a code")."""
    detail = info.provider_error_type + (f" ({info.rejection_class})" if info.rejection_class != "other" else "")
    what = f"the stream ended with an error event {detail}, failure class {failure_class}"
    if failure_class == "quota_exhausted":
        return f"{what}; {selection.out_of_credit(account)}"
    if failure_class == "auth":
        return f"{what}; the account is blocked until its key is fixed and 'llm accounts unblock {account}' is run"
    return what


def scope_for(conversation, prompt_id=None):
    """docs/architecture.md "Scope": the llm conversation id, else a scope of this prompt's own,
    named by its llm response id (the ``id`` ``llm logs`` shows), so prompts on one model object
    spread across accounts and a failed account binds none but its own prompt."""
    if conversation is not None and getattr(conversation, "id", None):
        return Scope("conversation", str(conversation.id))
    return Scope("prompt", str(prompt_id or uuid.uuid4()))


def _smallest_limit(account):
    """The smaller of ``account``'s budget and daily budget (a client's cap too small for the
    ceiling says so in its own refusal)."""
    daily = getattr(account, "daily_budget_nusd", None)
    return account.budget_nusd if daily is None else min(account.budget_nusd, daily)


def _stopped(wake, board, waiter):
    if wake is not None:
        wake.close()
    board.stop(waiter)


def _to_stderr(line):
    notices.say(f"llm-accounts: {line}")


def _holds_nothing(text):
    return False


def _numeric_usage(usage, holds=_holds_nothing):
    """Only counts (and nested counts) are kept: no provider text reaches the ledger, and no
    field whose name or digits hold a run of the key."""

    def count(name, value):
        return (
            type(value) is int
            and 0 <= value <= INT64_MAX
            and isinstance(name, str)
            and not holds(name)
            and not holds(str(value))
        )

    kept = {}
    for name, value in usage.items():
        if count(name, value):
            kept[name] = value
        elif isinstance(value, dict) and isinstance(name, str) and not holds(name):
            inner = {k: v for k, v in value.items() if count(k, v)}
            if inner:
                kept[name] = inner
    return kept


def _request_id(value, holds=_holds_nothing):
    """A provider request id is kept only when it looks like one (bounded, ASCII, no spaces) and
    holds no run of the key."""
    if (
        isinstance(value, str)
        and len(value) <= 128
        and value.isascii()
        and value.isprintable()
        and " " not in value
        and not holds(value)
    ):
        return value
    return None
