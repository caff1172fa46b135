"""Session records: what Microsoft's test-proxy saves (the Azure SDKs, OpenAI's .NET SDK).

A session record is JSON::

    {"Entries": [{"RequestUri", "RequestMethod", "RequestHeaders": {name: value | [value]},
                  "RequestBody", "StatusCode", "ResponseHeaders", "ResponseBody"}, ...],
     "Variables": {...}}

Each entry becomes a vcrpy interaction, in order. A body is kept parsed when it was JSON (an
object or an array), as text lines when it was other text (an event stream: each line with
its own line break, so the lines joined are the body; a line the proxy wrote as ``b64:…``
holds bytes), as a string, or null for none. An entry that is not that shape is a
``Problem`` naming it.
"""

from __future__ import annotations

import binascii
import json
from typing import Any

from .shapes import Exchange, Problem, unbase64

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
        exchange = Exchange(
            method,
            uri,
            _headers(entry.get("RequestHeaders"), f"{where}.RequestHeaders"),
            _body(entry.get("RequestBody"), f"{where}.RequestBody"),
            entry.get("StatusCode"),
            _headers(entry.get("ResponseHeaders"), f"{where}.ResponseHeaders"),
            _body(entry.get("ResponseBody"), f"{where}.ResponseBody"),
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


def _body(node: Any, where: str) -> bytes | None:
    """The body's bytes: JSON written back as JSON, text lines joined, a string as it is."""
    if node is None:
        return None
    if isinstance(node, str):
        return node.encode("utf-8")
    if isinstance(node, list) and node and all(isinstance(line, str) for line in node):
        return b"".join(_line(line, where) for line in node)
    if isinstance(node, dict | list):
        return json.dumps(node, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    raise Problem(f"{where} is not JSON, text lines, a string or null")


def _line(line: str, where: str) -> bytes:
    if not line.startswith(_BYTES_LINE):
        return line.encode("utf-8")
    try:
        return unbase64(line[len(_BYTES_LINE) :])
    except binascii.Error as exc:
        raise Problem(f"{where} line {line[:40]!r} says b64: but is not base64: {exc}") from None
