"""Which provider API a recorded request belongs to: from its URI path, or, when a recorder
blanked the URI, from what the request and its answer say.

The host is ignored on purpose: base-URL overrides, proxies and local fake servers keep the
provider's path (``http://127.0.0.1:8080/v1/responses`` is still OpenAI Responses). The paths
are the provider table's (``adapters.providers``).

Some recorders write a placeholder over every URI (LangChain's unit tests record
``uri: '**REDACTED**'``). A URI without a single ``/`` names no endpoint at all; such a POST
is known by its answer instead, which says what it is: an OpenAI Responses answer is
``"object": "response"`` (streamed, its first event ``response.created``), an Anthropic
Messages answer ``"type": "message"`` (streamed: ``message_start``); and the request must carry
the field that API's requests are built around (``input``; ``messages``), not the other's.
Gemini is left out: its model is named only in the path. Chat Completions answers
(``chat.completion``) stay unknown, as they are behind a real URI.
"""

from __future__ import annotations

import json
from typing import Any

from toolloop_cli.adapters.providers import API_PATHS, detect_api, detect_poll

__all__ = ["API_PATHS", "answered_api", "detect_api", "detect_poll"]

#: the API each answer's own kind names (its top-level ``object`` or ``type``; a stream's first
#: event's ``type``), and the request field that API's requests are built around
_KINDS = {
    ("object", "response"): (("openai", "responses"), "input"),
    ("type", "response.created"): (("openai", "responses"), "input"),
    ("type", "message"): (("anthropic", "messages"), "messages"),
    ("type", "message_start"): (("anthropic", "messages"), "messages"),
}


def answered_api(
    method: str, uri: str, request_body: bytes | None, answer: bytes
) -> tuple[str, str] | None:
    """``(provider, api_family)`` of a POST whose URI names no endpoint (no ``/`` in it), told
    by the kind its answer says it is and the request's own field; else ``None``."""
    if method.upper() != "POST" or "/" in uri or not request_body:
        return None
    request, first = _object(request_body), _object(_first_data(answer))
    if request is None or first is None:
        return None
    found = {
        _KINDS[key]
        for key in (("object", first.get("object")), ("type", first.get("type")))
        if key in _KINDS
    }
    if len(found) != 1:
        return None
    ((api, field),) = found
    return api if field in request and ("input" in request) != ("messages" in request) else None


def _first_data(answer: bytes) -> bytes:
    """A JSON answer as it is; an event stream's first ``data:`` (the event that opens it)."""
    if answer.lstrip()[:1] in (b"{", b"["):
        return answer
    for line in answer.splitlines():
        if line.startswith(b"data:"):
            return line[5:]
    return b""


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
