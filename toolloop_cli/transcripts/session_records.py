"""Session records: what Microsoft's test-proxy saves (the Azure SDKs, OpenAI's .NET SDK).

A session record is JSON::

    {"Entries": [{"RequestUri", "RequestMethod", "RequestHeaders": {name: value | [value]},
                  "RequestBody", "StatusCode", "ResponseHeaders", "ResponseBody"}, ...],
     "Variables": {...}}

Each entry becomes a vcrpy interaction, in order, its bodies as the proxy's own reader
(``RecordEntry``) gives them back (``_body``). An entry that is not that shape is a
``Problem`` naming it.
"""

from __future__ import annotations

import binascii
import json
from typing import Any

from .shapes import Exchange, Problem, json_bytes, unbase64

__all__ = ["ENTRIES_KEY", "session_interactions"]

#: the record's list of exchanges
ENTRIES_KEY = "Entries"
#: how the proxy marks a line of bytes among text lines
_BYTES_LINE = "b64:"


def session_interactions(document: dict[Any, Any]) -> list[dict[str, Any]] | None:
    """The record's entries as vcrpy interactions, or None when ``document`` is no record."""
    entries = document.get(ENTRIES_KEY)
    if "interactions" in document or entries is None:
        return None
    if not isinstance(entries, list):
        raise Problem(f"'{ENTRIES_KEY}' is not a list")
    interactions = []
    for index, entry in enumerate(entries):
        where = f"{ENTRIES_KEY}[{index}]"
        if not isinstance(entry, dict):
            raise Problem(f"{where} is not a mapping")
        uri, method = entry.get("RequestUri"), entry.get("RequestMethod")
        if not isinstance(uri, str) or not isinstance(method, str):
            raise Problem(f"{where} has no 'RequestUri' and 'RequestMethod' strings")
        asked = _headers(entry.get("RequestHeaders"), f"{where}.RequestHeaders")
        answered = _headers(entry.get("ResponseHeaders"), f"{where}.ResponseHeaders")
        exchange = Exchange(
            method,
            uri,
            asked,
            _body(entry.get("RequestBody"), asked, f"{where}.RequestBody"),
            entry.get("StatusCode"),
            answered,
            _body(entry.get("ResponseBody"), answered, f"{where}.ResponseBody"),
        )
        interactions.append(exchange.interaction())
    return interactions


def _headers(node: Any, where: str) -> dict[str, list[str]]:
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise Problem(f"{where} is not a mapping of names to values")
    headers: dict[str, list[str]] = {}
    for name, value in node.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise Problem(f"{where} {name!r} is not text")
        headers[str(name)] = values
    return headers


def _body(node: Any, headers: dict[str, list[str]], where: str) -> bytes | None:
    """The body's bytes as the proxy's own reader gives them back: ``[]`` is an empty body,
    JSON (an object, or an array that is no list of lines) is written back as JSON, text
    lines are joined (in a multipart body a ``b64:`` line holds bytes and a nested ``[]``
    marks an empty part), a string is text under a text content type and base64 of the bytes
    under any other (or none)."""
    kind = _content_type(headers)
    if node is None:
        return None
    if node == []:
        return b""
    if isinstance(node, str):
        return node.encode("utf-8") if _textual(kind) else _base64(node, where)
    if isinstance(node, list) and all(isinstance(line, str) or line == [] for line in node):
        multipart = kind.startswith("multipart/")
        return b"".join(_line(line, multipart, where) for line in node if line != [])
    if isinstance(node, dict | list):
        return json_bytes(node, where)
    raise Problem(
        f"{where} is {json.dumps(node)[:40]}: not JSON text, text lines, a string or null"
    )


def _content_type(headers: dict[str, list[str]]) -> str:
    for name, values in headers.items():
        if name.lower() == "content-type" and values:
            return values[0].split(";")[0].strip().lower()
    return ""


def _textual(kind: str) -> bool:
    """Whether the proxy keeps a body of this content type as text (else as base64)."""
    return (
        kind.startswith("text/")
        or kind in ("application/json", "application/xml", "application/x-www-form-urlencoded")
        or kind.endswith(("+json", "+xml"))
    )


def _base64(text: str, where: str) -> bytes:
    try:
        return unbase64(text)
    except binascii.Error as exc:
        raise Problem(f"{where} is not text by its content type, and not base64: {exc}") from None


def _line(line: str, multipart: bool, where: str) -> bytes:
    if not (multipart and line.startswith(_BYTES_LINE)):
        return line.encode("utf-8")
    try:
        return unbase64(line[len(_BYTES_LINE) :])
    except binascii.Error as exc:
        raise Problem(f"{where} line {line[:40]!r} says b64: but is not base64: {exc}") from None
