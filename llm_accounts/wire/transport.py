"""One physical HTTP attempt against the Messages API: where it goes and how it is signed.

Keys are read only here, to build one request's headers, and never leave the request: httpx
clients are made with ``trust_env=False`` (no proxy or netrc from the environment) and never
follow redirects, so the key goes only to the validated base URL (docs/security.md "Sending a
key").
"""

import asyncio
import atexit
import contextlib
import dataclasses
import errno
import functools
import http.cookiejar
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
import urllib.parse
import weakref
import zlib

import httpx

from . import classify
from ..errors import AccountsError
from .payload import ANTHROPIC_VERSION

BASE_URL_ENV = "LLM_ACCOUNTS_BASE_URL"
DEFAULT_BASE_URL = "https://api.anthropic.com"
# The Anthropic SDK's own variable: said to be ignored, never followed (docs/security.md "Sending a key").
SDK_BASE_URL_ENV = "ANTHROPIC_BASE_URL"
_sdk_base_url_said = []


def _say_sdk_base_url_ignored():
    """Once a process: ANTHROPIC_BASE_URL is set for the SDK or another tool (a proxy, a gateway)
    and may point anywhere; following it would send every declared account's key there, so only
    LLM_ACCOUNTS_BASE_URL, set for this plugin on purpose, moves the requests. Its value is never
    repeated (it may hold credentials)."""
    if _sdk_base_url_said:
        return
    _sdk_base_url_said.append(True)
    import sys

    print(
        f"llm-accounts: {SDK_BASE_URL_ENV} is set and not used: routed prompts go to {DEFAULT_BASE_URL}; "
        f"set {BASE_URL_ENV} to send them elsewhere (https://, or http:// on loopback)",
        file=sys.stderr,
    )
# Read at most 64 KiB and one byte of an error body (docs/errors.md "Provider text is dropped").
ERROR_BODY_LIMIT = 64 * 1024
# A 200 answer's bound in decoded bytes: a whole message, a line of a stream, a page of the model
# list or of an Admin API report. No real answer comes near it (docs/architecture.md "Answers past
# their bound": 128,000 output tokens at 256 bytes each is 32 MiB, doubled for server tool
# results); past it the answer is not parsed (docs/errors.md "Answers past their bound").
ANSWER_LIMIT = 64 * 1024 * 1024
# At most this much of one raw read is decoded at a time: a gzip read never becomes 1000x larger.
_PIECE = 64 * 1024
ERROR_BODY_SECONDS = 5.0
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def base_url(environ=None):
    """``LLM_ACCOUNTS_BASE_URL``, allowed only as https, or http on loopback, and only as the API's
    root: a URL ending in ``/v1`` (or ``/v1/messages``) would send prompts to ``/v1/v1/messages``,
    whose 404 says nothing about a model (docs/errors.md "From an answer to a code")."""
    environ = os.environ if environ is None else environ
    value = environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    if not environ.get(BASE_URL_ENV) and environ.get(SDK_BASE_URL_ENV):
        _say_sdk_base_url_ignored()
    parsed = urllib.parse.urlsplit(value)
    host = parsed.hostname or ""
    if parsed.scheme == "https" and host:
        pass
    elif parsed.scheme == "http" and _is_loopback(host):
        pass
    else:
        raise AccountsError(
            "declaration_invalid",
            f"{BASE_URL_ENV}: must be an https:// URL, or http:// on loopback (127.0.0.1, localhost, [::1])",
        )
    if parsed.query or parsed.fragment or parsed.username or parsed.password or "sk-ant" in value.lower():
        # A key in the path would go out in every request line and into httpx's INFO log line
        # (docs/security.md "Sending a key"); the URL is never repeated.
        raise AccountsError(
            "declaration_invalid", f"{BASE_URL_ENV}: must not carry credentials (a key, a user or a password), a query or a fragment"
        )
    if parsed.path.rstrip("/").endswith(("/v1", "/v1/messages")):
        raise AccountsError(
            "declaration_invalid",
            f"{BASE_URL_ENV}: give the API's root without /v1 (such as http://127.0.0.1:8765 or "
            f"{DEFAULT_BASE_URL}); /v1/messages is added to it",
        )
    return value.rstrip("/")


def where(environ=None):
    """Where requests go, for an error saying a server could not be reached: the base URL (it is
    validated to hold no credentials, so it is safe to show) and what set it."""
    environ = os.environ if environ is None else environ
    if environ.get(BASE_URL_ENV):
        # The origin only: a path is the user's to choose and is not shown in errors.
        parsed = urllib.parse.urlsplit(base_url(environ))
        return f"at {parsed.scheme}://{parsed.netloc} (set by {BASE_URL_ENV})"
    return f"at {DEFAULT_BASE_URL} (the default; {BASE_URL_ENV} sets another)"


def _is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def messages_url(environ=None):
    return base_url(environ) + "/v1/messages"


def headers(secret, *, stream, betas=()):
    """Request headers for one attempt; the only place a key is unwrapped."""
    out = {
        "x-api-key": secret.reveal(),
        "anthropic-version": ANTHROPIC_VERSION,
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        # Only what ``bounded_chunks`` decodes within its bound (httpx would add br or zstd when
        # their packages are installed).
        "accept-encoding": "gzip, deflate",
    }
    if betas:
        out["anthropic-beta"] = ",".join(betas)
    return out


@functools.lru_cache(maxsize=1)
def _ssl_context():
    # Loading the CA bundle costs tens of milliseconds; one context serves every attempt of a
    # process (a tool chain or a notebook makes many).
    return httpx.create_ssl_context()


def _no_cookies():
    # A cookie one account's answer sets must not ride along on another account's request: the
    # shared pool keeps none (docs/security.md "Sending a key").
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def client():
    """A new client of its own (``llm accounts refresh-models``); prompts use ``shared_client``."""
    _quiet_header_traces()
    return httpx.Client(
        timeout=TIMEOUT, trust_env=False, follow_redirects=False, verify=_ssl_context(), cookies=_no_cookies()
    )


def async_client():
    _quiet_header_traces()
    return httpx.AsyncClient(
        timeout=TIMEOUT, trust_env=False, follow_redirects=False, verify=_ssl_context(), cookies=_no_cookies()
    )


_shared = {}  # pid -> httpx.Client
_shared_async = weakref.WeakKeyDictionary()  # event loop -> httpx.AsyncClient
_shared_lock = threading.Lock()


def shared_client():
    """The process's one connection pool for prompts (``llm chat``, loops in Python): prompts
    reuse its connections instead of opening one each. It holds no key: the key is a header of
    each request only, and no cookie is kept. A forked child makes its own."""
    pid = os.getpid()
    with _shared_lock:
        pooled = _shared.get(pid)
        if pooled is None or pooled.is_closed:
            _shared.clear()
            pooled = _shared[pid] = client()
        return pooled


def shared_async_client():
    """The running event loop's one pool (an httpx.AsyncClient belongs to one loop)."""
    loop = asyncio.get_running_loop()
    with _shared_lock:
        pooled = _shared_async.get(loop)
        if pooled is None or pooled.is_closed:
            pooled = _shared_async[loop] = async_client()
        return pooled


@atexit.register
def _close_shared():
    for pooled in list(_shared.values()):
        try:
            pooled.close()
        except Exception:
            pass


class _BoundedBody:
    """At most 64 KiB + 1 byte of an error body, collected within five seconds; a body that has
    not arrived by then is classified ``other`` (docs/errors.md "Provider text is dropped")."""

    def __init__(self):
        self.chunks, self.size = [], 0
        self.deadline = time.monotonic() + ERROR_BODY_SECONDS
        self.expired = False

    def add(self, chunk):
        """Keep ``chunk``; True once the bound or the deadline is reached."""
        self.chunks.append(chunk)
        self.size += len(chunk)
        self.expired = self.expired or time.monotonic() > self.deadline
        return self.size > ERROR_BODY_LIMIT or self.expired

    def remaining(self):
        return max(0.0, self.deadline - time.monotonic())

    def info(self):
        if self.expired:
            return classify.UNREADABLE
        return classify.parse_error_body(b"".join(self.chunks)[: ERROR_BODY_LIMIT + 1])


class _Undecodable(Exception):
    """A body in an encoding the bounded reader does not decode."""


def _decoder(response):
    """A zlib decoder for the response's ``content-encoding`` (None for identity)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise _Undecodable


def bounded_chunks(response, limit):
    """At most ``limit`` + 1 decoded bytes of a body (None: all of it), in pieces of at most 64 KiB.

    httpx decodes each raw read whole: one 64 KiB read of gzip can become ~64 MB before a bound
    on decoded chunks sees it. Here each raw read is decoded only as far as the bound still
    allows (docs/errors.md "Provider text is dropped"). An encoding other than identity, gzip
    or deflate, or a broken one, ends the body: what was read is all there is.
    """
    try:
        decoder, size = _decoder(response), 0
        for raw in response.iter_raw():
            for chunk in _pieces(decoder, raw, limit, size):
                size += len(chunk)
                yield chunk
                if limit is not None and size > limit:
                    return
    except (_Undecodable, zlib.error):
        return


async def abounded_chunks(response, limit):
    """``bounded_chunks`` for an async response."""
    try:
        decoder, size = _decoder(response), 0
        async for raw in response.aiter_raw():
            for chunk in _pieces(decoder, raw, limit, size):
                size += len(chunk)
                yield chunk
                if limit is not None and size > limit:
                    return
    except (_Undecodable, zlib.error):
        return


def _pieces(decoder, raw, limit, size):
    """``raw`` decoded at most ``_PIECE`` bytes at a time, no further than ``limit`` + 1 bytes
    in all (None: no limit, as for a stream, whose lines are bounded instead)."""
    if decoder is None:
        yield raw
        return
    while raw:
        room = _PIECE if limit is None else min(_PIECE, limit + 1 - size)
        chunk = decoder.decompress(raw, room)
        if not chunk and decoder.unconsumed_tail == raw:
            return  # no progress: nothing more comes of this read
        raw = decoder.unconsumed_tail
        size += len(chunk)
        if chunk:
            yield chunk
        if limit is not None and size > limit:
            return


def read_bounded(response, limit):
    """At most ``limit`` + 1 decoded bytes of a body: longer than ``limit`` means past the bound."""
    return b"".join(bounded_chunks(response, limit))


def get_bounded(http, url, params, headers, what, noun):
    """The body of a ``GET`` that answered 200, read within ``ANSWER_LIMIT``. Any other status
    raises its error code, naming ``what`` (such as "GET /v1/models"), the status and the
    documented error type; a body past its bound raises ``provider_error`` calling it ``noun``.
    Nothing of the provider's text is repeated (docs/errors.md "Answers past their bound")."""
    with http.stream("GET", url, params=params, headers=headers) as response:
        status = response.status_code
        body = read_bounded(response, ANSWER_LIMIT if status == 200 else ERROR_BODY_LIMIT)
    if status != 200:
        info = classify.parse_error_body(body)
        raise AccountsError(
            classify.error_code_for(classify.outcome_for_status(status)),
            f"{what} answered HTTP {status} {info.provider_error_type}",
            http_status=status,
        )
    if len(body) > ANSWER_LIMIT:
        raise AccountsError("provider_error", f"{what} answered with {noun} that passed its bound and was not read")
    return body


async def aread_bounded(response, limit):
    """``read_bounded`` for an async response."""
    return b"".join([chunk async for chunk in abounded_chunks(response, limit)])


def _socket_of(response):
    stream = response.extensions.get("network_stream")
    try:
        return stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # a transport without sockets (tests, mounts)
        return None


def read_refusal(response):
    """Read, classify and drop a non-200 body: only closed-set values leave this function.

    The body is parsed here and nowhere else, so no frame, exception or log outside it ever
    holds provider text (docs/errors.md "Provider text is dropped"). A server that stalls
    mid-body is cut off at the deadline.
    """
    body = _BoundedBody()

    def expire():
        body.expired = True

    with _deadline(response, body.remaining(), expire):
        try:
            for chunk in bounded_chunks(response, ERROR_BODY_LIMIT):
                if body.add(chunk):
                    break
        except httpx.HTTPError:
            pass
    return body.info()


@contextlib.contextmanager
def interrupts_held():
    """Hold a Ctrl-C that arrives inside the block until the block ends, then hand it to the
    handler that was in place (Python's raises ``KeyboardInterrupt``).

    A refusal's body is read within its bound (five seconds) and its outcome recorded before
    the caller stops, so an interrupted 4xx keeps its diagnosis and, when documented, settles at
    zero (docs/errors.md "Provider text is dropped"). Only the main thread receives signals; a
    handler that is not a Python function (ignored, or the default) is left as it is.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pressed = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed:
            previous(signal.SIGINT, None)


@contextlib.contextmanager
def _deadline(response, seconds, expired=None):
    """Shut the response's socket down after ``seconds`` (calling ``expired`` first): that wakes
    a read blocked on a server that stalls."""
    sock = _socket_of(response)

    def cut_off():
        if expired is not None:
            expired()
        _shut(sock)

    timer = threading.Timer(seconds, cut_off) if sock is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 1.0


def drain(response, lines):
    """Read what is left of a stream after ``message_stop`` (normally the chunked body's end), so
    its connection goes back to the pool; a server that sends more, or stalls, loses the
    connection instead (a timer shuts it down, as in ``read_refusal``)."""
    size = 0
    with _deadline(response, DRAIN_SECONDS):
        try:
            for line in lines:
                size += len(line) + 1
                if size > DRAIN_BYTES:
                    break
        except httpx.HTTPError:
            pass


async def adrain(lines):
    async def read():
        size = 0
        async for line in lines:
            size += len(line) + 1
            if size > DRAIN_BYTES:
                break

    try:
        await asyncio.wait_for(read(), DRAIN_SECONDS)
    except (asyncio.TimeoutError, httpx.HTTPError):
        pass


def _shut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


async def aread_refusal(response):
    body = _BoundedBody()

    async def read():
        async for chunk in abounded_chunks(response, ERROR_BODY_LIMIT):
            if body.add(chunk):
                break

    try:
        await asyncio.wait_for(read(), body.remaining())
    except asyncio.TimeoutError:
        body.expired = True
    except httpx.HTTPError:
        pass
    return body.info()


@dataclasses.dataclass(frozen=True)
class TransportFailure:
    """What may be kept of a failed connection: a closed-set description, never the exception
    (whose request carries the key's header)."""

    kind: str
    never_sent: bool


# errno values a failed connect reports, as the words a person reads (closed set).
_ERRNO_KINDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ENETUNREACH: "network unreachable",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ETIMEDOUT: "timed out",
    errno.ECONNRESET: "connection reset",
    errno.EPIPE: "connection closed",
}


def describe_failure(error):
    """A ``TransportFailure`` for an httpx error; reads only types and errno numbers.

    ``never_sent`` is true only when httpx proves the request never left: the connection was not
    established (docs/architecture.md "Failover").
    """
    never = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol))
    kind = None
    cause, seen = error, 0
    while cause is not None and seen < 8 and kind is None:
        if isinstance(cause, socket.gaierror):
            kind = "host name not resolved"
        elif isinstance(cause, OSError) and cause.errno in _ERRNO_KINDS:
            kind = _ERRNO_KINDS[cause.errno]
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if kind is None:
        kind = _KIND_FOR_TYPE.get(type(error), "connection failed")
    return TransportFailure(kind, never)


_KIND_FOR_TYPE = {
    httpx.ConnectTimeout: "timed out connecting",
    httpx.ReadTimeout: "timed out waiting for the answer",
    httpx.WriteTimeout: "timed out sending the request",
    httpx.PoolTimeout: "no connection free",
    httpx.ConnectError: "connection failed",
    httpx.ReadError: "connection broke while reading",
    httpx.WriteError: "connection broke while sending",
    httpx.RemoteProtocolError: "the server broke the HTTP protocol",
    httpx.UnsupportedProtocol: "unsupported URL scheme",
}


class _EventNamesOnly(logging.Filter):
    """httpcore's DEBUG trace prints response headers and exception text, which a hostile
    provider can fill with anything it was sent; these loggers keep only the event's name
    (``receive_response_headers.complete``), never its values (docs/security.md "Logging")."""

    def filter(self, record):
        record.msg, record.args = str(record.msg).split(" ", 1)[0], None
        return True


class _NoReasonPhrase(logging.Filter):
    """httpx's INFO line ends with the status line's reason phrase, which the server chooses:
    it is replaced by a fixed word; method, URL and status stay (docs/security.md "Logging")."""

    def filter(self, record):
        if isinstance(record.args, tuple) and len(record.args) == 5 and str(record.msg).startswith("HTTP Request:"):
            record.args = record.args[:4] + ("(reason not logged)",)
        return True


_TRACE_LOGGERS = ("httpcore.http11", "httpcore.http2", "httpcore.connection", "httpcore.proxy", "httpcore.socks")


@functools.lru_cache(maxsize=1)
def _quiet_header_traces():
    trace = _EventNamesOnly()
    for name in _TRACE_LOGGERS:
        logging.getLogger(name).addFilter(trace)
    logging.getLogger("httpx").addFilter(_NoReasonPhrase())
