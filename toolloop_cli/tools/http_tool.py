"""HTTP endpoints as registry tools: ``handler: http:POST https://…`` (also PUT, PATCH).

The arguments (already validated against the registry's schema) are the JSON body, and the
call's idempotency key goes in an ``Idempotency-Key`` header, so an endpoint that keeps its
answers per key (as payment APIs do) makes a resent request safe. Statuses are mapped onto the
dispatcher's existing outcomes rather than a new set: 2xx is the result (JSON, else the text);
4xx a business error (``ToolError``), except 408, a timeout; 5xx and transport errors a raised
exception (for a side effect: reconcile, else unknown outcome); the tool's timeout a
``HandlerTimeout``. A ``reconcile: http:…`` endpoint is asked with the same key; its 404 means
the downstream has no record of it. The body is read only up to the tool's
``max_result_bytes``. Plain ``http://`` is allowed to loopback hosts only.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx

from toolloop_cli.errors import MalformedProviderPayload
from toolloop_cli.strict_json import StrictJSONError, strict_loads
from toolloop_cli.tools.context import HandlerTimeout, ToolContext, ToolError
from toolloop_cli.tools.mcp_registry import headers_from_env
from toolloop_cli.wire.encodings import ACCEPT_ENCODING, accepted, decoded

__all__ = ["is_http", "resolve"]

Problem = tuple[str, str]
_SPEC = re.compile(r"^http:(POST|PUT|PATCH) (\S+)$")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_ERROR_CHARS = 2000


def is_http(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith("http:")


def resolve(spec: str, body: dict[Any, Any], where: str, run: bool, problems: list[Problem]) -> Any:
    """The handler for ``http:METHOD URL``, or ``None`` with the problem recorded.

    ``run`` False (a registry loaded without imports): the form is checked, the handler refuses
    to run and the header variables are not read.
    """
    match = _SPEC.match(spec)
    if match is None:
        problems.append((where, "must be 'http:POST URL' (or PUT, PATCH)"))
        return None
    method, url = match.groups()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append((where, f"'{url}' is not an http(s) URL"))
        return None
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        problems.append((where, "plain http is allowed to loopback only; use https"))
        return None
    if not run:
        return _not_run(spec)
    tool_where = where.rsplit(".", 1)[0] + ".headers_from_env"
    headers = headers_from_env(body.get("headers_from_env", {}), tool_where, problems)
    timeout_ms = body.get("timeout_ms", 5000)
    timeout = timeout_ms if type(timeout_ms) is int and timeout_ms > 0 else 5000
    cap = body.get("max_result_bytes", 65536)
    cap = cap if type(cap) is int and cap > 0 else 65536
    reconcile = where.endswith(".reconcile")
    return _handler(method, url, headers, timeout, cap, reconcile=reconcile)


def _handler(
    method: str, url: str, headers: dict[str, str], timeout_ms: int, cap: int, *, reconcile: bool
) -> Any:
    # one client per tool, shared by its calls (httpx clients are thread-safe): its TLS
    # context is built once, not on every call
    client = httpx.Client(follow_redirects=False)

    def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        budget_s = min(timeout_ms, context.timeout_ms or timeout_ms) / 1000
        sent = {
            **headers,
            "X-Toolloop-Operation-Id": context.operation_id,
            "X-Toolloop-Call-Id": context.call_id,
        }
        if context.idempotency_key:
            sent["Idempotency-Key"] = context.idempotency_key
        try:
            status, data = _send(client, method, url, arguments, sent, budget_s, cap)
        except httpx.TimeoutException as exc:
            raise HandlerTimeout(f"{method} {url} timed out after {budget_s:g} s") from exc
        return _outcome(method, url, status, data, reconcile=reconcile)

    handler.__qualname__ = f"http:{method} {url}"
    return handler


def _not_run(spec: str) -> Any:
    def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        raise RuntimeError(f"handler {spec} was not set up (registry loaded without imports)")

    return handler


def _send(
    client: httpx.Client,
    method: str,
    url: str,
    arguments: dict[str, Any],
    headers: dict[str, str],
    budget_s: float,
    cap: int,
) -> tuple[int, bytes]:
    """One request, no redirects followed, the body read to at most ``cap`` bytes.

    The body is decoded here, a bounded piece at a time (``wire.encodings``): httpx would
    inflate each received chunk whole, so a small compressed answer could take hundreds of
    megabytes before the cap was checked. An encoding toolloop did not ask for is refused.
    """
    sent = {**headers, "Accept-Encoding": ACCEPT_ENCODING}
    request = client.build_request(method, url, json=arguments, headers=sent, timeout=budget_s)
    response = client.send(request, stream=True)
    source = f"{method} {url}"
    try:
        data = bytearray()
        encoding = accepted(response.headers.get("content-encoding", ""), source)
        for chunk in decoded(response.iter_raw(), encoding, source):
            data += chunk
            if len(data) > cap:
                raise ValueError(
                    f"{method} {url} answered HTTP {response.status_code} with a body over "
                    f"the tool's max_result_bytes ({cap}); it was not read further"
                )
        return response.status_code, bytes(data)
    except MalformedProviderPayload as exc:  # an encoding refused, a body that does not decode
        raise ValueError(str(exc)) from exc
    finally:
        response.close()


def _outcome(method: str, url: str, status: int, data: bytes, *, reconcile: bool) -> Any:
    text = data.decode("utf-8", errors="replace")
    if 200 <= status < 300:
        if not text.strip():
            return None
        try:
            return strict_loads(text)
        except StrictJSONError as exc:  # JSON, but ambiguous or without a canonical form
            raise RuntimeError(
                f"{method} {url} answered JSON toolloop does not take: {exc}"
            ) from None
        except RecursionError:
            raise RuntimeError(f"{method} {url} answered JSON nested too deep") from None
        except ValueError:
            return text  # not JSON: the text is the result, as it came
    if reconcile and status == 404:
        return None  # the downstream has no record of the key
    if status == 408:
        raise HandlerTimeout(f"{method} {url} answered HTTP 408 (request timeout)")
    if 400 <= status < 500:
        raise ToolError(f"HTTP {status}: {text.strip()}"[:MAX_ERROR_CHARS])
    raise RuntimeError(f"{method} {url} answered HTTP {status}: {text.strip()[:200]}")
