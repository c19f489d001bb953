"""The ``claude-routed`` llm models: sync and async, streamed and not.

``execute`` builds and freezes the request body, then runs the attempt loop. The decisions
(reserve, sign, settle, move on) are ``routing.RoutedCall``'s; the unrouted path uses the same
loop with ``UnroutedCall``, which touches no ledger (docs/architecture.md "Environment").
"""

import asyncio
import json
import os
import re

import httpx
import llm

from llm.parts import StreamEvent

from . import counting, notices, room
from .capabilities import for_model, for_price, routed_max_tokens
from .errors import AccountsError
from .ledger import run_async, settle_async
from .options import RoutedOptions, check_prompt, not_utf8, options_for
from .pricing import cost
from .retries import DEFAULT_RETRIES, parse_retry_after, parse_should_retry
from .wire import classify, payload, scrub, sse, transport
from .wire.events import StreamReader, message_events
from .wire.sse import message_problem, usage_problem

ROUTED_ID = "claude-routed"
DEFAULT_MODEL = "claude-sonnet-4-6"
ATTACHMENT_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf"}
)


class _Shared:
    needs_key = "anthropic"
    key_env_var = "ANTHROPIC_API_KEY"
    can_stream = True
    supports_schema = True
    supports_tools = True
    attachment_types = ATTACHMENT_TYPES
    Options = RoutedOptions

    def __init__(self, model_id, claude_model_id, capabilities=None):
        self.model_id = model_id
        self.claude_model_id = claude_model_id
        # What llm-anthropic's entry for the same model accepts (docs/architecture.md "Model ids").
        self.capabilities = capabilities or for_model(claude_model_id)
        self.Options = options_for(self.capabilities)

    def __str__(self):
        return f"Anthropic Messages, routed across accounts: {self.model_id}"

    @property
    def supported_server_side_tools(self):
        """llm-anthropic's server tools by its class names (``-T 'WebSearch(max_uses=3)'``) and raw
        specs; which of them can be priced is decided before sending (docs/pricing.md "Server tools")."""
        from .server_tools import OFFERED

        return OFFERED

    def get_key(self, explicit_key=None):
        from .declarations import load_declaration

        if load_declaration().routed:
            if explicit_key:
                # The ledger must describe the credential actually sent.
                raise AccountsError(
                    "credential_conflict",
                    "--key cannot be used while accounts are declared; the ledger chooses the account (pin one with -o account NAME)",
                )
            return None
        try:
            return super().get_key(explicit_key)
        except llm.NeedsKeyException:
            pass
        # Unrouted with no key: the newcomer who has not declared an account yet is told how to
        # (docs/architecture.md "Environment"), still as llm's NeedsKeyException.
        raise NoKeyError(
            "credential_missing",
            "no accounts are declared and llm has no Anthropic key: declare accounts with "
            "'llm accounts add NAME --key-env VAR --budget USD' (docs/accounts.md \"Declaring accounts\"), or send "
            "unrouted with 'llm keys set anthropic' or ANTHROPIC_API_KEY",
        )

    def _prepare(self, prompt, stream, conversation, key, response=None):
        from .declarations import load_declaration

        check_prompt(prompt)
        built = payload.build_body(
            prompt,
            self.claude_model_id,
            stream=stream,
            capabilities=self.capabilities,
            hide_reasoning=bool(getattr(prompt, "hide_reasoning", False)),
        )
        try:
            body = payload.freeze(built)
        except UnicodeEncodeError:
            raise not_utf8("conversation") from None
        options = prompt.options
        request = Prepared(
            body,
            tuple(payload.beta_headers(built, self.capabilities)),
            options.prefill if options.prefill and not options.hide_prefill else "",
        )
        declaration = load_declaration()
        if not declaration.routed:
            from .routing import UnroutedCall

            return UnroutedCall(key, DEFAULT_RETRIES if prompt.options.retries is None else prompt.options.retries), request
        from .ledger import Ledger
        from .routing import RoutedCall, scope_for

        return (
            RoutedCall(
                declaration=declaration,
                ledger=Ledger(),
                body=body,
                scope=scope_for(conversation, getattr(response, "id", None)),
                pinned=prompt.options.account,
                client=prompt.options.client or os.environ.get("LLM_ACCOUNTS_CLIENT") or None,
                retries=DEFAULT_RETRIES if prompt.options.retries is None else prompt.options.retries,
                wait=room.bound(prompt.options.wait, os.environ),
                # The llm logs row this prompt becomes, so a ledger attempt joins it.
                llm_response_id=getattr(response, "id", None),
            ),
            request,
        )

    def _finish(self, response, call, attempt, message, secret_text, request_id):
        """Settle, then hand llm the scrubbed message, its usage and the routing record.

        An answer that is not a well-formed message, or whose usage holds a count that is not a
        count, cannot be priced: its attempt stays open with its ceiling (unknown is never zero)
        and ``provider_error`` is raised.
        """
        problem, outcome = message_problem(message), "provider_error"
        if problem is None:
            problem, outcome = usage_problem(message.get("usage")), "usage_incomplete"
        if problem is not None:
            call.stream_failed(attempt, outcome)
            raise _malformed(attempt, problem)
        try:
            routing = call.completed(attempt, message, request_id)
        except AccountsError as error:
            if error.code not in LEDGER_CODES:
                raise
            # The provider answered in full and billed it: the answer is delivered and logged,
            # and the attempt keeps its ceiling until reconciled (docs/errors.md "After delivery").
            _warn(_after_delivery(attempt, error))
            routing = call.routing(paid_by=attempt.account)
        else:
            if routing is not None:
                call.warn_budget(attempt.account)
        clean = scrub.scrub_json(message, secret_text) if secret_text else dict(message)
        usage = clean.pop("usage", None) or {}
        if routing is not None:
            clean["routing"] = routing
        response.response_json = clean
        for block in clean.get("content") or []:
            if block.get("type") == "tool_use" and block.get("name") != payload.SCHEMA_TOOL:
                response.add_tool_call(
                    llm.ToolCall(tool_call_id=block.get("id"), name=block.get("name"), arguments=block.get("input") or {})
                )
        set_usage(response, usage, cost.cost_from_routing(routing))
        served = clean.get("model")
        if isinstance(served, str) and call.revision_knows(served):
            # Only a model the price revision names: never provider text of another shape.
            response.set_resolved_model(served)
        if message.get("stop_reason") == "max_tokens" and response.prompt.options.max_tokens is None:
            _stopped_at_default(self.capabilities, response.prompt.options)
        if message.get("stop_reason") == "refusal":
            return refusal(message, secret_text, attempt)
        return None


class Prepared:
    """One prompt's request: the frozen body, its beta headers, and the prefill llm shows first."""

    __slots__ = ("body", "betas", "prefill")

    def __init__(self, body, betas, prefill):
        self.body, self.betas, self.prefill = body, betas, prefill

    def prefill_events(self):
        return [StreamEvent(type="text", chunk=self.prefill, part_index=0)] if self.prefill else []


class RefusalError(AccountsError):
    """A complete answer whose ``stop_reason`` is ``refusal``: the model declined (billed and
    settled like any answer). ``category`` and ``explanation`` are the provider's, kept only when
    they hold no run of the key."""

    def __init__(self, message, *, category, explanation, **context):
        super().__init__("request_rejected", message, **context)
        self.category, self.explanation = category, explanation


CATEGORY_RE = re.compile(r"[a-z][a-z0-9_-]{0,39}")
EXPLANATION_CHARS = 300


def refusal(message, secret_text, attempt):
    """The error a refusal raises once its answer is delivered, as llm-anthropic's
    ``ClaudeRefusal`` words it; provider text is untrusted (docs/security.md "Provider strings")."""
    details = message.get("stop_details")
    details = details if isinstance(details, dict) else {}
    holds = scrub.run_detector(secret_text) if secret_text else (lambda text: False)
    category = details.get("category")
    if not (isinstance(category, str) and CATEGORY_RE.fullmatch(category) and not holds(category)):
        category = None
    explanation = details.get("explanation")
    if isinstance(explanation, str):
        explanation = " ".join(explanation.split())
        if holds(explanation) or not explanation.isprintable():
            explanation = None
        elif len(explanation) > EXPLANATION_CHARS:
            explanation = explanation[: EXPLANATION_CHARS - 1] + "…"
    else:
        explanation = None
    text = "Claude refused this request"
    if category:
        text += f" ({category})"
    if explanation:
        text += f": {explanation}"
    if attempt.reservation is None:
        return RefusalError(text, category=category, explanation=explanation)
    return RefusalError(
        f"{text} [account '{attempt.account}', attempt {attempt.id}, settled at its billed cost]",
        category=category,
        explanation=explanation,
        account=attempt.account,
        attempt_id=attempt.id,
    )


def set_usage(response, usage, spent=None):
    """llm's usage, with what the prompt cost and which account paid (``cost.usage_details``)."""
    details = {
        name: value
        for name, value in usage.items()
        if name not in ("input_tokens", "output_tokens") and value not in (None, 0, {}, "standard")
    }
    if isinstance(details.get("cache_creation"), dict) and not any(details["cache_creation"].values()):
        del details["cache_creation"]
    if details.get("inference_geo") in ("not_available", "global"):
        del details["inference_geo"]  # the standard routing, like service_tier "standard"
    details.update(cost.usage_details(spent))
    response.set_usage(
        input=_count_or_none(usage.get("input_tokens")),
        output=_count_or_none(usage.get("output_tokens")),
        details=details or None,
    )


def _count_or_none(value):
    # A count the scrubber masked (its digits held a run of the key) is text now: not a count.
    return value if type(value) is int else None


def _malformed(attempt, problem):
    """The routed error for an answer that is not a well-formed message (``problem`` is our text)."""
    if attempt.reservation is None:
        return AccountsError("provider_error", f"the response was malformed: {problem}")
    return AccountsError(
        "provider_error",
        f"account '{attempt.account}': the response was malformed: {problem}; the attempt stays open with its ceiling until reconciled (attempt {attempt.id})",
        account=attempt.account,
        attempt_id=attempt.id,
    )


def _parsed(raw):
    """A whole answer's JSON, or None for bytes that are not JSON: read in full, such an answer is
    the provider's malformed message (``_finish`` says so), not a broken connection."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _stream_failure(attempt, outcome, malformed=None, failure=None, info=None):
    """The routed error for a response that ended early or broke the stream format (``malformed``
    is our text, never theirs); its attempt stays open (unknown). A mid-stream ``error`` event
    (``info``, closed-set values only) raises the code of its failure class."""
    code = "provider_error" if outcome == "stream_error" else "transport_error"
    what = f"the stream was malformed: {malformed}" if malformed else f"the response ended early ({outcome})"
    if info is not None and attempt.reservation is not None:
        from .routing import stream_error_story

        code = classify.stream_error_code(failure)
        what = stream_error_story(attempt.account, failure, info)
    if attempt.reservation is None:
        return AccountsError(code, what)
    return AccountsError(
        code,
        f"account '{attempt.account}': {what}; the attempt stays open until reconciled (attempt {attempt.id})",
        account=attempt.account,
        attempt_id=attempt.id,
    )


def _past_bound(attempt, what):
    """The routed error for an answer past ``transport.ANSWER_LIMIT``: it is not parsed, and with
    no complete usage its attempt stays open (docs/errors.md "Answers past their bound")."""
    story = f"{what} passed its bound of {transport.ANSWER_LIMIT // (1024 * 1024)} MiB and was not read"
    if attempt.reservation is None:
        return AccountsError("provider_error", story)
    return AccountsError(
        "provider_error",
        f"account '{attempt.account}': {story}; the attempt stays open until reconciled (attempt {attempt.id})",
        account=attempt.account,
        attempt_id=attempt.id,
    )


def _after_delivery(attempt, error):
    """A settlement that failed after the provider answered in full: the answer is delivered,
    and the one line says so and that nothing is lost."""
    if error.code == "settlement_conflict":
        return AccountsError(
            error.code,
            f"{error.message} (the answer was delivered; attempt {attempt.id} on account '{attempt.account}' "
            "was already settled with other evidence, which stands)",
            account=attempt.account,
            attempt_id=attempt.id,
        )
    return AccountsError(
        error.code,
        f"{error.message} (the answer was delivered, but attempt {attempt.id} on account "
        f"'{attempt.account}' could not be settled: it stays open with its ceiling until "
        f"'llm accounts reconcile {attempt.id}'; do not retry the prompt, it was already answered)",
        account=attempt.account,
        attempt_id=attempt.id,
    )


def _warn(error):
    notices.say(f"Warning: {error}")


def _stopped_at_default(capabilities, options):
    """An answer cut at claude-routed's own default max_tokens, which is below llm-anthropic's for
    the model, says so once, with the option that lets it run longer (docs/prompting.md "max_tokens")."""
    sent = routed_max_tokens(capabilities, options.thinking_budget)
    if sent < capabilities.default_max_tokens:
        notices.say(
            f"Note: the answer stopped at claude-routed's default max_tokens of {sent:,}; "
            f"-o max_tokens {capabilities.default_max_tokens} lets it run longer"
        )


LEDGER_CODES = frozenset({"ledger_busy", "ledger_unavailable", "settlement_conflict", "duplicate_attempt"})


def _unrecorded(attempt, error):
    """A ledger failure while an attempt's outcome was being recorded: it keeps its ceiling."""
    if attempt.reservation is None or error.code not in LEDGER_CODES:
        return error
    return AccountsError(
        error.code,
        f"{error.message} (attempt {attempt.id} on account '{attempt.account}' could not be recorded: "
        f"it stays open with its ceiling until 'llm accounts reconcile {attempt.id}')",
        account=attempt.account,
        attempt_id=attempt.id,
    )


class RoutedError(AccountsError, llm.ModelError):
    """A routed error as llm's ``ModelError``, so llm and Python callers handle it like any
    model's errors; its code, account and attempt are those of the ``AccountsError``."""


class NoKeyError(RoutedError, llm.NeedsKeyException):
    """No accounts declared and no key for llm's single Anthropic key: llm's own missing-key error,
    with a code and the hint to declare accounts."""


class RoutedRefusal(RoutedError):
    """``stop_reason: refusal``, raised after the answer (often empty) was delivered and its
    attempt settled, as llm-anthropic raises ``ClaudeRefusal``."""

    def __init__(self, code, message, *, category=None, explanation=None, **context):
        super().__init__(code, message, **context)
        self.category, self.explanation = category, explanation
        self.stop_details = {name: value for name, value in (("category", category), ("explanation", explanation)) if value}


def routed_error(error):
    """A fresh ``RoutedError``: no traceback or context from the frames that held the key."""
    context = dict(account=error.account, attempt_id=error.attempt_id, http_status=error.http_status)
    if isinstance(error, RefusalError):
        return RoutedRefusal(error.code, error.message, category=error.category, explanation=error.explanation, **context)
    return RoutedError(error.code, error.message, **context)


class _End:
    """How a routed call ended. ``execute`` raises ``error`` itself, outside every ``except``
    block and every frame that held the key, a request or a response (docs/security.md "Errors
    carry no key")."""

    __slots__ = ("error", "again")

    def __init__(self):
        self.error, self.again = None, False

    def decide(self, error):
        """``error`` to raise, or None: try the next account."""
        self.error, self.again = error, error is None

    def fail(self, error):
        self.error = error


class RoutedClaude(_Shared, llm.KeyModel):
    def count_tokens(self, prompt=None, *, conversation=None, **kwargs):
        """The input tokens this prompt would send, counted by the provider for nothing, as
        llm-anthropic's ``model.count_tokens()``: the arguments of ``model.prompt()`` (or, with
        ``conversation``, of its next prompt). No reservation (docs/architecture.md "Token counting")."""
        built = (conversation or self).prompt(prompt, **kwargs)
        error = None
        try:
            return counting.count_sync(self, built.prompt, kwargs.get("key")).tokens
        except AccountsError as failure:
            error = failure
        raise routed_error(error)

    def execute(self, prompt, stream, response, conversation, key):
        end = _End()
        routed = self._routed(prompt, stream, response, conversation, key, end)
        del key  # llm's single key (unrouted calls) lives on only inside the call, wrapped
        notices.new_answer()
        for event in routed:
            if stream:
                notices.streamed(event)
            yield event
        if end.error is not None:
            raise routed_error(end.error)

    def _routed(self, prompt, stream, response, conversation, key, end):
        try:
            call, request = self._prepare(prompt, stream, conversation, key, response)
            del key  # an unrouted call keeps it wrapped; no frame of ours holds it bare
            url = transport.messages_url()
            http = transport.shared_client()
            while True:
                yield from self._attempt(http, url, call, request, stream, response, end)
                if not end.again:
                    return
                end.again = False
                wait = call.take_wait()
                if wait:
                    # A backoff or a cooldown, bounded (docs/architecture.md "Retries"), or a wait
                    # for room that a write freeing room ends ("Waiting for room").
                    call.pause(wait)
        except AccountsError as error:
            end.fail(error)

    def _attempt(self, http, url, call, request, stream, response, end):
        attempt = call.begin()
        if attempt is None:  # wait, then reserve again
            end.again = True
            return
        try:
            yield from self._send(http, url, call, attempt, request, stream, response, end)
        except AccountsError as error:
            end.fail(_unrecorded(attempt, error))

    def _send(self, http, url, call, attempt, prepared, stream, response, end):
        secret_text = attempt.secret.reveal()
        request = http.build_request(
            "POST", url, content=prepared.body, headers=transport.headers(attempt.secret, stream=stream, betas=prepared.betas)
        )
        failure = None
        try:
            resp = http.send(request, stream=True)
        except httpx.HTTPError as error:
            failure = transport.describe_failure(error)
        except BaseException:
            call.stream_failed(attempt, "cancelled")  # Ctrl-C: it may have left, never zero
            raise
        if failure is not None:
            end.decide(call.transport_failed(attempt, failure))
            return
        try:
            status = resp.status_code
            if status != 200:
                # A Ctrl-C while the body is read waits until it is read (within its bound) and
                # recorded, then interrupts (transport.interrupts_held).
                with transport.interrupts_held():
                    try:
                        info = transport.read_refusal(resp)
                    except BaseException:
                        # Interrupted otherwise: the status alone still counts (a 401 blocks).
                        call.refused(attempt, status, classify.UNREADABLE)
                        raise
                    decided = call.refused(attempt, status, info, parse_retry_after(resp.headers.get("retry-after")),
                                           parse_should_retry(resp.headers.get("x-should-retry")))
                end.decide(decided)
                return
            request_id = resp.headers.get("request-id")
            if stream:
                yield from self._stream(resp, call, attempt, prepared, response, secret_text, request_id, end)
                return
            try:
                raw = transport.read_bounded(resp, transport.ANSWER_LIMIT)
            except httpx.HTTPError:
                call.stream_failed(attempt, "transport_error", "transport")
                end.decide(_stream_failure(attempt, "transport_error"))
                return
            except BaseException:
                call.stream_failed(attempt, "cancelled")
                raise
            if len(raw) > transport.ANSWER_LIMIT:
                call.stream_failed(attempt, "stream_truncated")
                end.decide(_past_bound(attempt, "the answer"))
                return
            message = _parsed(raw)
            # Settled before the answer is yielded: a consumer that stops reading early leaves
            # nothing open that the provider already answered in full.
            refused = self._finish(response, call, attempt, message, secret_text, request_id)
            yield from prepared.prefill_events()
            yield from message_events(message, secret_text)
            if refused is not None:
                end.fail(refused)
        finally:
            resp.close()

    def _stream(self, resp, call, attempt, prepared, response, secret_text, request_id, end):
        reader = StreamReader(secret_text)
        refused = too_long = None
        try:
            yield from prepared.prefill_events()
            # SSE line ends only, each line bounded (wire.sse_lines); decoded a piece at a time.
            lines = sse.sse_lines(transport.bounded_chunks(resp, None))
            for line in lines:
                events = reader.feed(line)
                start = reader.take_start()
                if start is not None:
                    call.counted(attempt, *start)  # before any output is shown
                yield from events
                if reader.done:
                    break
        except httpx.HTTPError:
            pass  # a broken connection: settled below as stream_truncated
        except sse.LineTooLong:
            too_long = True
        except GeneratorExit:
            call.stream_failed(attempt, *reader.closed())
            raise
        except BaseException:
            call.stream_failed(attempt, "cancelled")
            raise
        # Settled before the last held text is released: a consumer that stops now leaves
        # nothing open that the provider already answered in full.
        if too_long:
            call.stream_failed(attempt, "stream_truncated")
            end.decide(_past_bound(attempt, "a line of the stream"))
        elif reader.complete:
            try:
                refused = self._finish(response, call, attempt, reader.final_message(), secret_text, request_id)
            except AccountsError as error:
                end.fail(error)  # raised once the held text below is shown
            transport.drain(resp, lines)  # settled first; then the connection can be reused
        else:
            outcome, failure, info = reader.failure()
            call.stream_failed(attempt, outcome, failure, info)
            end.decide(_stream_failure(attempt, outcome, reader.malformed, failure, info))
        yield from reader.finish()
        if refused is not None:
            end.fail(refused)


class AsyncRoutedClaude(_Shared, llm.AsyncKeyModel):
    async def count_tokens(self, prompt=None, *, conversation=None, **kwargs):
        """``RoutedClaude.count_tokens``, awaited."""
        built = (conversation or self).prompt(prompt, **kwargs)
        error = None
        try:
            return (await counting.count_async(self, built.prompt, kwargs.get("key"))).tokens
        except AccountsError as failure:
            error = failure
        raise routed_error(error)

    async def execute(self, prompt, stream, response, conversation, key):
        end = _End()
        routed = self._routed(prompt, stream, response, conversation, key, end)
        del key
        notices.new_answer()
        async for event in routed:
            if stream:
                notices.streamed(event)
            yield event
        if end.error is not None:
            raise routed_error(end.error)

    async def _routed(self, prompt, stream, response, conversation, key, end):
        try:
            call, request = await run_async(self._prepare, prompt, stream, conversation, key, response)
            del key
            url = transport.messages_url()
            http = transport.shared_async_client()
            while True:
                async for event in self._attempt(http, url, call, request, stream, response, end):
                    yield event
                if not end.again:
                    return
                end.again = False
                wait = call.take_wait()
                if wait:
                    await call.pause_async(wait)
        except AccountsError as error:
            end.fail(error)

    async def _attempt(self, http, url, call, request, stream, response, end):
        reserving = asyncio.ensure_future(run_async(call.begin))
        try:
            attempt = await asyncio.shield(reserving)
        except asyncio.CancelledError:
            # Cancelled before the request was built: a reservation that lands anyway is
            # settled as never sent, then the cancellation is delivered.
            attempt = await _outcome_of(reserving)
            if attempt is not None:
                await _shielded(call.not_sent, attempt)
            raise
        if attempt is None:
            end.again = True
            return
        try:
            async for event in self._send(http, url, call, attempt, request, stream, response, end):
                yield event
        except AccountsError as error:
            end.fail(_unrecorded(attempt, error))

    async def _send(self, http, url, call, attempt, prepared, stream, response, end):
        secret_text = attempt.secret.reveal()
        request = http.build_request(
            "POST", url, content=prepared.body, headers=transport.headers(attempt.secret, stream=stream, betas=prepared.betas)
        )
        failure = None
        try:
            resp = await http.send(request, stream=True)
        except httpx.HTTPError as error:
            failure = transport.describe_failure(error)
        except asyncio.CancelledError:
            # The request may have left: unknown, never zero.
            await _shielded(call.stream_failed, attempt, "cancelled")
            raise
        if failure is not None:
            end.decide(await _shielded(call.transport_failed, attempt, failure))
            return
        try:
            status = resp.status_code
            if status != 200:
                retry_after = parse_retry_after(resp.headers.get("retry-after"))
                should_retry = parse_should_retry(resp.headers.get("x-should-retry"))
                reading = asyncio.ensure_future(transport.aread_refusal(resp))
                try:
                    info = await asyncio.shield(reading)
                except asyncio.CancelledError:
                    # The body is still read (within its bound) and recorded, then the
                    # cancellation goes on; a body cut short leaves the status (a 401 blocks).
                    info = await _outcome_of(reading) or classify.UNREADABLE
                    await _shielded(call.refused, attempt, status, info, retry_after, should_retry)
                    raise
                end.decide(await _shielded(call.refused, attempt, status, info, retry_after, should_retry))
                return
            request_id = resp.headers.get("request-id")
            if stream:
                async for event in self._stream(resp, call, attempt, prepared, response, secret_text, request_id, end):
                    yield event
                return
            try:
                raw = await transport.aread_bounded(resp, transport.ANSWER_LIMIT)
            except httpx.HTTPError:
                await _shielded(call.stream_failed, attempt, "transport_error", "transport")
                end.decide(_stream_failure(attempt, "transport_error"))
                return
            except asyncio.CancelledError:
                await _shielded(call.stream_failed, attempt, "cancelled")
                raise
            if len(raw) > transport.ANSWER_LIMIT:
                await _shielded(call.stream_failed, attempt, "stream_truncated")
                end.decide(_past_bound(attempt, "the answer"))
                return
            message = _parsed(raw)
            refused = await _shielded(self._finish, response, call, attempt, message, secret_text, request_id)
            for event in [*prepared.prefill_events(), *message_events(message, secret_text)]:
                yield event
            if refused is not None:
                end.fail(refused)
        finally:
            await resp.aclose()

    async def _stream(self, resp, call, attempt, prepared, response, secret_text, request_id, end):
        reader = StreamReader(secret_text)
        refused = too_long = None
        try:
            for event in prepared.prefill_events():
                yield event
            lines = sse.asse_lines(transport.abounded_chunks(resp, None))
            async for line in lines:
                events = reader.feed(line)
                start = reader.take_start()
                if start is not None:
                    await _shielded(call.counted, attempt, *start)  # before any output is shown
                for event in events:
                    yield event
                if reader.done:
                    break
        except httpx.HTTPError:
            pass  # a broken connection: settled below as stream_truncated
        except sse.LineTooLong:
            too_long = True
        except GeneratorExit:
            # aclose() by the consumer: settle synchronously, there is no loop turn to wait for.
            call.stream_failed(attempt, *reader.closed())
            raise
        except asyncio.CancelledError:
            await _shielded(call.stream_failed, attempt, "cancelled")
            raise
        if too_long:
            await _shielded(call.stream_failed, attempt, "stream_truncated")
            end.decide(_past_bound(attempt, "a line of the stream"))
        elif reader.complete:
            try:
                refused = await _shielded(
                    self._finish, response, call, attempt, reader.final_message(), secret_text, request_id
                )
            except AccountsError as error:
                end.fail(error)
            await transport.adrain(lines)
        else:
            outcome, failure, info = reader.failure()
            await _shielded(call.stream_failed, attempt, outcome, failure, info)
            end.decide(_stream_failure(attempt, outcome, reader.malformed, failure, info))
        for event in reader.finish():
            yield event
        if refused is not None:
            end.fail(refused)


async def _shielded(fn, *args):
    """Run a settlement in a worker, shielded from the caller's cancellation: an attempt's
    outcome is recorded even when its caller gives up (docs/architecture.md "Attempt outcomes").
    It waits for a worker however long it takes (``settle_async``): the request was sent."""
    return await asyncio.shield(settle_async(fn, *args))


async def _outcome_of(task):
    """Wait for ``task`` after a cancellation; its result, or None if it failed."""
    try:
        return await task
    except BaseException:
        return None


def model_pairs(revision, default_model):
    """(sync, async, aliases) for ``claude-routed`` and every active model of the revision."""
    known = revision.model(default_model)
    caps = for_price(known) if known is not None else for_model(default_model)
    yield RoutedClaude(ROUTED_ID, default_model, caps), AsyncRoutedClaude(ROUTED_ID, default_model, caps), ()
    for model in revision.models.values():
        if model.status == "retired":
            continue
        model_id = f"{ROUTED_ID}/{model.id}"
        names = [model.id, *model.aliases]
        names += [dotted for dotted in map(dotted_alias, names) if dotted]
        aliases = tuple(dict.fromkeys(f"{ROUTED_ID}/{name}" for name in names if name != model.id))
        caps = for_price(model)
        yield RoutedClaude(model_id, model.id, caps), AsyncRoutedClaude(model_id, model.id, caps), aliases


def dotted_alias(model_id):
    """The name people type for a versioned model, as llm-anthropic registers it:
    ``claude-sonnet-4-6`` and ``claude-opus-4-1-20250805`` as ``claude-sonnet-4.6`` and
    ``claude-opus-4.1``; None for an id without a minor version."""
    match = re.fullmatch(r"(claude-[a-z]+-\d+)-(\d{1,2})(-\d{8})?", model_id)
    return f"{match.group(1)}.{match.group(2)}" if match else None
