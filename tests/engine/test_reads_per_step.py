"""A run reads its records once and passes them on: on the refund demo, every step reads the
operation row at most once and the calls table at most once (statements counted)."""

from __future__ import annotations

import re
from pathlib import Path

from support.clock import FakeClock
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.stores import sqlite_of

from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store

_OPERATIONS = re.compile(r"\bFROM operations\b")
_CALLS = re.compile(r"\bFROM calls\b")


def test_each_step_of_the_refund_demo_reads_the_operation_and_the_calls_at_most_once(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    clock = FakeClock()
    segments: list[list[str]] = [["run"]]
    sqlite_of(store).set_trace_callback(lambda sql: segments[-1].append(sql))

    def on_event(kind: str, _: dict[str, object]) -> None:
        if kind == "transition":  # a step ended: the next statements are the next step's
            segments.append(["step"])

    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    op_id = operations.start(store, options, clock=clock, on_event=on_event).operation.operation_id
    (apr,) = [a for a in store.approvals(op_id) if a.status == "PENDING"]
    segments.append(["approve"])
    approvals.approve(store, apr.approval_id, "ops-lead", clock=clock)
    segments.append(["resume"])
    done = operations.resume(store, op_id, clock=clock, on_event=on_event)
    sqlite_of(store).set_trace_callback(None)
    assert done.target.value == "COMPLETED"

    steps = [s for s in segments if s[0] == "step"]
    assert len(steps) >= 10  # the demo's steps, each counted on its own
    for statements in segments:
        op_reads = sum(1 for sql in statements[1:] if _OPERATIONS.search(sql))
        call_reads = sum(1 for sql in statements[1:] if _CALLS.search(sql))
        # ``resume`` reads the operation before taking its lease and once under it
        assert op_reads <= (2 if statements[0] == "resume" else 1), statements
        assert call_reads <= 1, statements
    total_op_reads = sum(1 for s in segments for sql in s[1:] if _OPERATIONS.search(sql))
    assert total_op_reads <= 6  # was 14 reads for 12 writes
