"""Which recorder wrote a recording, and its exchanges in vcrpy's shape.

vcrpy and pytest-recording keep ``interactions:``; every other recorder lays the same
exchanges out its own way. Each layout is read by a module of its own; this one tells them
apart by their top-level shape and hands back the exchanges as vcrpy interactions (still
unchecked: ``cassette`` reads each one) with the document's other top-level keys.

- ``interactions``: vcrpy, pytest-recording, toolloop;
- ``http_interactions``: Ruby's VCR, Betamax;
- a list of ``{request, response}``: php-vcr, Elixir's ExVCR;
- ``requests`` and ``responses`` paired by position: LangChain (``paired``);
- ``log.entries``: HTTP Archives (``har``);
- ``Entries``: test-proxy session records (``session_records``);
- a list of ``{scope, path, ...}``: nock (``nock``);
- ``when``/``then`` documents: httpmock (``httpmock``).
"""

from __future__ import annotations

from typing import Any

from .har import HAR_KEY, har_interactions
from .httpmock import httpmock_interactions, is_httpmock
from .nock import is_nock, nock_interactions
from .paired import LAYOUT_KEYS, paired_interactions
from .session_records import ENTRIES_KEY, session_interactions
from .shapes import Problem

__all__ = ["recorded_exchanges", "stream_exchanges"]

#: the interactions list as Ruby's VCR (and Betamax) name it
_RUBY_KEY = "http_interactions"


def recorded_exchanges(document: Any) -> tuple[list[Any], dict[str, Any]]:
    """The document's exchanges as vcrpy interactions, and its other top-level keys; a
    ``Problem`` when it is no recording toolloop reads."""
    if isinstance(document, list):
        return _listed(document), {}
    if document is None:
        raise Problem("the file holds nothing (no YAML or JSON document)")
    if not isinstance(document, dict):
        raise Problem("not a YAML mapping")
    if is_httpmock([document]):  # an httpmock recording of one exchange
        return httpmock_interactions([document]), {}
    raw = paired_interactions(document)
    dropped: tuple[str, ...] = LAYOUT_KEYS if raw is not None else ()
    if raw is None and "interactions" not in document and _RUBY_KEY in document:
        raw, dropped = document[_RUBY_KEY], (_RUBY_KEY,)
    for layout, key in ((har_interactions, HAR_KEY), (session_interactions, ENTRIES_KEY)):
        if raw is None:
            raw = layout(document)
            dropped = (key,) if raw is not None else dropped
    raw = document.get("interactions") if raw is None else raw
    if not isinstance(raw, list):
        raise Problem("no 'interactions' list")
    metadata = {str(k): v for k, v in document.items() if k != "interactions" and k not in dropped}
    return raw, metadata


def stream_exchanges(documents: list[Any]) -> list[dict[str, Any]]:
    """A YAML stream of several documents: an httpmock recording, one exchange each (an
    empty document, such as a trailing ``---`` leaves, holds none)."""
    for index, document in enumerate(documents):
        if document is not None and not is_httpmock([document]):
            raise Problem(
                f"{len(documents)} YAML documents, not one cassette: document {index} is no"
                " httpmock 'when'/'then' exchange (a stream is read when each document is one)"
            )
    return httpmock_interactions([d for d in documents if d is not None])


def _listed(document: list[Any]) -> list[Any]:
    """A list as the whole document: php-vcr's and ExVCR's interactions, or nock's
    definitions."""
    if document and all(_exchange(item) for item in document):
        return document
    if is_nock(document):
        return nock_interactions(document)
    raise Problem(
        "a list, but not of interactions (each a request and its response) nor of nock"
        " definitions (each a scope and a path)"
    )


def _exchange(node: Any) -> bool:
    """Whether ``node`` is an interaction as every VCR port writes one: a request and its
    response."""
    return isinstance(node, dict) and "request" in node and "response" in node
