"""httpmock recordings: what Rust's ``httpmock`` crate saves (``MockServer::record``; rig).

A recording is a YAML stream, one document per exchange::

    when: {path: /v1/messages, method: POST, query_param: [{name, value}],
           header: [{name, value}], body: '<request text>'}
    then: {status: 200, header: [{name, value}], body: '<answer text>',
           body_encoding: base64}    # only for an answer that is not text
    ---
    ...

Each document becomes a vcrpy interaction, in order. The recording keeps no host: the URI is
the path and its query, which is all a replay reads of it. Its scalars are read as the text
they are (``shapes.TextScalarsLoader``): values are written unquoted. A document that is not
that shape is a ``Problem`` naming it (counted from 0).
"""

from __future__ import annotations

import binascii
from typing import Any
from urllib.parse import urlencode

from .shapes import Exchange, Problem, unbase64

__all__ = ["is_httpmock", "httpmock_interactions"]


def is_httpmock(documents: list[Any]) -> bool:
    """Whether every document is a ``when``/``then`` pair."""
    return bool(documents) and all(
        isinstance(d, dict) and "when" in d and "then" in d for d in documents
    )


def httpmock_interactions(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recording's exchanges as vcrpy interactions."""
    interactions = []
    for index, document in enumerate(documents):
        where = f"httpmock document {index}"
        when, then = document["when"], document["then"]
        if not isinstance(when, dict) or not isinstance(then, dict):
            raise Problem(f"{where}: 'when' and 'then' are not mappings")
        path, method = when.get("path"), when.get("method", "GET")
        if not isinstance(path, str) or not isinstance(method, str):
            raise Problem(f"{where}: 'when' has no 'path' and 'method' text")
        query = _pairs(when.get("query_param"), f"{where} query_param")
        uri = path + (f"?{urlencode(query)}" if query else "")
        exchange = Exchange(
            method,
            uri,
            _headers(when.get("header"), f"{where} 'when' header"),
            _text(when.get("body"), f"{where} 'when' body"),
            then.get("status"),
            _headers(then.get("header"), f"{where} 'then' header"),
            _answer(then, where),
        )
        interactions.append(exchange.interaction())
    return interactions


def _pairs(node: Any, where: str) -> list[tuple[str, str]]:
    """``[{name, value}, ...]`` as pairs, in order."""
    if node is None:
        return []
    if not isinstance(node, list):
        raise Problem(f"{where} is not a list of {{name, value}}")
    pairs = []
    for pair in node:
        if not isinstance(pair, dict):
            raise Problem(f"{where} holds {pair!r}, not {{name, value}}")
        name, value = pair.get("name"), pair.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise Problem(f"{where} holds {pair!r}, not {{name, value}}")
        pairs.append((name, value))
    return pairs


def _headers(node: Any, where: str) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for name, value in _pairs(node, where):
        headers.setdefault(name, []).append(value)
    return headers


def _text(body: Any, where: str) -> str | None:
    if body is None or isinstance(body, str):
        return body
    raise Problem(f"{where} is not text")


def _answer(then: dict[str, Any], where: str) -> str | bytes | None:
    body = _text(then.get("body"), f"{where} 'then' body")
    encoding = then.get("body_encoding")
    if encoding is None or body is None:
        return body
    if encoding != "base64":
        raise Problem(f"{where}: body_encoding {encoding!r} is not base64")
    try:
        return unbase64(body)
    except binascii.Error as exc:
        raise Problem(f"{where}: the 'then' body says base64 but is not: {exc}") from None
