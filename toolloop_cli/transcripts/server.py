"""A loopback fake provider: a cassette's answers served over real HTTP, with faults on demand.

``toolloop serve CASSETTE`` and the live-mode tests use it: point ``OPENAI_BASE_URL``,
``ANTHROPIC_BASE_URL`` or ``GEMINI_BASE_URL`` at it and run with ``--provider``. Requests are
answered in order, per provider API (recognised from the request path, like replay), whatever
they say; every request received is kept (``received``) and, with a log file, appended to it as
one JSON line, so tests can assert on what the client really sent. Credential headers are never
logged. The log must be a file that can be appended to when serving starts (a folder, a missing
folder or a file that cannot be written is a ``UsageError`` then); a request whose line cannot
be written later is answered 500 in the provider's error shape, its recorded answer kept for the
next request, and the failure goes to ``on_log_error`` as one line.

Event streams are sent event by event, each flushed, on a connection that closes at the end (no
``content-length``), as providers do. Faults are consumed in the order given, one request each
(``429:2`` answers the next two requests with 429):

- ``429[:N]`` — rate limited, with ``retry-after`` (seconds, ``retry_after``);
- ``500[:N]``, ``503[:N]``, ``529[:N]``, ``400[:N]`` — that status, in the provider's error shape;
- ``cut:K`` — the next recorded answer, but the connection closes after ``K`` events (after
  ``K`` bytes for a JSON answer, whose ``content-length`` then promises more than comes).

It binds 127.0.0.1 only: it is a test double, never a proxy. It is bounded like one: a request
body over ``MAX_REQUEST_BYTES`` is answered 413 unread, a bad ``content-length`` or chunked
framing 400 (``request_body``); an idle or
half-open connection is dropped after ``idle_timeout_s``; what is kept of each body (in
``received``, ``MAX_RETAINED_BYTES`` in all) and written to the log (``MAX_LOGGED_BYTES`` each)
is bounded, with the size and SHA-256 of the whole; credentials in the path (``?key=``) are
scrubbed as in recordings.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from toolloop_cli.adapters.providers import BASE_URL_ENV
from toolloop_cli.errors import UsageError

from .cassette import Cassette, Interaction, load_cassette, scrub_headers, scrub_uri
from .detect import detect_api
from .request_body import Refused, read_body

__all__ = [
    "HOST",
    "BASE_URL_ENV",
    "MAX_LOGGED_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_RETAINED_BYTES",
    "Fault",
    "FakeProvider",
    "Reply",
    "ServerHandle",
    "check_log",
    "parse_fault",
    "start",
]

HOST = "127.0.0.1"
_STATUSES = frozenset({400, 429, 500, 503, 529})
#: The largest request body read; a larger one is answered 413 without being read.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: Body bytes kept in ``received`` over the server's life; after that, excerpts only.
MAX_RETAINED_BYTES = 64 * 1024 * 1024
#: The most of one body written to the log line (and kept once the budget is spent).
MAX_LOGGED_BYTES = 64 * 1024
#: Seconds a connection may sit idle (or half-open) before it is closed.
IDLE_TIMEOUT_S = 30.0
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")

#: provider → status → (error type or google.rpc status, message)
_ERRORS: dict[str, dict[int, tuple[str, str]]] = {
    "openai": {
        400: ("invalid_request_error", "Invalid request (fault injected by toolloop serve)."),
        429: ("rate_limit_exceeded", "Rate limit reached for requests."),
        500: ("server_error", "The server had an error while processing your request."),
        503: ("server_error", "The engine is currently overloaded, please try again later."),
        529: ("server_error", "The engine is currently overloaded, please try again later."),
    },
    "anthropic": {
        400: ("invalid_request_error", "Invalid request (fault injected by toolloop serve)."),
        429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
        500: ("api_error", "Internal server error"),
        503: ("api_error", "Service unavailable"),
        529: ("overloaded_error", "Overloaded"),
    },
    "gemini": {
        400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
        429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
        500: ("INTERNAL", "An internal error has occurred."),
        503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
        529: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    },
}


@dataclass(frozen=True)
class Fault:
    """One fault: an error ``status`` for the next ``count`` requests, or a cut after ``count``."""

    kind: str  # "cut" or a status code as text
    count: int


def parse_fault(spec: str) -> Fault:
    """``429``, ``529:3``, ``cut:4`` → ``Fault``; anything else is a ``UsageError``."""
    kind, _, number = spec.strip().partition(":")
    try:
        count = int(number) if number else 1
    except ValueError:
        count = -1
    known = (kind == "cut" and bool(number)) or (kind.isdigit() and int(kind) in _STATUSES)
    if not known or count < (0 if kind == "cut" else 1):
        allowed = ", ".join(str(s) for s in sorted(_STATUSES))
        raise UsageError(f"bad fault {spec!r}: use STATUS[:TIMES] ({allowed}) or cut:EVENTS")
    return Fault(kind, count)


@dataclass
class Reply:
    """What to send: status, headers, body pieces (each flushed), and whether to cut."""

    status: int
    headers: dict[str, str]
    pieces: list[bytes]
    label: str


@dataclass
class FakeProvider:
    """The server's state: per-API queues of recorded answers, pending faults, what was received."""

    cassette: Cassette
    faults: list[Fault] = field(default_factory=list)
    log: Path | None = None
    retry_after: float = 1.0
    received: list[dict[str, Any]] = field(default_factory=list)
    #: told, as one line, each time a request's log line cannot be written
    on_log_error: Callable[[str], None] | None = None
    _served: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _retained: int = 0

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        """The reply to one request (thread-safe; faults and answers are consumed in order)."""
        with self._lock:
            api = detect_api(path)
            served, faults = dict(self._served), list(self.faults)
            reply = self._reply(api, path)
            logged = self._record(method, path, headers, body, reply)
            if logged is not reply:  # not logged: this answer is still the next one
                self._served, self.faults = served, faults
            return logged

    def refuse(self, method: str, path: str, headers: dict[str, str], why: Refused) -> Reply:
        """The reply to a request whose body is not read (a bad framing, or over the cap)."""
        api = detect_api(path)
        provider = api[0] if api is not None else "openai"
        reply = _error(provider, why.status, _REFUSED[provider], f"toolloop serve: {why.message}")
        with self._lock:
            return self._record(method, path, headers, None, reply)

    def _reply(self, api: tuple[str, str] | None, path: str) -> Reply:
        provider = api[0] if api is not None else "openai"
        if api is None:
            return _error(provider, 404, "not_found", f"toolloop serve: no provider API at {path}")
        queue = [i for i in self.cassette.interactions if i.api == api]
        if not queue:
            return _error(
                provider, 404, "not_found", f"the cassette has no {api[0]}/{api[1]} answer"
            )
        cut: int | None = None
        if self.faults:
            fault = self.faults[0]
            if fault.kind == "cut":
                self.faults.pop(0)
                cut = fault.count
            else:
                if fault.count <= 1:
                    self.faults.pop(0)
                else:
                    self.faults[0] = Fault(fault.kind, fault.count - 1)
                return self._fault(provider, int(fault.kind))
        index = self._served.get(api, 0)
        if index >= len(queue):
            return _error(provider, 400, "", "toolloop serve: the cassette has no answer left")
        self._served[api] = index + 1
        return _recorded(queue[index], index, cut)

    def _fault(self, provider: str, status: int) -> Reply:
        kind, message = _ERRORS[provider][status]
        reply = _error(provider, status, kind, message)
        if status == 429:
            reply.headers["retry-after"] = f"{self.retry_after:g}"
        reply.label = f"fault:{status}"
        return reply

    def _record(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None, reply: Reply
    ) -> Reply:
        """Keep the request (and log it); the reply to send: ``reply``, or a 500 when the
        log line could not be written."""
        entry = self._entry(method, path, headers, body, reply.label)
        try:
            self._log(entry, body)
        except OSError as exc:
            reply = self._log_failed(path, exc)
            entry["answer"] = reply.label
        self.received.append(entry)
        return reply

    def _entry(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None, label: str
    ) -> dict[str, Any]:
        entry = {
            "seq": len(self.received),
            "method": method,
            "path": scrub_uri(path),
            "headers": {k: v[0] for k, v in scrub_headers(headers).items()},
            "answer": label,
        }
        keep = body is not None and self._retained + len(body) <= MAX_RETAINED_BYTES
        if body is not None and keep:
            self._retained += len(body)
            entry["body"] = _parsed(body)
        else:
            entry.update(_excerpt(body))
        return entry

    def _log(self, entry: dict[str, Any], body: bytes | None) -> None:
        if self.log is None:
            return
        logged = dict(entry)
        if body is not None and len(body) > MAX_LOGGED_BYTES:
            logged.pop("body", None)
            logged.update(_excerpt(body))
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(logged, ensure_ascii=False, sort_keys=True) + "\n")

    def _log_failed(self, path: str, exc: OSError) -> Reply:
        """A 500 for a request that could not be logged, and one line to ``on_log_error``."""
        message = f"toolloop serve: cannot write the log {self.log}: {exc.strerror or exc}"
        if self.on_log_error is not None:
            self.on_log_error(message)
        api = detect_api(path)
        provider = api[0] if api is not None else "openai"
        reply = _error(provider, 500, _ERRORS[provider][500][0], message)
        reply.label = "error:500:log"
        return reply


def check_log(log: Path) -> None:
    """Refuse, before serving, a log no request could be appended to (it is created empty)."""
    if log.is_dir():
        raise UsageError(f"cannot log to {log}: it is a directory")
    if not log.parent.is_dir():
        raise UsageError(f"cannot log to {log}: no folder {log.parent}")
    try:
        with log.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot log to {log}: {exc.strerror or exc}") from None


def _parsed(body: bytes) -> Any:
    """The body as JSON when it is JSON, else as text; ``None`` when empty."""
    try:
        return json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        return body.decode("utf-8", errors="replace")


def _excerpt(body: bytes | None) -> dict[str, Any]:
    """A bounded stand-in for a body: its first ``MAX_LOGGED_BYTES``, size and SHA-256."""
    if body is None:
        return {"body": None}
    return {
        "body_excerpt": body[:MAX_LOGGED_BYTES].decode("utf-8", errors="replace"),
        "body_bytes": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }


#: the error type of a refused request, per provider (400 and 413 share it)
_REFUSED = {
    "openai": "invalid_request_error",
    "anthropic": "invalid_request_error",
    "gemini": "INVALID_ARGUMENT",
}


def _error(provider: str, status: int, kind: str, message: str) -> Reply:
    body: dict[str, Any]
    if provider == "anthropic":
        body = {"type": "error", "error": {"type": kind, "message": message}}
        body["request_id"] = "req_toolloop_serve"
    elif provider == "gemini":
        body = {"error": {"code": status, "message": message, "status": kind}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    data = json.dumps(body).encode()
    headers = {"content-type": "application/json", "content-length": str(len(data))}
    return Reply(status, headers, [data], f"error:{status}")


def _recorded(interaction: Interaction, index: int, cut: int | None) -> Reply:
    recorded = interaction.response
    headers = {
        name: ", ".join(values)
        for name, values in recorded.headers.items()
        if name not in ("content-length", "transfer-encoding", "content-encoding", "connection")
    }
    body = recorded.body
    label = f"cassette:{index}" + (f":cut@{cut}" if cut is not None else "")
    if "text/event-stream" not in headers.get("content-type", ""):
        headers["content-length"] = str(len(body))
        return Reply(recorded.status, headers, [body if cut is None else body[:cut]], label)
    events = _events(body)
    return Reply(recorded.status, headers, events if cut is None else events[:cut], label)


def _events(body: bytes) -> list[bytes]:
    """The stream's bytes split after each event's closing blank line (nothing dropped)."""
    pieces: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(body):
        pieces.append(body[start : match.end()])
        start = match.end()
    if start < len(body):
        pieces.append(body[start:])
    return pieces


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout_s)  # idle and half-open peers

    def _serve(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            reply = self._answer(headers)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("connection", "close")
            self.end_headers()
            for piece in reply.pieces:
                self.wfile.write(piece)
                self.wfile.flush()
        except (TimeoutError, ConnectionError):
            pass  # the client went quiet or away: nothing to answer
        self.close_connection = True

    def _answer(self, headers: dict[str, str]) -> Reply:
        """Read the body (framed by a length or chunks, no larger than the cap) and answer."""
        provider = self.server.provider
        body = read_body(
            self.rfile,
            self.headers.get_all("content-length") or [],
            self.headers.get_all("transfer-encoding") or [],
            MAX_REQUEST_BYTES,
        )
        if isinstance(body, Refused):
            return provider.refuse(self.command, self.path, headers, body)
        return provider.answer(self.command, self.path, headers, body)

    do_POST = _serve
    do_GET = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: what was received is in ``received`` and the log file."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    provider: FakeProvider
    idle_timeout_s: float = IDLE_TIMEOUT_S


@dataclass
class ServerHandle:
    """A running fake provider; ``close()`` (or ``with``) stops it and joins its thread."""

    server: _Server
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def provider(self) -> FakeProvider:
        return self.server.provider

    def base_url(self, provider: str) -> str:
        """The base URL a client of ``provider`` should be given (OpenAI's ends in /v1)."""
        return self.url + BASE_URL_ENV[provider][1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start(
    cassette: str | Path,
    *,
    port: int = 0,
    faults: Sequence[Fault] = (),
    log: Path | None = None,
    retry_after: float = 1.0,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    on_log_error: Callable[[str], None] | None = None,
) -> ServerHandle:
    """Serve ``cassette`` on 127.0.0.1:``port`` (0: a free port) in a background thread."""
    loaded = load_cassette(cassette)
    if log is not None:
        check_log(log)
    try:
        server = _Server((HOST, port), _Handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from exc
    server.provider = FakeProvider(loaded, list(faults), log, retry_after)
    server.provider.on_log_error = on_log_error
    server.idle_timeout_s = idle_timeout_s
    thread = threading.Thread(target=server.serve_forever, name="toolloop-serve", daemon=True)
    thread.start()
    return ServerHandle(server, thread)
