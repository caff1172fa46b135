"""Compare two runs, or two JSON values, and say exactly where they differ.

Pure functions over neutral views: ``compare_runs`` is what ``toolloop diff`` prints, and
``json_diff`` is also how a replay names the JSON path at which a result diverged.

Runs are aligned turn by turn (by position) and, inside a turn, call by call: first by call
id, then whatever is left by position. Identifiers minted per run (operation, approval,
response and call ids, idempotency keys) and timestamps are not compared: two runs of the
same task differ in all of them without behaving differently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CallView",
    "Change",
    "Difference",
    "RunView",
    "TurnView",
    "align_calls",
    "compare_runs",
    "json_diff",
    "json_path",
]

ChangeKind = Literal["changed", "only_a", "only_b"]
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Change:
    """One place where two JSON values differ; a missing side is ``None`` with its ``kind``."""

    path: str
    kind: ChangeKind
    a: Any
    b: Any


def json_path(base: str, key: str | int) -> str:
    """``base`` extended by one step: ``$.name``, ``$[3]``, ``$['odd key']``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{base}.{key}"
    return f"{base}[{key!r}]"


def _same_scalar(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 (one JSON number), but true is not 1 and "1" is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def json_diff(a: Any, b: Any, path: str = "$") -> list[Change]:
    """Every leaf-level difference between two JSON values, in document order."""
    if isinstance(a, dict) and isinstance(b, dict):
        changes: list[Change] = []
        for key in [*a, *(k for k in b if k not in a)]:
            where = json_path(path, str(key))
            if key not in b:
                changes.append(Change(where, "only_a", a[key], None))
            elif key not in a:
                changes.append(Change(where, "only_b", None, b[key]))
            else:
                changes.extend(json_diff(a[key], b[key], where))
        return changes
    if isinstance(a, list) and isinstance(b, list):
        changes = []
        for index in range(max(len(a), len(b))):
            where = json_path(path, index)
            if index >= len(b):
                changes.append(Change(where, "only_a", a[index], None))
            elif index >= len(a):
                changes.append(Change(where, "only_b", None, b[index]))
            else:
                changes.extend(json_diff(a[index], b[index], where))
        return changes
    if isinstance(a, dict | list) or isinstance(b, dict | list) or not _same_scalar(a, b):
        return [Change(path, "changed", a, b)]
    return []


@dataclass(frozen=True)
class CallView:
    """One call as a diff sees it (its id only aligns calls; it is not compared)."""

    call_id: str
    name: str
    arguments: Any
    state: str
    result: Any
    approval: str | None = None  # the status of the call's approval, if it had one


@dataclass(frozen=True)
class TurnView:
    index: int
    outcome: str
    finish_reason: str | None
    calls: tuple[CallView, ...] = ()


@dataclass(frozen=True)
class RunView:
    """A run reduced to what ``diff`` compares."""

    label: str
    state: str
    final_text: str | None
    turns: tuple[TurnView, ...]


@dataclass(frozen=True)
class Difference:
    """One difference between runs A and B, with a JSON path into the run view."""

    path: str
    kind: ChangeKind
    a: Any
    b: Any
    turn: int | None = None
    call_a: str | None = None
    call_b: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "a": self.a,
            "b": self.b,
            "turn": self.turn,
            "call_id_a": self.call_a,
            "call_id_b": self.call_b,
        }


Pair = tuple[CallView | None, CallView | None]


def align_calls(a: Sequence[CallView], b: Sequence[CallView]) -> list[Pair]:
    """Pairs of calls: same call id first, then the rest by position; leftovers unpaired."""
    b_ids = {call.call_id for call in b}
    matched = {call.call_id for call in a if call.call_id in b_ids}
    rest_a = [call for call in a if call.call_id not in matched]
    rest_b = [call for call in b if call.call_id not in matched]
    by_id = {call.call_id: call for call in b}
    pairs: list[Pair] = []
    for call in a:
        if call.call_id in matched:
            pairs.append((call, by_id[call.call_id]))
        else:
            position = rest_a.index(call)
            pairs.append((call, rest_b[position] if position < len(rest_b) else None))
    pairs.extend((None, call) for call in rest_b[len(rest_a) :])
    return pairs


def compare_runs(a: RunView, b: RunView) -> list[Difference]:
    """Every difference between two runs: state, final text, turns, calls, approvals."""
    found: list[Difference] = []
    for field in ("state", "final_text"):
        left, right = getattr(a, field), getattr(b, field)
        if left != right:
            found.append(Difference(f"$.{field}", "changed", left, right))
    for index in range(max(len(a.turns), len(b.turns))):
        path = f"$.turns[{index}]"
        if index >= len(b.turns):
            found.append(Difference(path, "only_a", _turn_summary(a.turns[index]), None, index))
        elif index >= len(a.turns):
            found.append(Difference(path, "only_b", None, _turn_summary(b.turns[index]), index))
        else:
            found.extend(_compare_turns(a.turns[index], b.turns[index], path))
    return found


def _turn_summary(turn: TurnView) -> dict[str, Any]:
    return {
        "outcome": turn.outcome,
        "finish_reason": turn.finish_reason,
        "calls": [f"{call.name} {call.state}" for call in turn.calls],
    }


def _compare_turns(a: TurnView, b: TurnView, path: str) -> list[Difference]:
    found: list[Difference] = []
    for field in ("outcome", "finish_reason"):
        left, right = getattr(a, field), getattr(b, field)
        if left != right:
            found.append(Difference(f"{path}.{field}", "changed", left, right, a.index))
    for position, (left, right) in enumerate(align_calls(a.calls, b.calls)):
        where = f"{path}.calls[{position}]"
        ids = (left.call_id if left else None, right.call_id if right else None)
        if left is None or right is None:
            kind: ChangeKind = "only_b" if left is None else "only_a"
            side = _call_json(left) if left else _call_json(right)  # type: ignore[arg-type]
            a_side, b_side = (side, None) if kind == "only_a" else (None, side)
            found.append(Difference(where, kind, a_side, b_side, a.index, *ids))
            continue
        for change in json_diff(_call_json(left), _call_json(right), where):
            found.append(Difference(change.path, change.kind, change.a, change.b, a.index, *ids))
    return found


def _call_json(call: CallView) -> dict[str, Any]:
    return {
        "name": call.name,
        "arguments": call.arguments,
        "state": call.state,
        "result": call.result,
        "approval": call.approval,
    }
