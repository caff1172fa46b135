"""nock recordings: what Node's ``nock`` recorder (``nock.back``, ``output_objects``) saves.

A recording is a JSON list of definitions::

    [{"scope": "https://api.openai.com:443", "method": "POST", "path": "/v1/responses",
      "body": <request: parsed JSON, or text>, "status": 200,
      "response": <parsed JSON | text | hex of bytes | [hex of each chunk]>,
      "rawHeaders": [name, value, name, value, ...] | {name: value}, "responseIsBinary": bool}]

Each definition becomes a vcrpy interaction, in order: the URI is the scope and the path. An
answer nock kept as bytes is hex: one string when ``responseIsBinary`` is true, a list of
strings (a chunk each) when a ``content-encoding`` header said it was encoded. A definition
that is not that shape is a ``Problem`` naming it.
"""

from __future__ import annotations

from typing import Any

from .shapes import Exchange, Problem, json_bytes

__all__ = ["is_nock", "nock_interactions"]


def is_nock(document: Any) -> bool:
    """Whether ``document`` is a list of nock definitions (each with a scope and a path)."""
    return (
        isinstance(document, list)
        and bool(document)
        and all(isinstance(d, dict) and "scope" in d and "path" in d for d in document)
    )


def nock_interactions(definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The definitions as vcrpy interactions."""
    interactions = []
    for index, definition in enumerate(definitions):
        where = f"nock definition {index}"
        scope, path = definition["scope"], definition["path"]
        method = definition.get("method", "GET")
        if not all(isinstance(v, str) for v in (scope, path, method)):
            raise Problem(f"{where}: 'scope', 'path' and 'method' are not text")
        raw_headers = definition.get("rawHeaders", definition.get("headers"))
        answered = _headers(raw_headers, f"{where} headers")
        exchange = Exchange(
            method,
            path if "://" in path else scope.rstrip("/") + path,  # a path given as a whole URL
            _headers(definition.get("reqheaders"), f"{where} 'reqheaders'"),
            _request_body(definition.get("body"), where),
            definition.get("status", 200),
            answered,
            _answer(definition, answered, where),
        )
        interactions.append(exchange.interaction())
    return interactions


def _headers(node: Any, where: str) -> dict[str, list[str]]:
    """``[name, value, ...]`` (Node's raw headers) or ``{name: value | [value]}``."""
    if node is None:
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(node, list):
        if len(node) % 2:
            raise Problem(f"{where} list has a name without a value")
        pairs = list(zip(node[::2], node[1::2], strict=True))
    elif isinstance(node, dict):
        pairs = [(k, v) for k, value in node.items() for v in _listed(value)]
    else:
        raise Problem(f"{where} are not a list or a mapping")
    headers: dict[str, list[str]] = {}
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str | int) or isinstance(value, bool):
            raise Problem(f"{where}: {name!r} is not a header name with a text value")
        headers.setdefault(name, []).append(str(value))
    return headers


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _request_body(body: Any, where: str) -> bytes | None:
    """What nock kept of the request: parsed JSON, or the text (empty for none)."""
    if body is None or body == "":
        return None
    if isinstance(body, str):
        return body.encode("utf-8")
    return json_bytes(body, f"{where} 'body'")


def _answer(definition: dict[str, Any], headers: dict[str, list[str]], where: str) -> bytes | None:
    """The answer's bytes: hex when nock kept bytes (one string with ``responseIsBinary``, a
    string per chunk when a ``content-encoding`` header says it was encoded), else the text
    or the parsed JSON it kept."""
    response = definition.get("response")
    if response is None:
        return None
    binary = definition.get("responseIsBinary") is True
    encoded = any(name.lower() == "content-encoding" for name in headers)
    try:
        if isinstance(response, list) and all(isinstance(c, str) for c in response):
            if response and encoded:
                return b"".join(bytes.fromhex(chunk) for chunk in response)
        if isinstance(response, str):
            return bytes.fromhex(response) if binary else response.encode("utf-8")
    except ValueError:
        raise Problem(f"{where}: 'response' says it holds bytes but is not hex") from None
    return json_bytes(response, f"{where} 'response'")
