"""The live transport: one HTTPS request per model turn over httpx, credentials added here.

Every answer is streamed from the socket and handed on as chunks, decoded here (``wire.encodings``):
the adapter reads them under its byte cap and stops, so neither a huge body nor a compression
bomb is ever held whole. Each request gets a total time, the per-request limit or the
operation's time left (``HttpRequest.time_left_s``), whichever is shorter; it is checked as
every chunk arrives and no single read may wait longer, so a keep-alive stream or a dripping
body cannot hold a run past its deadline. Running out of the operation's time raises
``DeadlineExceeded``; running out of the per-request limit is a retryable timeout.

Transport failures (connect errors, timeouts, a dropped connection) become ``AdapterError``
raised ``from`` the httpx error, retryable when the request may be sent again safely; their
text never carries the key or its header value (some httpx errors quote received bytes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import MAX_BODY_BYTES, HttpRequest, HttpResponse
from toolloop_cli.errors import AdapterError, DeadlineExceeded, MalformedProviderPayload, UsageError
from toolloop_cli.wire.encodings import ACCEPT_ENCODING, accepted, decoded

from ._wire import Secrets, key_problem, plaintext_host
from .providers import AUTH_HEADERS

__all__ = [
    "AUTH_HEADERS",
    "READ_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "LiveTransport",
    "key_problem",
    "plaintext_host",
]

#: The longest a socket read (or connect) may wait for a byte.
READ_TIMEOUT_S = 120.0
#: The longest one request may take in all, however its answer trickles in.
REQUEST_TIMEOUT_S = 600.0
#: A read timeout this close to the request's end is the request's end.
_SLACK_S = 0.05

#: (exception type, retryable), most specific first.
_TRANSPORT_ERRORS: tuple[tuple[type[httpx.HTTPError], bool], ...] = (
    (httpx.ConnectTimeout, True),
    (httpx.ReadTimeout, True),
    (httpx.WriteTimeout, True),
    (httpx.PoolTimeout, True),
    (httpx.ConnectError, True),
    (httpx.RemoteProtocolError, True),
    (httpx.ReadError, True),
    (httpx.HTTPError, False),
)


class _Clock:
    """The total time of one request, and what running out of it means."""

    def __init__(self, provider: str, limit_s: float, time_left_s: float | None) -> None:
        self.provider = provider
        self.by_deadline = time_left_s is not None and time_left_s <= limit_s
        self.seconds = max(time_left_s or 0.0, 0.001) if self.by_deadline else limit_s
        self.ends = time.monotonic() + self.seconds

    def check(self) -> None:
        if time.monotonic() >= self.ends:
            raise self.expired()

    def expired(self) -> AdapterError:
        if self.by_deadline:
            return DeadlineExceeded(
                f"{self.provider} request cut at the operation's deadline "
                f"({self.seconds:.3g} s were left when it was sent)",
                provider=self.provider,
            )
        return AdapterError(
            f"{self.provider} request took longer than the {self.seconds:g} s per-request limit "
            "(TOOLLOOP_REQUEST_TIMEOUT_S)",
            provider=self.provider,
            retryable=True,
        )


class LiveTransport:
    """Sends canonical JSON bodies to a provider; the key never reaches the adapter or store."""

    name = "httpx"

    def __init__(
        self,
        provider: str,
        api_key: str,
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        allow_insecure_http: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if provider not in AUTH_HEADERS:
            raise AdapterError(f"no credentials scheme for provider {provider!r}")
        problem = key_problem(api_key)
        if problem is not None:
            raise UsageError(f"the {provider} API key {problem}")
        self.provider = provider
        header, template = AUTH_HEADERS[provider]
        value = template.format(key=api_key)
        self._auth = {header: value}
        self._secrets = Secrets(api_key, value)
        self.read_timeout_s = read_timeout_s
        self.request_timeout_s = request_timeout_s
        self.allow_insecure_http = allow_insecure_http
        self.max_body_bytes = max_body_bytes
        self._client = httpx.Client(timeout=read_timeout_s)

    def send(self, request: HttpRequest) -> HttpResponse:
        host = plaintext_host(request.url)
        if host is not None and not self.allow_insecure_http:
            raise UsageError(
                f"refusing to send the {self.provider} key over plaintext http:// to {host}, "
                "which is not loopback; use https://, or set TOOLLOOP_ALLOW_INSECURE_HTTP=1"
            )
        clock = _Clock(self.provider, self.request_timeout_s, request.time_left_s)
        headers = {**request.headers, "accept-encoding": ACCEPT_ENCODING, **self._auth}
        built = self._client.build_request(
            request.method,
            request.url,
            headers=headers,
            content=canonical_bytes(request.body),
            timeout=httpx.Timeout(min(self.read_timeout_s, clock.seconds)),
        )
        try:
            response = self._client.send(built, stream=True)
        except httpx.HTTPError as exc:
            raise self._error(exc, clock) from exc
        try:
            encoding = accepted(response.headers.get("content-encoding", ""), self.provider)
        except MalformedProviderPayload:
            response.close()
            raise
        answer_headers = {k.lower(): self._secrets.text(v) for k, v in response.headers.items()}
        if encoding:  # the chunks handed on are decoded: these would no longer be true
            answer_headers.pop("content-encoding", None)
            answer_headers.pop("content-length", None)
        return HttpResponse(
            status=response.status_code,
            headers=answer_headers,
            chunks=self._chunks(response, encoding, clock),
        )

    def _chunks(self, response: httpx.Response, encoding: str, clock: _Clock) -> Iterator[bytes]:
        """The answer's decoded, redacted bytes, as they arrive, within the request's time."""

        def timed() -> Iterator[bytes]:
            for chunk in response.iter_raw():
                clock.check()
                yield chunk

        size = 0
        try:
            for piece in self._secrets.redact(decoded(timed(), encoding, self.provider)):
                if size > self.max_body_bytes:  # the reader should have stopped: stop it
                    raise MalformedProviderPayload(
                        f"{self.provider}: answer larger than {self.max_body_bytes} bytes",
                        provider=self.provider,
                    )
                size += len(piece)
                yield piece
        except httpx.HTTPError as exc:
            raise self._error(exc, clock) from exc
        finally:
            response.close()

    def _error(self, exc: httpx.HTTPError, clock: _Clock) -> AdapterError:
        if isinstance(exc, httpx.TimeoutException) and time.monotonic() >= clock.ends - _SLACK_S:
            return clock.expired()  # the read waited as long as the request had left
        return _translate(exc, self.provider, self._secrets)


def _translate(exc: httpx.HTTPError, provider: str, secrets: Secrets) -> AdapterError:
    for kind, retryable in _TRANSPORT_ERRORS:
        if isinstance(exc, kind):
            return AdapterError(
                secrets.text(f"{provider} request failed: {type(exc).__name__}: {exc}"),
                provider=provider,
                retryable=retryable,
            )
    return AdapterError(
        secrets.text(f"{provider} request failed: {exc}"), provider=provider
    )  # pragma: no cover
