"""Where each record of an operation falls in time: segments, turns and call spans.

An operation runs in *segments*: from its start, or from a resume, until it pauses for an
approval or stops in a terminal state. Nothing runs between two segments (a human decides,
or nobody does), so each segment is one ``invoke_agent`` span and the wait is not counted as
work. A segment's spans are final once it closes: they are built only from records committed
up to its closing transition, so exporting at the end of each command and exporting the whole
operation later give the same spans. Pure: records in, positions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from toolloop_cli.engine.records import CallRecord, TurnRecord
from toolloop_cli.engine.states import TERMINAL, CallState, OpState

__all__ = ["CallSlice", "Placement", "Segment", "nanos", "place"]

#: A segment closes when the operation pauses for a person or reaches a terminal state.
CLOSING = frozenset({OpState.WAITING_APPROVAL.value, *(s.value for s in TERMINAL)})
#: Decisions (and refused attempts) made while no segment runs do not open one.
GAP_KINDS = frozenset({"approval", "approval_refused"})
#: Where a model answer moves the operation (engine/model_turn.py, in the turn's transaction).
TURN_OUTCOMES = frozenset(
    s.value
    for s in (
        OpState.VALIDATING,
        OpState.COMPLETED,
        OpState.REFUSED,
        OpState.INCOMPLETE,
        OpState.FAILED,
        OpState.MODEL_REQUESTED,
    )
)
#: A call in one of these states at a segment's end has not settled: its span comes later.
OPEN_CALL_STATES = frozenset(
    {
        CallState.PROPOSED.value,
        CallState.WAITING_APPROVAL.value,
        CallState.APPROVED.value,
        CallState.EXECUTING.value,
    }
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def nanos(stamp: str) -> int:
    """A store timestamp (``…T10:00:00.123456Z``, ``engine.clock.iso``) as Unix nanoseconds.

    Exact integer arithmetic; ``fromisoformat`` reads the store's one format about twenty
    times faster than ``strptime``, which dominated building the spans of a long run.
    """
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND * 1000


@dataclass(frozen=True)
class Segment:
    """One stretch of work: transitions ``first``..``last`` (indexes in the log)."""

    index: int
    first: int
    last: int
    state: str  # the state it closed in
    reason: str | None


@dataclass(frozen=True)
class CallSlice:
    """The part of one call's life that one span shows: its transitions in one segment."""

    call: CallRecord
    attempt: int  # 0 for the call's first span; a call that settles again gets another
    transitions: tuple[int, ...]
    state: str  # the call's state at the end of the slice


@dataclass
class Placement:
    """Closed segments, and which turns, calls and log entries belong to each."""

    segments: list[Segment]
    #: transition index where the running (not yet closed) segment starts, if any
    open_from: int | None
    #: turn index -> (segment index, transition index where its request started)
    turns: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: segment index -> the call slices that settled in it
    calls: dict[int, list[CallSlice]] = field(default_factory=dict)
    #: transition index -> the call it moved (for call transitions)
    call_of: dict[int, CallRecord] = field(default_factory=dict)

    def segment_at(self, index: int) -> Segment | None:
        """The closed segment holding transition ``index`` (None: running or between)."""
        for seg in self.segments:
            if seg.first <= index <= seg.last:
                return seg
        return None


def place(
    transitions: Sequence[dict[str, Any]],
    turns: Sequence[TurnRecord],
    calls: Sequence[CallRecord],
) -> Placement:
    """Split the transition log into segments and put each turn and call into one."""
    segments, open_from = _segments(transitions)
    placement = Placement(segments=segments, open_from=open_from)
    outcomes = _place_turns(placement, transitions, turns)
    _place_calls(placement, transitions, outcomes, calls)
    return placement


def _segments(transitions: Sequence[dict[str, Any]]) -> tuple[list[Segment], int | None]:
    segments: list[Segment] = []
    first: int | None = None
    for i, t in enumerate(transitions):
        if first is None:
            if t["kind"] in GAP_KINDS:
                continue
            first = i
        if t["kind"] == "operation" and t["target"] in CLOSING:
            segments.append(Segment(len(segments), first, i, t["target"], t["reason"]))
            first = None
    return segments, first


def _place_turns(
    placement: Placement, transitions: Sequence[dict[str, Any]], turns: Sequence[TurnRecord]
) -> dict[int, int]:
    """Match each turn to the transition committed with it, by order, not by clock.

    A turn is committed in one transaction with exactly one move out of MODEL_REQUESTED (its
    outcome); its request started at the last move into MODEL_REQUESTED before that. Order is
    what counts: a replay's clock stands still, so its timestamps are all equal.
    """
    outcomes: dict[int, int] = {}
    cursor = 0
    for turn in sorted(turns, key=lambda t: t.idx):
        found = next(
            (
                i
                for i in range(cursor, len(transitions))
                if transitions[i]["kind"] == "operation"
                and transitions[i]["source"] == OpState.MODEL_REQUESTED.value
                and transitions[i]["target"] in TURN_OUTCOMES
            ),
            None,
        )
        if found is None:
            break
        outcomes[turn.idx] = found
        cursor = found + 1
        begun = next(
            (
                i
                for i in range(found - 1, -1, -1)
                if transitions[i]["kind"] == "operation"
                and transitions[i]["target"] == OpState.MODEL_REQUESTED.value
            ),
            None,
        )
        seg = placement.segment_at(found)
        if seg is not None:
            placement.turns[turn.idx] = (seg.index, max(seg.first, begun or 0))
    return outcomes


def _place_calls(
    placement: Placement,
    transitions: Sequence[dict[str, Any]],
    outcomes: dict[int, int],
    calls: Sequence[CallRecord],
) -> None:
    """Each call's transitions, cut at segment ends; a slice that ends settled is a span."""
    by_id: dict[str, list[CallRecord]] = {}
    for call in sorted(calls, key=lambda c: (c.turn_idx, c.seq)):
        by_id.setdefault(call.call_id, []).append(call)
    by_key = {(c.response_id, c.call_id): c for c in calls}
    moves: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(transitions):
        if t["kind"] != "call" or t["call_id"] not in by_id:
            continue
        response_id = t.get("response_id")  # None in rows from before the log kept it
        if response_id is not None:
            named = by_key.get((response_id, t["call_id"]))
            if named is None:
                continue
            call = named
        else:
            call = _owner(by_id[t["call_id"]], i, outcomes)
        placement.call_of[i] = call
        moves.setdefault((call.response_id, call.call_id), []).append(i)
    for call in sorted(calls, key=lambda c: (c.turn_idx, c.seq)):
        attempt = 0
        mine = moves.get((call.response_id, call.call_id), [])
        for seg in placement.segments:
            inside = tuple(i for i in mine if seg.first <= i <= seg.last)
            if not inside:
                continue
            state = transitions[inside[-1]]["target"]
            if state in OPEN_CALL_STATES:
                continue
            placement.calls.setdefault(seg.index, []).append(
                CallSlice(call, attempt, inside, state)
            )
            attempt += 1


def _owner(candidates: list[CallRecord], at: int, outcomes: dict[int, int]) -> CallRecord:
    """For a log entry without a response id: call ids are the provider's, and if one repeats
    across turns, the latest turn before the entry wins."""
    owner = candidates[0]
    for call in candidates[1:]:
        if outcomes.get(call.turn_idx, at) < at:
            owner = call
    return owner
