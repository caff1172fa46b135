"""toolloop's metadata about a recording's calls and approvals, by the call a replay makes.

A replay's turn ``k`` is the recording's ``k``-th answer. A provider may give every turn's
calls the same ids (``call_0``), so an entry is found by (turn, call id), never by call id
over the whole conversation. The metadata names the recording's own turn, which also counts
requests that got no answer (those are not recorded): each recorded turn is placed at the
next answer that proposed its calls (by their ids, as the adapter reads the answer), and a
turn no answer matches keeps its distance from the turn placed before it.
"""

from __future__ import annotations

import re
from typing import Any

from toolloop_cli.engine.types import ModelTurn

from .split import Conversation

__all__ = ["CallKey", "meta_list", "recorded_approvals", "recorded_calls"]

#: A call of a replay: (turn, call id), the turn being the index of the answer it came in.
CallKey = tuple[int, str]
#: an id the engine qualified with its turn (an answer without a response id)
_QUALIFIED = re.compile(r"(.+)_t[0-9]+")


def meta_list(meta: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = meta.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _entries(meta: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c for c in meta_list(meta, "calls") if isinstance(c.get("turn"), int) and "call_id" in c
    ]


def _proposes(turn: ModelTurn | None, call_id: str) -> bool:
    ids = {c.call_id for c in turn.calls} if turn is not None else set()
    qualified = _QUALIFIED.fullmatch(call_id)
    return call_id in ids or (qualified is not None and qualified.group(1) in ids)


def _answers(conversation: Conversation, meta: dict[str, Any]) -> dict[int, int]:
    """Recorded turn -> the index of its answer in the conversation (see above)."""
    groups: dict[int, list[str]] = {}
    for entry in _entries(meta):
        groups.setdefault(entry["turn"], []).append(str(entry["call_id"]))
    found: dict[int, int] = {}
    start, shift = 0, 0
    for turn in sorted(groups):
        index = next(
            (
                k
                for k in range(start, len(conversation.turns))
                if all(_proposes(conversation.turns[k], i) for i in groups[turn])
            ),
            None,
        )
        if index is None:
            index = turn - shift
        shift = turn - index
        found[turn] = index
        start = index + 1
    return found


def recorded_calls(
    conversation: Conversation, meta: dict[str, Any]
) -> dict[CallKey, dict[str, Any]]:
    """The metadata's entry about each recorded call, by (turn, call id)."""
    answers = _answers(conversation, meta)
    return {(answers[c["turn"]], str(c["call_id"])): c for c in _entries(meta)}


def recorded_approvals(
    conversation: Conversation, meta: dict[str, Any]
) -> dict[CallKey, dict[str, Any]]:
    """The metadata's entry about each recorded approval, by its call's (turn, call id).

    An approval recorded before approvals named their turn belongs to the first call with
    its id: toolloop then answered a call id reused in a later turn INVALID, never asking.
    """
    answers = _answers(conversation, meta)
    first: dict[str, int] = {}
    for entry in sorted(_entries(meta), key=lambda c: int(c["turn"])):
        first.setdefault(str(entry["call_id"]), entry["turn"])
    found: dict[CallKey, dict[str, Any]] = {}
    for apr in meta_list(meta, "approvals"):
        if "call_id" not in apr:
            continue
        call_id, given = str(apr["call_id"]), apr.get("turn")
        turn = given if isinstance(given, int) else first.get(call_id)
        if turn is not None:
            found[(answers.get(turn, turn), call_id)] = apr
    return found
