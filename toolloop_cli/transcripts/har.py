"""HTTP Archives (HAR 1.2): what browsers, Playwright, mitmproxy and Polly.js save.

A HAR file is JSON::

    {"log": {"version": "1.2", "creator": {...},
             "entries": [{"request": {method, url, headers: [{name, value}], postData: {text}},
                          "response": {status, headers: [{name, value}],
                                       content: {text, encoding?}}}, ...]}}

Each entry becomes a vcrpy interaction (``{request, response}``), in the order the archive
lists them. A response's ``content.text`` is the body as the client decoded it (a
``content-encoding`` header may still name the coding it came in); ``"encoding": "base64"``
says the text is the body's bytes in base64 (Polly.js writes a JSON list of the base64 texts of
the body's chunks). A browser's request that got no answer (status
0) to anything but a model API is left out; an entry that is not a request and its response,
or a part that is not the shape above, is a ``Problem`` naming the entry.
"""

from __future__ import annotations

import binascii
from typing import Any

from toolloop_cli.strict_json import strict_loads

from .detect import detect_api
from .shapes import Problem, unbase64

__all__ = ["HAR_KEY", "har_interactions"]

#: the archive's one top-level key
HAR_KEY = "log"


def har_interactions(document: dict[Any, Any]) -> list[dict[str, Any]] | None:
    """The archive's entries as vcrpy interactions, or None when ``document`` is no HAR."""
    log = document.get(HAR_KEY)
    if "interactions" in document or not isinstance(log, dict) or "entries" not in log:
        return None
    entries = log["entries"]
    if not isinstance(entries, list):
        raise Problem("'log.entries' is not a list")
    interactions = []
    for index, entry in enumerate(entries):
        where = f"log.entries[{index}]"
        if not isinstance(entry, dict):
            raise Problem(f"{where} is not a mapping")
        request, response = entry.get("request"), entry.get("response")
        if not isinstance(request, dict) or not isinstance(response, dict):
            raise Problem(f"{where} has no 'request' and 'response' mappings")
        if response.get("status") == 0 and detect_api(str(request.get("url"))) is None:
            continue  # a page's request that got no answer (blocked, cancelled): not a model's
        interactions.append(
            {"request": _request(request, where), "response": _response(response, where)}
        )
    return interactions


def _request(request: dict[str, Any], where: str) -> dict[str, Any]:
    post = request.get("postData")
    if post is not None and not isinstance(post, dict):
        raise Problem(f"{where}.request 'postData' is not a mapping")
    return {
        "method": request.get("method", "POST"),
        "uri": request.get("url"),
        "headers": _headers(request.get("headers"), f"{where}.request"),
        "body": None if post is None else _text(post, f"{where}.request.postData"),
    }


def _response(response: dict[str, Any], where: str) -> dict[str, Any]:
    content = response.get("content")
    if content is not None and not isinstance(content, dict):
        raise Problem(f"{where}.response 'content' is not a mapping")
    return {
        "status": response.get("status"),
        "headers": _headers(response.get("headers"), f"{where}.response"),
        "body": {"string": None if content is None else _text(content, f"{where}.response")},
    }


def _headers(node: Any, where: str) -> dict[str, list[str]]:
    """``[{name, value}, ...]`` as ``{name: [value, ...]}`` (a name may repeat)."""
    if node is None:
        return {}
    if not isinstance(node, list):
        raise Problem(f"{where} 'headers' is not a list of {{name, value}}")
    headers: dict[str, list[str]] = {}
    for header in node:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise Problem(f"{where} header {header!r} is not {{name, value}}")
        value = header.get("value")
        if not isinstance(value, str):
            raise Problem(f"{where} header {header['name']!r} has no text value")
        headers.setdefault(header["name"], []).append(value)
    return headers


def _text(node: dict[str, Any], where: str) -> str | bytes | None:
    """``text`` as it is, or its bytes when ``encoding`` is ``base64``: one base64 text, or
    (Polly.js, for a body that is not text, such as a gzip answer) a JSON list of the base64
    texts of the chunks the body came in."""
    text = node.get("text")
    if text is None:
        return None
    if not isinstance(text, str):
        raise Problem(f"{where} 'text' is not text")
    if node.get("encoding") != "base64":
        return text
    chunks = _chunk_list(text)
    try:
        if chunks is not None:
            return b"".join(unbase64(chunk) for chunk in chunks)
        return unbase64(text)
    except binascii.Error as exc:
        raise Problem(f"{where} 'text' says base64 but is not: {exc}") from None


def _chunk_list(text: str) -> list[str] | None:
    """The chunks of a ``["H4sI…", "…"]`` text, or None when ``text`` is not such a list."""
    if not text.lstrip().startswith("["):
        return None
    try:
        chunks = strict_loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(chunks, list) and all(isinstance(chunk, str) for chunk in chunks):
        return chunks
    return None
