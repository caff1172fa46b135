"""Spans of a run whose provider names every turn's calls the same: one span per call.

A call is (response id, call id); the state log names both, so each move is placed with its
own call. An entry from a store written before the log kept the response id falls back to
the latest turn before it with that call id.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from support.scripted import answer, call, final, run_script

from toolloop_cli.engine.records import CallRecord, TurnRecord
from toolloop_cli.store import open_store
from toolloop_cli.telemetry.segments import place


def test_each_move_is_placed_with_the_call_of_its_response(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    script = [
        answer("resp_a", call("echo", {"n": 1}, "call_0"), call("echo", {"n": 2}, "call_1")),
        answer("resp_b", call("echo", {"n": 3}, "call_0"), call("echo", {"n": 4}, "call_1")),
        final("done"),
    ]
    result, _ = run_script(store, script)
    op_id = result.operation.operation_id
    log, turns, calls = store.transitions(op_id), store.turns(op_id), store.calls(op_id)
    placement = place(log, turns, calls)
    moved = [(i, log[i]) for i in range(len(log)) if log[i]["kind"] == "call"]
    assert len(moved) == 12
    for i, entry in moved:
        owner = placement.call_of[i]
        assert (owner.response_id, owner.call_id) == (entry["response_id"], entry["call_id"])
    spans = [(s.call.response_id, s.call.call_id) for p in placement.calls.values() for s in p]
    assert sorted(spans) == sorted((c.response_id, c.call_id) for c in calls)

    late = {"kind": "call", "call_id": "call_0", "source": "SUCCEEDED", "target": "SUCCEEDED"}
    at = log[-1]["at"]
    named = [*log, {**late, "response_id": "resp_a", "reason": None, "at": at}]
    assert placement_of(named, turns, calls) == "resp_a"  # named: its own call
    old = [*log, {**late, "response_id": None, "reason": None, "at": at}]
    assert placement_of(old, turns, calls) == "resp_b"  # unnamed: the latest turn before it


def placement_of(
    log: Sequence[dict[str, Any]], turns: Sequence[TurnRecord], calls: Sequence[CallRecord]
) -> str:
    """The response id of the call the last entry of ``log`` is placed with."""
    return place(log, turns, calls).call_of[len(log) - 1].response_id
