"""The live transport: one HTTPS request per model turn over httpx, credentials added here.

Transport failures (connect errors, timeouts, a dropped connection) become ``AdapterError``
raised ``from`` the httpx error, retryable when the request may be sent again safely.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.errors import AdapterError

#: How each provider expects its key.
AUTH_HEADERS: dict[str, tuple[str, str]] = {
    "openai": ("authorization", "Bearer {key}"),
    "anthropic": ("x-api-key", "{key}"),
    "gemini": ("x-goog-api-key", "{key}"),
}

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


class LiveTransport:
    """Sends canonical JSON bodies to a provider; the key never reaches the adapter or store."""

    name = "httpx"

    def __init__(self, provider: str, api_key: str, timeout_s: float = 120.0) -> None:
        if provider not in AUTH_HEADERS:
            raise AdapterError(f"no credentials scheme for provider {provider!r}")
        self.provider = provider
        header, template = AUTH_HEADERS[provider]
        self._auth = {header: template.format(key=api_key)}
        self._client = httpx.Client(timeout=timeout_s)

    def send(self, request: HttpRequest) -> HttpResponse:
        headers = {**request.headers, **self._auth}
        content = canonical_bytes(request.body)
        try:
            if request.body.get("stream") or "alt=sse" in request.url:
                return self._send_streaming(request, headers, content)
            response = self._client.request(
                request.method, request.url, headers=headers, content=content
            )
        except httpx.HTTPError as exc:
            raise _translate(exc, self.provider) from exc
        return HttpResponse(
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=response.content,
        )

    def _send_streaming(
        self, request: HttpRequest, headers: dict[str, str], content: bytes
    ) -> HttpResponse:
        req = self._client.build_request(
            request.method, request.url, headers=headers, content=content
        )
        response = self._client.send(req, stream=True)
        provider = self.provider

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.iter_raw()
            except httpx.HTTPError as exc:
                raise _translate(exc, provider) from exc
            finally:
                response.close()

        return HttpResponse(
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            chunks=chunks(),
        )


def _translate(exc: httpx.HTTPError, provider: str) -> AdapterError:
    for kind, retryable in _TRANSPORT_ERRORS:
        if isinstance(exc, kind):
            return AdapterError(
                f"{provider} request failed: {type(exc).__name__}: {exc}",
                provider=provider,
                retryable=retryable,
            )
    return AdapterError(f"{provider} request failed: {exc}", provider=provider)  # pragma: no cover
