"""LangChain's cassette layout: requests and responses kept in two lists, paired by position.

LangChain's standard tests keep vcrpy's in-memory cassette as it is, gzip-compressed YAML
(``.yaml.gz``)::

    requests:  [{method, uri, body, headers: {name: [value]}}, ...]
    responses: [{status: {code, message}, headers: {name: [value]}, body: {string: ...}}, ...]

The n-th response answers the n-th request. Two lists of different lengths, or one without
the other, cannot be paired: a response would answer another request than its own, so such a
file is refused as a whole (``Problem``) instead of replayed with its answers shifted.
"""

from __future__ import annotations

from typing import Any

from .shapes import Problem

__all__ = ["LAYOUT_KEYS", "paired_interactions"]

#: the top-level keys of the layout (not metadata of the recording)
LAYOUT_KEYS = ("requests", "responses")


def paired_interactions(document: dict[Any, Any]) -> list[dict[str, Any]] | None:
    """The layout's pairs as vcrpy interactions (``{request, response}``), or None when the
    document is not in this layout (it has ``interactions``, or neither list)."""
    if "interactions" in document or not any(key in document for key in LAYOUT_KEYS):
        return None
    lists: list[list[Any]] = []
    for key in LAYOUT_KEYS:
        value = document.get(key)
        if value is None:
            other = "responses" if key == "requests" else "requests"
            raise Problem(
                f"holds '{other}' but no '{key}' list: LangChain's layout pairs each request"
                " with the response at its position, so both are needed"
            )
        if not isinstance(value, list):
            raise Problem(f"'{key}' is not a list")
        lists.append(value)
    requests, responses = lists
    if len(requests) != len(responses):
        raise Problem(
            f"holds {len(requests)} request(s) and {len(responses)} response(s): LangChain's"
            " layout pairs them by position, so there must be as many of each"
        )
    return [
        {"request": request, "response": response}
        for request, response in zip(requests, responses, strict=True)
    ]
