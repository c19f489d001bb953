"""The stand-in's HTTP server: real sockets, HTTP/1.1, JSON and chunked SSE, on loopback only.

Request handling order (each step may answer with the documented error):
route (404) -> auth headers (400 both / 401 missing / 401 unknown) -> anthropic-version (400) ->
body -> the key's behaviour (script entries are consumed by POST /v1/messages only) -> request
validation (400, 404 model) -> the prompt cache and the reply. The Admin API and the Analytics API
take an admin key; the Analytics API then answers 404 to an organization without its beta and 400
without its anthropic-beta header.

A key is only ever compared, and quoted back by the echo_key behaviour (that is its purpose).
The request log holds labels, never keys: x-api-key and Authorization are dropped from it.
"""

import datetime as dt
import gzip
import hashlib
import http.server
import ipaddress
import json
import math
import socket
import sys
import threading
import time
import traceback
import zlib
import dataclasses
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from . import analytics, reports, wire
from .cache import PromptCache
from .config import INFERENCE_GEOS, RUNTIME_FIELDS, ConfigError, check_behaviour, check_settings, validate_config
from .models import configured_model, find_model, listed_models
from .replies import plan_reply
from .tokens import prompt_units
from .validation import Refusal, bad, check_prompt, served_geo, validate

VERSIONS = ("2023-06-01", "2026-10-21")
SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization"})
# Behaviours that also govern GET /v1/models and count_tokens: they are about the key or the service.
ACCOUNT_WIDE = frozenset({"unauthorized", "forbidden", "rate_limited", "overloaded", "api_error"})
MAX_BODY_BYTES = 32 * 1024 * 1024  # section 4.1: Messages and Token Counting
STREAM_CUT_AFTER = 2  # deltas sent before stream_error and drop break the stream
COUNTS_GROW_BY = 1000  # input tokens a counts_grow answer's final usage adds to message_start's
REASONS = {529: "Overloaded"}
# Messages fields count_tokens refuses as extra inputs (it counts a request, it does not run one).
NOT_COUNTED = ("max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata")
ADMIN_PATHS = frozenset(
    {"/v1/organizations/usage_report/messages", "/v1/organizations/cost_report", "/v1/organizations/api_keys"}
)
# The Usage and Cost Analytics API (beta): standin/analytics.py.
ANALYTICS_PATHS = frozenset({"/v1/organizations/analytics/usage", "/v1/organizations/analytics/cost"})
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ID_PREFIXES = {"req": ("req_011C", 20), "msg": ("msg_01", 22), "toolu": ("toolu_01", 22), "srvtoolu": ("srvtoolu_01", 22)}


def is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class _Key:
    label: str
    key: str = field(repr=False)
    organization: str
    behaviour: str
    script: list
    delay: float
    min_cache_tokens: object
    retry_after: int
    api_key_id: str
    shapes: list = field(default_factory=list)
    inference_geo: str = "not_available"
    inference_geo_default: object = None  # its workspace's default geo (None: the organization's)


def _handle_error(server, request, client_address):
    # A client that hangs up mid-response (a routed stream that ended at message_stop, a test
    # that dropped the connection) is normal here, not worth a traceback on stderr.
    error = sys.exc_info()[1]
    if isinstance(error, (ConnectionResetError, BrokenPipeError)):
        return
    http.server.ThreadingHTTPServer.handle_error(server, request, client_address)


class StandIn:
    """A loopback stand-in of the Anthropic Messages API with per-key behaviours.

    ``clock`` (seconds since the epoch) drives cache expiry and rate-limit resets, so tests can
    move time instead of sleeping.
    """

    def __init__(self, config, host="127.0.0.1", port=0, *, clock=time.time):
        if not is_loopback(host):
            raise ConfigError("host: must be a loopback address (127.0.0.0/8, localhost or ::1)")
        config = validate_config(config)
        self.clock = clock
        self.requests = []
        self.cache = PromptCache(lambda: self.clock())
        self._lock = threading.Lock()
        self._serial = 0
        self._keys = {entry["key"]: _Key(**entry) for entry in config["keys"]}
        self._labels = {state.label: state for state in self._keys.values()}
        # Admin API keys: each reads its organization's usage and cost reports (standin/reports.py).
        self._admin_keys = {entry["key"]: entry["organization"] for entry in config["admin_keys"]}
        self.report_delay = config["report_delay"]
        # Which instant puts a request in its report bucket ("arrival" or "completion").
        self.report_bucketing = config["report_bucketing"]
        self._organizations = config["organizations"]
        self._analytics_off = {name for name, settings in self._organizations.items() if not settings["analytics"]}
        # Usage other tools ran on an organization (add_usage): in the reports, not in ``requests``.
        self.foreign_usage = []
        # Models served besides the stand-in's own table (config "models").
        self.extra_models = tuple(configured_model(entry) for entry in config["models"])
        self.revision = None  # the prices the cost report bills at; None: the shipped revision
        self._stopping = threading.Event()
        self._connections = set()
        # Connections accepted so far: bench/overhead.py reads how many prompts share one.
        self.connections_opened = 0
        self._thread = None
        bind = "127.0.0.1" if host == "localhost" else host.strip("[]")
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        server_class = type(
            "_Server", (http.server.ThreadingHTTPServer,), {"address_family": family, "handle_error": _handle_error}
        )
        handler = type("_BoundHandler", (_Handler,), {"standin": self})
        self._server = server_class((bind, port), handler)
        self.port = self._server.server_address[1]
        self.base_url = f"http://[{bind}]:{self.port}" if family == socket.AF_INET6 else f"http://{bind}:{self.port}"

    def __repr__(self):
        return f"<StandIn {self.base_url} keys={sorted(self._labels)}>"

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="standin", daemon=True
            )
            self._thread.start()
        return self

    def stop(self):
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        for connection in list(self._connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def set_behaviour(self, label, behaviour, **params):
        """Change a key's behaviour now. Its script is replaced by ``script`` (default: emptied);
        its ``shapes`` and ``inference_geo`` stay as they are unless given."""
        state = self._labels.get(label)
        if state is None:
            raise ConfigError("label: no key has this label")
        check_behaviour(behaviour, "behaviour")
        unknown = sorted(set(params) - set(RUNTIME_FIELDS))
        if unknown:
            raise ConfigError(f"set_behaviour: unknown parameter; allowed: {', '.join(RUNTIME_FIELDS)}")
        current = {
            "delay": state.delay, "retry_after": state.retry_after, "min_cache_tokens": state.min_cache_tokens,
            "shapes": state.shapes, "inference_geo": state.inference_geo,
        }
        settings = check_settings({**current, **params}, "set_behaviour")
        with self._lock:
            state.behaviour = behaviour
            for name, value in settings.items():
                setattr(state, name, value)

    def clear_cache(self):
        self.cache.clear()

    def add_usage(self, organization, api_key_id, model, usage, *, at, completed_at=None, service_tier="standard",
                  inference_geo="global", speed="standard", requests=1, context_window=None):
        """Add usage another tool ran on ``organization`` (another client on the same key; the
        Console or Workbench when ``api_key_id`` is None; the Batch API; Priority Tier), as a real
        organization's reports hold it beside this project's own requests.

        ``usage`` is a Messages usage object (``input_tokens``, ``cache_read_input_tokens``,
        ``cache_creation`` or ``cache_creation_input_tokens``, ``output_tokens``,
        ``server_tool_use``), the sum of ``requests`` requests. ``at`` (arrival) and
        ``completed_at`` (default ``at``) are seconds since the epoch or aware datetimes on the
        stand-in's clock; the usage becomes visible ``report_delay`` after ``completed_at``.
        ``context_window`` defaults to the one of the requests' mean input. Batch usage is billed
        at half price, usage in ``us`` at 1.1x; Priority Tier usage is in the usage reports only
        (docs/architecture.md "Settling from the provider")."""
        arrived = _seconds(at, "at")
        completed = arrived if completed_at is None else _seconds(completed_at, "completed_at")
        if completed < arrived:
            raise ConfigError("add_usage.completed_at: must not be before at")
        if not isinstance(organization, str) or not organization:
            raise ConfigError("add_usage.organization: must be a non-empty string")
        if api_key_id is not None and not isinstance(api_key_id, str):
            raise ConfigError("add_usage.api_key_id: must be an API key id or None")
        if not isinstance(model, str) or not model:
            raise ConfigError("add_usage.model: must be a model id")
        if service_tier not in reports.SERVICE_TIERS:
            raise ConfigError(f"add_usage.service_tier: must be one of {', '.join(reports.SERVICE_TIERS)}")
        if inference_geo not in INFERENCE_GEOS:
            raise ConfigError(f"add_usage.inference_geo: must be one of {', '.join(INFERENCE_GEOS)}")
        if speed not in reports.SPEEDS:
            raise ConfigError(f"add_usage.speed: must be one of {', '.join(reports.SPEEDS)}")
        if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
            raise ConfigError("add_usage.requests: must be an integer >= 1")
        if context_window not in (None, "0-200k", "200k-1M"):
            raise ConfigError("add_usage.context_window: must be 0-200k or 200k-1M")
        tokens = _checked_usage(usage)
        entry = {
            "organization": organization,
            "api_key_id": api_key_id,
            "model_id": model,
            "usage": usage,
            "at": arrived,
            "arrived_at": arrived,
            "completed_at": completed,
            "service_tier": service_tier,
            "inference_geo": inference_geo,
            "speed": speed,
            "context_window": context_window or reports.context_window(tokens.input_total // requests),
            "requests": requests,
        }
        with self._lock:
            self.foreign_usage.append(entry)

    def set_analytics(self, organization, enabled):
        """Whether ``organization`` has the Usage and Cost Analytics API beta: without it both
        endpoints answer 404, as the provider does, so a reader's fall back to the legacy usage
        and cost reports can be tested (config ``organizations.<name>.analytics``)."""
        with self._lock:
            if enabled:
                self._analytics_off.discard(organization)
            else:
                self._analytics_off.add(organization)

    def _geo_default(self, state):
        """A key's workspace default geo, else its organization's, else None."""
        if state.inference_geo_default is not None:
            return state.inference_geo_default
        return self._organizations.get(state.organization, {}).get("inference_geo_default")

    def _billed_entries(self):
        with self._lock:
            return list(self.requests) + list(self.foreign_usage)

    # Used by the handler.

    def _log(self, entry):
        with self._lock:
            self.requests.append(entry)

    def _next_behaviour(self, state):
        with self._lock:
            return state.script.pop(0) if state.script else state.behaviour

    def _new_id(self, kind):
        with self._lock:
            self._serial += 1
            serial = self._serial
        prefix, length = _ID_PREFIXES[kind]
        number = int.from_bytes(hashlib.sha256(f"{kind}:{serial}".encode()).digest(), "big")
        digits = []
        while len(digits) < length:
            number, digit = divmod(number, 62)
            digits.append(_BASE62[digit])
        return prefix + "".join(digits)


def _seconds(value, name):
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError(f"add_usage.{name}: a datetime must carry a time zone")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"add_usage.{name}: must be seconds since the epoch or an aware datetime")
    return float(value)


def _checked_usage(usage):
    """The counts of an added usage object, each an integer >= 0."""
    if not isinstance(usage, dict):
        raise ConfigError("add_usage.usage: must be a Messages usage object")
    tokens = reports.Tokens.of(usage)
    if any(isinstance(count, bool) or not isinstance(count, int) or count < 0 for count in tokens.counts()):
        raise ConfigError("add_usage.usage: every count must be an integer >= 0")
    return tokens


def serve(standin):
    """Serve ``standin`` (a ``StandIn``, bound when it was made) until Ctrl-C: the ``llm accounts
    standin`` command, which binds first so that a taken port changes nothing."""
    try:
        standin._server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llm-accounts-standin"
    sys_version = ""
    # One write per SSE event; without this, Nagle's algorithm delays small writes on loopback.
    disable_nagle_algorithm = True
    standin = None

    def setup(self):
        super().setup()
        self.standin._connections.add(self.connection)
        with self.standin._lock:
            self.standin.connections_opened += 1

    def finish(self):
        try:
            super().finish()
        finally:
            self.standin._connections.discard(self.connection)

    def log_message(self, format, *args):
        """Quiet: the request log is ``StandIn.requests``."""

    def _exchange(self):
        _Exchange(self).run()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _exchange


class _Exchange:
    """One request and its response."""

    def __init__(self, handler):
        self.handler = handler
        self.standin = handler.standin
        self.request_id = self.standin._new_id("req")
        self.key = None
        self.presented = None  # the key as sent; only echo_key ever uses it
        url = urlsplit(handler.path)
        self.path, self.query = url.path, parse_qs(url.query)
        self.raw_query = url.query
        self.headers = {name.lower(): value for name, value in handler.headers.items()}
        self.version = None
        self.admin = False
        self.entry = {
            "method": handler.command,
            "path": self.path,
            "label": None,
            "auth": None,
            "model": None,
            "stream": False,
            "status": None,
            "body": None,
            "headers": {name: value for name, value in self.headers.items() if name not in SECRET_HEADERS},
            "behaviour": None,
            "organization": None,
            "request_id": self.request_id,
            "usage": None,
            "dropped": False,
            "at": None,  # the stand-in's clock when a reply was planned (when it was billed)
            "api_key_id": None,
            "model_id": None,
            # What a real organization's reports show of a billed request (standin/reports.py).
            "arrived_at": self.standin.clock(),
            "completed_at": None,  # its reply was sent, or its client went away
            "service_tier": None,
            "inference_geo": None,
            "speed": None,
            "context_window": None,
        }

    def run(self):
        try:
            raw = self._read_body()
            self._note_body(raw)
            route = self._route()
            self._authenticate()
            self._check_version()
            route(raw)
        except Refusal as refusal:
            self._send_json(
                refusal.status,
                wire.error_body(refusal.error_type, refusal.message, self.request_id, refusal.details),
                refusal.headers,
            )
        except OSError:
            self.handler.close_connection = True  # the client went away mid-response
        except Exception:
            # A stand-in bug: answer like the API's 500 (if nothing was sent yet) and show where it
            # happened. Frames and the exception's type only: its message could quote a request.
            error_type, _, trace = sys.exc_info()
            sys.stderr.write("".join(traceback.format_tb(trace)) + f"standin: {error_type.__name__}\n")
            self.handler.close_connection = True
            if self.entry["status"] is None:
                self._send_json(500, wire.error_body("api_error", "Internal server error", self.request_id))
        finally:
            self._complete()  # a slow reply whose client went away (or a stand-in bug) ends here

    def _complete(self):
        """Note when a billed request completed: its last byte is about to be sent, or its client
        went away. Its usage becomes visible report_delay later (standin/reports.py); set before
        the last byte, so a client that has read the whole reply finds it completed."""
        if self.entry["usage"] is not None and self.entry["completed_at"] is None:
            self.entry["completed_at"] = self.standin.clock()

    # Request.

    def _read_body(self):
        rfile = self.handler.rfile
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts, size = [], 0
            while True:
                length = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
                if length == 0:
                    while rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                size += length
                if size > MAX_BODY_BYTES:
                    self.handler.close_connection = True
                    raise Refusal(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
                parts.append(rfile.read(length))
                rfile.readline()
            return b"".join(parts)
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self.handler.close_connection = True
            raise Refusal(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
        return rfile.read(length) if length else b""

    def _route(self):
        method, path = self.handler.command, self.path.rstrip("/")
        if method == "POST" and path == "/v1/messages":
            return self._messages
        if method == "POST" and path == "/v1/messages/count_tokens":
            return self._count_tokens
        if method == "GET" and path == "/v1/models":
            return self._list_models
        if method == "GET" and path.startswith("/v1/models/"):
            return lambda raw: self._get_model(path[len("/v1/models/"):])
        if method == "GET" and path in ADMIN_PATHS:
            self.admin = True
            return lambda raw: self._report(path)
        if method == "GET" and path in ANALYTICS_PATHS:
            self.admin = True
            return lambda raw: self._analytics(path)
        raise Refusal(404, "not_found_error", "Not Found")

    def _authenticate(self):
        if self.admin:
            # The Admin API takes only an admin key in x-api-key; an API key is refused.
            presented = self.headers.get("x-api-key")
            if not presented:
                raise Refusal(401, "authentication_error", "x-api-key header is required")
            organization = self.standin._admin_keys.get(presented)
            if organization is None:
                raise Refusal(401, "authentication_error", "invalid x-api-key")
            self.entry["auth"], self.entry["organization"], self.entry["label"] = "admin", organization, "admin"
            return
        api_key, authorization = self.headers.get("x-api-key"), self.headers.get("authorization")
        if api_key is not None and authorization is not None:
            raise bad("Both x-api-key and Authorization headers were provided; send the key in only one of them.")
        presented = None
        if api_key:
            self.entry["auth"], presented = "x-api-key", api_key
        elif authorization:
            scheme, _, credential = authorization.partition(" ")
            if scheme.lower() == "bearer":
                self.entry["auth"], presented = "bearer", credential.strip()
        else:
            raise Refusal(401, "authentication_error", "x-api-key header is required")
        state = self.standin._keys.get(presented) if presented else None
        if state is None:
            raise Refusal(401, "authentication_error", "invalid x-api-key")
        self.key, self.presented = state, presented
        self.entry["label"], self.entry["organization"] = state.label, state.organization

    def _check_version(self):
        version = self.headers.get("anthropic-version")
        if not version:
            raise bad("anthropic-version: header is required")
        if version not in VERSIONS:
            raise bad(f"anthropic-version: must be one of {', '.join(VERSIONS)}")
        self.version = version

    def _note_body(self, raw):
        """Log the JSON body of every request, even one refused before it is read (401, 404)."""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            return
        if isinstance(body, dict):
            self.entry["body"] = body
            self.entry["stream"] = body.get("stream") is True
            if isinstance(body.get("model"), str):
                self.entry["model"] = body["model"]

    def _json_body(self, raw):
        if self.entry["body"] is None:
            try:
                json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise bad("There was an error parsing the body of your request") from None
            raise bad("body: Input should be a valid dictionary")
        return self.entry["body"]

    # Behaviours.

    def _refuse_as(self, behaviour):
        status, error_type, message, details = wire.behaviour_error(
            behaviour, organization=self.key.organization, now=self.standin.clock()
        )
        headers = {}
        if behaviour == "rate_limited":
            headers = wire.ratelimit_headers(self.standin.clock(), limited=True, retry_after=self.key.retry_after)
            headers.update({"retry-after": str(self.key.retry_after), "x-should-retry": "true"})
        elif behaviour in ("spend_limit", "api_error_final", "overloaded_final"):
            headers = {"x-should-retry": "false"}  # a spend cap has no retry-after (section 4.1)
        elif behaviour == "unavailable":
            headers = {"retry-after": str(self.key.retry_after)}
        raise Refusal(status, error_type, message, details, headers)

    def _standing_behaviour(self):
        """GET /v1/models and count_tokens follow the key's standing behaviour, not its script."""
        behaviour = self.key.behaviour
        self.entry["behaviour"] = behaviour
        if behaviour in ACCOUNT_WIDE:
            self._refuse_as(behaviour)
        if behaviour == "drop":
            self._drop()
            return False
        if behaviour == "slow":
            self.standin._stopping.wait(self.key.delay)
        return True

    def _drop(self):
        """Close the connection without (the rest of) a response."""
        self.entry["dropped"] = True
        if self.entry["status"] is None:
            self.entry["status"] = 0  # no response at all
            self.standin._log(self.entry)
        self.handler.close_connection = True
        try:
            self.handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # Endpoints.

    def _messages(self, raw):
        body = self._json_body(raw)
        stream = self.entry["stream"]
        behaviour = self.standin._next_behaviour(self.key)
        self.entry["behaviour"] = behaviour
        if behaviour in wire.ERROR_STATUS:
            self._refuse_as(behaviour)
        model = validate(body, messages=True, version=self.version, extra_models=self.standin.extra_models)
        betas = [beta.strip() for beta in self.headers.get("anthropic-beta", "").split(",")]
        units, points, total = check_prompt(body, model, betas, force=behaviour)
        geo = served_geo(body, model, self.standin._geo_default(self.key), self.key.inference_geo)
        if behaviour in wire.STREAM_ERRORS and not stream:
            self._refuse_as(wire.STREAM_ERRORS[behaviour][2])
        if behaviour == "drop" and not stream:
            self._drop()
            return
        minimum = self.key.min_cache_tokens
        plan = self.standin.cache.plan(
            self.key.organization, model.id, units, points, model.min_cache_tokens if minimum is None else minimum
        )
        reply = plan_reply(
            body,
            self.standin._new_id,
            echo=self.presented if behaviour == "echo_key" else None,
            refuse=behaviour == "refusal",
            shapes=self.key.shapes,
            extra_uses=1 if behaviour == "search_overrun" else 0,
        )
        if behaviour == "counts_grow":  # final input counts above message_start's (a conflict to test)
            reply = dataclasses.replace(reply, extra_input_tokens=reply.extra_input_tokens + COUNTS_GROW_BY)
        message_id = self.standin._new_id("msg")
        # Billed from here on, whether or not the client reads the whole reply (standin/reports.py).
        self.entry["at"], self.entry["api_key_id"], self.entry["model_id"] = self.standin.clock(), self.key.api_key_id, model.id
        self.entry["usage"] = wire.usage(plan, reply.output_tokens, geo, reply)
        self.entry.update(
            service_tier="standard", inference_geo=geo, speed="standard",
            context_window=reports.context_window(reports.Tokens.of(self.entry["usage"]).input_total),
        )
        delay = self.key.delay if behaviour == "slow" else 0.0
        if delay:
            self.standin._stopping.wait(delay)
        else:
            # Nothing in this reply takes the stand-in time: it completes the instant it is planned,
            # whether the client reads it to the end or not. A slow reply completes when its last
            # event is sent or its client goes away (_complete).
            self.entry["completed_at"] = self.entry["at"]
        # The cache entry becomes readable once the response begins (section 5).
        self.standin.cache.commit(self.key.organization, model.id, plan)
        if stream:
            self._stream(model, message_id, reply, plan, behaviour, delay, total)
        else:
            content = [block.final for block in reply.blocks]
            self._complete()
            self._send_json(200, wire.message(model.id, message_id, content, reply.stop_reason, reply.stop_sequence,
                                              self.entry["usage"], reply.stop_details, self._shape("stop_details_null")),
                            total_input=total)

    def _count_tokens(self, raw):
        body = self._json_body(raw)
        if not self._standing_behaviour():
            return
        validate(body, messages=False, version=self.version, extra_models=self.standin.extra_models)
        for name in NOT_COUNTED:
            if name in body:
                raise bad(f"{name}: Extra inputs are not permitted")
        self._send_json(200, {"input_tokens": sum(unit.tokens for unit in prompt_units(body))})

    def _list_models(self, raw):
        if not self._standing_behaviour():
            return
        try:
            limit = int(self.query.get("limit", ["20"])[0])
        except ValueError:
            limit = 0
        if not 1 <= limit <= 1000:
            raise bad("limit: Input should be an integer between 1 and 1000")
        models = listed_models(self.standin.extra_models)
        ids = [model.id for model in models]
        after, before = self.query.get("after_id", [None])[0], self.query.get("before_id", [None])[0]
        if before in ids:
            window = models[max(0, ids.index(before) - limit): ids.index(before)]
            has_more = ids.index(before) - limit > 0
        else:
            start = ids.index(after) + 1 if after in ids else 0
            window = models[start: start + limit]
            has_more = start + limit < len(models)
        data = [model.as_json() for model in window]
        if self.key.behaviour == "echo_key" and after is None and before is None:
            # A hostile listing: the key itself, and an id that quotes it, among the models.
            for listed_id in (self.presented, f"claude-{self.presented}-latest"):
                data.insert(0, {**models[0].as_json(), "id": listed_id, "display_name": listed_id})
        self._send_json(200, {
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        })

    def _get_model(self, name):
        self.entry["model"] = name
        if not self._standing_behaviour():
            return
        model = find_model(name, self.standin.extra_models)
        if model is None:
            raise Refusal(404, "not_found_error", f"model: {name}")
        self._send_json(200, model.as_json())

    def _report(self, path):
        standin = self.standin
        organization = self.entry["organization"]
        if path.endswith("/api_keys"):
            self._send_json(200, reports.api_keys(self.query, standin._keys.values(), organization))
            return
        now = standin.clock()
        billed = reports.billed(
            standin._billed_entries(), organization, now - standin.report_delay, standin.report_bucketing
        )
        if path.endswith("/cost_report"):
            page = reports.cost_report(self.query, billed, now, self._revision())
        else:
            page = reports.usage_report(self.query, billed, now, self._betas())
        self._send_json(200, page)

    def _analytics(self, path):
        """The Usage and Cost Analytics API: 404 to an organization without its beta, 400 without
        the beta header, else a page (standin/analytics.py)."""
        standin = self.standin
        organization = self.entry["organization"]
        with standin._lock:
            enrolled = organization not in standin._analytics_off
        if not enrolled:
            raise Refusal(404, "not_found_error", "Not Found")
        if analytics.BETA not in self._betas():
            raise bad(f"anthropic-beta: this endpoint requires the beta {analytics.BETA}")
        # Blank values kept: api_key_ids[]= (an empty entry) is a filter of its own.
        query = parse_qs(self.raw_query, keep_blank_values=True)
        entries, now = standin._billed_entries(), standin.clock()
        if path.endswith("/cost"):
            page = analytics.cost(query, entries, organization, now, standin.report_delay, self._revision(),
                                  standin.report_bucketing)
        else:
            page = analytics.usage(query, entries, organization, now, standin.report_delay, standin.report_bucketing)
        self._send_json(200, page)

    def _betas(self):
        return [beta.strip() for beta in self.headers.get("anthropic-beta", "").split(",") if beta.strip()]

    def _revision(self):
        from ..pricing.prices import current_revision

        return self.standin.revision or current_revision()

    # Response.

    def _shape(self, name):
        """Whether the key's answers take on ``name`` (config.SHAPES)."""
        return self.key is not None and name in self.key.shapes

    def _gzip(self):
        return self._shape("gzip") and "gzip" in self.headers.get("accept-encoding", "").lower()

    def _start(self, status, headers, total_input=0):
        handler = self.handler
        self.entry["status"] = status
        self.standin._log(self.entry)
        handler.send_response(status, REASONS.get(status))
        for name, value in headers.items():
            handler.send_header(name, value)
        if status == 200 and self._shape("retry_after_200"):
            handler.send_header("retry-after", "30")  # on a success it asks nothing of the client
        if self._shape("set_cookie"):
            handler.send_header("set-cookie", f"standin_session={self.request_id}; Path=/; HttpOnly")
            handler.send_header("set-cookie", "__cf_bm=standin; Domain=127.0.0.1; Path=/; Secure")
        handler.send_header("request-id", self.request_id)
        if self.key is not None:
            handler.send_header("anthropic-organization-id", self.key.organization)
            if "anthropic-ratelimit-requests-limit" not in headers:
                for name, value in wire.ratelimit_headers(
                    self.standin.clock(), retry_after=self.key.retry_after, input_tokens=total_input
                ).items():
                    handler.send_header(name, value)
        handler.end_headers()

    def _send_json(self, status, payload, headers=None, total_input=0):
        data = wire.dumps(payload).encode("utf-8")
        encoding = {}
        if self._gzip():
            data, encoding = gzip.compress(data), {"content-encoding": "gzip"}
        self._start(
            status,
            {"content-type": "application/json", "content-length": str(len(data)), **encoding, **(headers or {})},
            total_input,
        )
        self.handler.wfile.write(data)

    def _stream(self, model, message_id, reply, plan, behaviour, delay, total_input):
        cut = STREAM_CUT_AFTER if behaviour in wire.STREAM_ERRORS or behaviour == "drop" else None
        self.entry["dropped"] = behaviour == "drop"  # set before the entry is logged
        events = wire.encode_events(wire.stream_events(
            model.id, message_id, reply, plan, stop_after=cut, null_details=self._shape("stop_details_null"),
            inference_geo=self.entry["inference_geo"],
        ))
        # gzip: one deflate stream over the whole body, flushed after each event so every event
        # arrives when it is sent, as a compressing proxy in front of the API sends it.
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if self._gzip() else None
        self._start(200, {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            **({"content-encoding": "gzip"} if compressor else {}),
        }, total_input)
        write = self.handler.wfile.write

        def put(data, last=False):
            if compressor is not None:
                data = compressor.compress(data) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
            if data:
                write(b"%x\r\n%s\r\n" % (len(data), data))

        # The request completes as its last event is sent (message_stop, or the error event).
        last = len(events) - 1 if behaviour not in wire.STREAM_ERRORS and behaviour != "drop" else None
        for position, event in enumerate(events):
            if position and delay and self.standin._stopping.wait(delay):
                break
            if position == last:
                self._complete()
            put(event)
        if behaviour == "drop":
            self._drop()
            return
        if behaviour in wire.STREAM_ERRORS:
            self._complete()
            put(wire.stream_error_event(behaviour))
        if compressor is not None:
            put(b"", last=True)
        write(b"0\r\n\r\n")
