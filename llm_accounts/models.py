"""The ``claude-routed`` llm models: sync and async, streamed and not.

``execute`` builds and freezes the request body, then runs the attempt loop. The decisions
(reserve, sign, settle, move on) are ``routing.RoutedCall``'s; the unrouted path uses the same
loop with ``UnroutedCall``, which touches no ledger (design.md "Environment").
"""

import asyncio
import json
import uuid
from typing import Optional, Union

import httpx
import llm
from llm.parts import StreamEvent
from pydantic import Field, field_validator, model_validator

from . import payload, scrub, transport
from .errors import AccountsError
from .wire import MessageAssembler, SSEDecoder

ROUTED_ID = "claude-routed"
DEFAULT_MODEL = "claude-sonnet-4-6"
ATTACHMENT_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf"}
)


class RoutedOptions(llm.Options):
    max_tokens: Optional[int] = Field(
        description="The maximum number of tokens to generate (also sets the price ceiling)",
        default=None,
    )
    temperature: Optional[float] = Field(description="Sampling temperature, 0.0 to 1.0", default=None)
    top_p: Optional[float] = Field(description="Nucleus sampling, 0.0 to 1.0", default=None)
    top_k: Optional[int] = Field(description="Sample from the top K options only", default=None)
    stop_sequences: Optional[Union[list, str]] = Field(
        description="Custom text sequences that stop generation (a string or a JSON list)",
        default=None,
    )
    cache: Optional[str] = Field(
        description="Prompt caching: none, 5m or 1h (1h marks the system prompt for warm-prefix routing)",
        default=None,
    )
    thinking: Optional[bool] = Field(description="Enable extended thinking", default=None)
    thinking_budget: Optional[int] = Field(
        description="Extended thinking token budget (at least 1024)", default=None
    )
    account: Optional[str] = Field(
        description="Pin a new conversation to this account (a bound conversation keeps its own)",
        default=None,
    )
    client: Optional[str] = Field(
        description="Client label recorded on each attempt (default: $LLM_ACCOUNTS_CLIENT)",
        default=None,
    )

    @field_validator("stop_sequences")
    @classmethod
    def validate_stop_sequences(cls, value):
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return [value]
            value = parsed if isinstance(parsed, list) else [value]
        if value is not None and not all(isinstance(item, str) and item for item in value):
            raise ValueError("stop_sequences must be a string or a list of non-empty strings")
        return value

    @field_validator("temperature", "top_p")
    @classmethod
    def validate_unit_interval(cls, value):
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError("must be between 0.0 and 1.0")
        return value

    @field_validator("top_k", "max_tokens")
    @classmethod
    def validate_positive(cls, value):
        if value is not None and value <= 0:
            raise ValueError("must be a positive integer")
        return value

    @field_validator("thinking_budget")
    @classmethod
    def validate_thinking_budget(cls, value):
        if value is not None and value < 1024:
            raise ValueError("thinking_budget must be at least 1024")
        return value

    @field_validator("cache")
    @classmethod
    def validate_cache(cls, value):
        if value is not None and value not in payload.CACHE_TTLS:
            raise ValueError("cache must be one of: none, 5m, 1h")
        return value

    @field_validator("account", "client")
    @classmethod
    def validate_label(cls, value):
        import re

        if value is not None and not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", value):
            raise ValueError("must match [a-z][a-z0-9_-]{0,31}")
        return value

    @model_validator(mode="after")
    def validate_sampling(self):
        if self.temperature is not None and self.top_p is not None:
            raise ValueError("set temperature or top_p, not both")
        return self


class _Shared:
    needs_key = "anthropic"
    key_env_var = "ANTHROPIC_API_KEY"
    can_stream = True
    supports_schema = True
    supports_tools = True
    attachment_types = ATTACHMENT_TYPES
    Options = RoutedOptions

    def __init__(self, model_id, claude_model_id):
        self.model_id = model_id
        self.claude_model_id = claude_model_id
        # The scope of prompts that have no llm conversation (design.md "Scope").
        self.instance_id = str(uuid.uuid4())

    def __str__(self):
        return f"Anthropic Messages, routed across accounts: {self.model_id}"

    def get_key(self, explicit_key=None):
        from .declarations import load_declaration

        if load_declaration().routed:
            if explicit_key:
                # ADR-0126 D2: the ledger must describe the credential actually sent.
                raise AccountsError(
                    "credential_conflict",
                    "--key cannot be used while accounts are declared; the ledger chooses the account (pin one with -o account NAME)",
                )
            return None
        return super().get_key(explicit_key)

    def _prepare(self, prompt, stream, conversation, key):
        from .declarations import load_declaration

        body = payload.freeze(payload.build_body(prompt, self.claude_model_id, stream=stream))
        declaration = load_declaration()
        if not declaration.routed:
            return UnroutedCall(key), body
        import os

        from .ledger import Ledger
        from .routing import RoutedCall, scope_for

        return (
            RoutedCall(
                declaration=declaration,
                ledger=Ledger(),
                body=body,
                scope=scope_for(conversation, self.instance_id),
                pinned=prompt.options.account,
                client=prompt.options.client or os.environ.get("LLM_ACCOUNTS_CLIENT") or None,
            ),
            body,
        )

    def _finish(self, response, call, attempt, message, secret_text, request_id):
        """Settle, then hand llm the scrubbed message, its usage and the routing record."""
        routing = call.completed(attempt, message, request_id)
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
        set_usage(response, usage)


def set_usage(response, usage):
    details = {
        name: value
        for name, value in usage.items()
        if name not in ("input_tokens", "output_tokens") and value not in (None, 0, {}, "standard")
    }
    if isinstance(details.get("cache_creation"), dict) and not any(details["cache_creation"].values()):
        del details["cache_creation"]
    if details.get("inference_geo") == "not_available":
        del details["inference_geo"]
    response.set_usage(
        input=usage.get("input_tokens"), output=usage.get("output_tokens"), details=details or None
    )


class UnroutedCall:
    """No accounts declared: send with llm's single Anthropic key, touching no ledger."""

    def __init__(self, key):
        self.key = key

    def begin(self):
        from .keys import Secret
        from .routing import Attempt

        return Attempt(reservation=None, secret=Secret(self.key))

    def refused(self, attempt, status, raw_body):
        from . import classify

        info = classify.parse_error_body(raw_body)
        raise AccountsError(
            classify.error_code_for(classify.outcome_for_status(status)),
            f"Anthropic answered HTTP {status} {info.provider_error_type} (unrouted: no accounts declared)",
            http_status=status,
        )

    def transport_failed(self, attempt, error):
        raise AccountsError(
            "transport_error", f"the connection failed ({type(error).__name__}) (unrouted)"
        )

    def completed(self, attempt, message, request_id=None):
        return None

    def stream_failed(self, attempt, outcome, failure_class=None):
        pass


class Projector:
    """Turn Messages stream events into llm StreamEvents, scrubbed of the attempt's key.

    Every event that carries no text into a join is a pause for the scrubber (Amendment 1), so
    held text is released inside the block it belongs to.
    """

    CHANNEL_TYPES = {"text": "text", "reasoning": "reasoning", "tool_args": "tool_call_args"}

    def __init__(self, secret_text):
        self.key = secret_text
        self.scrubber = scrub.StreamScrubber(secret_text)
        self.index = None
        self.tool_call_id = None
        self.schema_answer = False

    def events(self, event):
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                return self._release(self.scrubber.feed("text", delta.get("text", "")))
            if dtype == "thinking_delta":
                return self._release(self.scrubber.feed("reasoning", delta.get("thinking", "")))
            if dtype == "input_json_delta":
                # The --schema tool's input is the answer itself, shown as text.
                channel = "text" if self.schema_answer else "tool_args"
                return self._release(self.scrubber.feed(channel, delta.get("partial_json", "")))
            out = self._release(self.scrubber.pause())
            if dtype == "signature_delta":
                signature = self.scrubber.other(delta.get("signature", ""))
                out.append(self._event("reasoning", "", provider_metadata={"anthropic": {"signature": signature}}))
            return out
        out = self._release(self.scrubber.pause())
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            self.index = event.get("index", 0) + 1
            self.tool_call_id = None
            btype = block.get("type")
            self.schema_answer = btype == "tool_use" and block.get("name") == payload.SCHEMA_TOOL
            if self.schema_answer:
                pass
            elif btype == "tool_use":
                self.tool_call_id = block.get("id")
                out.append(self._event("tool_call_name", self.scrubber.other(block.get("name", ""))))
            elif btype == "redacted_thinking":
                data = self.scrubber.other(block.get("data", ""))
                out.append(
                    self._event("reasoning", "", provider_metadata={"anthropic": {"type": "redacted_thinking", "data": data}})
                )
            elif btype not in ("text", "thinking"):
                raise AccountsError(
                    "unsupported_pricing", "the response holds a content block this plugin does not price"
                )
        return out

    def finish(self):
        return self._release(self.scrubber.flush())

    def _event(self, type_, chunk, **extra):
        return StreamEvent(
            type=type_, chunk=chunk, part_index=self.index, tool_call_id=self.tool_call_id, **extra
        )

    def _release(self, pieces):
        return [self._event(self.CHANNEL_TYPES[channel], text) for channel, text in pieces if text]


def message_events(message, secret_text):
    """StreamEvents for a whole (non-streamed) message, from its scrubbed JSON."""
    clean = scrub.scrub_json(message, secret_text) if secret_text else message
    events = []
    for index, block in enumerate(clean.get("content") or [], start=1):
        btype = block.get("type")
        if btype == "text" and block.get("text"):
            events.append(StreamEvent(type="text", chunk=block["text"], part_index=index))
        elif btype == "thinking":
            metadata = {"anthropic": {"signature": block["signature"]}} if block.get("signature") else None
            events.append(
                StreamEvent(type="reasoning", chunk=block.get("thinking", ""), part_index=index, provider_metadata=metadata)
            )
        elif btype == "redacted_thinking":
            events.append(
                StreamEvent(
                    type="reasoning",
                    chunk="",
                    part_index=index,
                    provider_metadata={"anthropic": {"type": "redacted_thinking", "data": block.get("data", "")}},
                )
            )
        elif btype == "tool_use" and block.get("name") == payload.SCHEMA_TOOL:
            events.append(StreamEvent(type="text", chunk=json.dumps(block.get("input") or {}), part_index=index))
        elif btype == "tool_use":
            events.append(StreamEvent(type="tool_call_name", chunk=block.get("name", ""), part_index=index, tool_call_id=block.get("id")))
            events.append(
                StreamEvent(type="tool_call_args", chunk=json.dumps(block.get("input") or {}), part_index=index, tool_call_id=block.get("id"))
            )
    return events


def _parse_event(data):
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _stream_failure(assembler):
    """Outcome and failure class of a stream that ended without message_stop."""
    if assembler.error_type is not None:
        outage = assembler.error_type in ("overloaded_error", "api_error")
        return "stream_error", ("provider_outage" if outage else None)
    return "stream_truncated", "transport"


def _raise_stream_failure(attempt, outcome):
    code = "provider_error" if outcome == "stream_error" else "transport_error"
    raise AccountsError(
        code,
        f"account '{attempt.account}': the stream ended early ({outcome}); the attempt stays open until reconciled (attempt {attempt.id})"
        if attempt.reservation is not None
        else f"the stream ended early ({outcome})",
        account=attempt.account if attempt.reservation is not None else None,
        attempt_id=attempt.id if attempt.reservation is not None else None,
    )


class RoutedClaude(_Shared, llm.KeyModel):
    def execute(self, prompt, stream, response, conversation, key):
        call, body = self._prepare(prompt, stream, conversation, key)
        url = transport.messages_url()
        with transport.client() as http:
            while True:
                attempt = call.begin()
                secret_text = attempt.secret.reveal()
                request = http.build_request("POST", url, content=body, headers=transport.headers(attempt.secret, stream=stream))
                try:
                    resp = http.send(request, stream=True)
                except httpx.HTTPError as error:
                    if call.transport_failed(attempt, error):
                        continue
                try:
                    if resp.status_code != 200:
                        if call.refused(attempt, resp.status_code, transport.read_error_body(resp)):
                            continue
                    request_id = resp.headers.get("request-id")
                    if stream:
                        yield from self._stream(resp, call, attempt, response, secret_text, request_id)
                    else:
                        try:
                            message = json.loads(resp.read())
                        except (httpx.HTTPError, ValueError):
                            call.stream_failed(attempt, "transport_error", "transport")
                            _raise_stream_failure(attempt, "stream_truncated")
                        yield from message_events(message, secret_text)
                        self._finish(response, call, attempt, message, secret_text, request_id)
                    return
                finally:
                    resp.close()

    def _stream(self, resp, call, attempt, response, secret_text, request_id):
        decoder, assembler, projector = SSEDecoder(), MessageAssembler(), Projector(secret_text)
        try:
            for line in resp.iter_lines():
                item = decoder.feed(line)
                if item is None:
                    continue
                event = _parse_event(item[1])
                if event is None:
                    continue
                assembler.apply(event)
                yield from projector.events(event)
                if assembler.complete or assembler.error_type is not None:
                    break
        except httpx.HTTPError:
            pass
        except GeneratorExit:
            call.stream_failed(attempt, "stream_closed")
            raise
        except BaseException:
            call.stream_failed(attempt, "cancelled")
            raise
        yield from projector.finish()
        if not assembler.complete:
            outcome, failure = _stream_failure(assembler)
            call.stream_failed(attempt, outcome, failure)
            _raise_stream_failure(attempt, outcome)
        self._finish(response, call, attempt, assembler.final_message(), secret_text, request_id)


class AsyncRoutedClaude(_Shared, llm.AsyncKeyModel):
    async def execute(self, prompt, stream, response, conversation, key):
        from .ledger import run_async

        call, body = await run_async(self._prepare, prompt, stream, conversation, key)
        url = transport.messages_url()
        async with transport.async_client() as http:
            while True:
                attempt = await run_async(call.begin)
                secret_text = attempt.secret.reveal()
                request = http.build_request("POST", url, content=body, headers=transport.headers(attempt.secret, stream=stream))
                try:
                    resp = await http.send(request, stream=True)
                except httpx.HTTPError as error:
                    if await run_async(call.transport_failed, attempt, error):
                        continue
                except asyncio.CancelledError:
                    # The request may have left: unknown, never zero.
                    await _shielded(call.stream_failed, attempt, "cancelled")
                    raise
                try:
                    if resp.status_code != 200:
                        raw = await transport.aread_error_body(resp)
                        if await run_async(call.refused, attempt, resp.status_code, raw):
                            continue
                    request_id = resp.headers.get("request-id")
                    if stream:
                        async for event in self._stream(resp, call, attempt, response, secret_text, request_id):
                            yield event
                    else:
                        try:
                            message = json.loads(await resp.aread())
                        except (httpx.HTTPError, ValueError):
                            await run_async(call.stream_failed, attempt, "transport_error", "transport")
                            _raise_stream_failure(attempt, "stream_truncated")
                        for event in message_events(message, secret_text):
                            yield event
                        await run_async(self._finish, response, call, attempt, message, secret_text, request_id)
                    return
                finally:
                    await resp.aclose()

    async def _stream(self, resp, call, attempt, response, secret_text, request_id):
        from .ledger import run_async

        decoder, assembler, projector = SSEDecoder(), MessageAssembler(), Projector(secret_text)
        try:
            async for line in resp.aiter_lines():
                item = decoder.feed(line)
                if item is None:
                    continue
                event = _parse_event(item[1])
                if event is None:
                    continue
                assembler.apply(event)
                for out in projector.events(event):
                    yield out
                if assembler.complete or assembler.error_type is not None:
                    break
        except httpx.HTTPError:
            pass
        except GeneratorExit:
            # aclose() by the consumer: settle synchronously, there is no loop turn to wait for.
            call.stream_failed(attempt, "stream_closed")
            raise
        except asyncio.CancelledError:
            await _shielded(call.stream_failed, attempt, "cancelled")
            raise
        for out in projector.finish():
            yield out
        if not assembler.complete:
            outcome, failure = _stream_failure(assembler)
            await run_async(call.stream_failed, attempt, outcome, failure)
            _raise_stream_failure(attempt, outcome)
        await _shielded(self._finish, response, call, attempt, assembler.final_message(), secret_text, request_id)


async def _shielded(fn, *args):
    """Run a settlement in a worker, shielded from the caller's cancellation (ADR-0126 D6)."""
    from .ledger import run_async

    await asyncio.shield(run_async(fn, *args))


def model_pairs(revision, default_model):
    """(sync, async, aliases) for ``claude-routed`` and every active model of the revision."""
    yield RoutedClaude(ROUTED_ID, default_model), AsyncRoutedClaude(ROUTED_ID, default_model), ()
    for model in revision.models.values():
        if model.status == "retired":
            continue
        model_id = f"{ROUTED_ID}/{model.id}"
        aliases = tuple(f"{ROUTED_ID}/{alias}" for alias in model.aliases)
        yield RoutedClaude(model_id, model.id), AsyncRoutedClaude(model_id, model.id), aliases
