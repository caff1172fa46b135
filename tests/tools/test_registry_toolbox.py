"""The engine's view of a registry: ``RegistryToolbox`` and the executions it hands back.

- a tool's ``ToolInfo`` is built once per toolbox, and a reloaded (edited) registry's toolbox
  has its own, fresh ones;
- handler runs come back as the engine's ``ToolExecution`` with an ``ExecutionStatus``
  whose values are the strings stored in every call's audit record;
- asking it to run a tool it never looked up is a bug in the caller (an internal error), not
  an operator's mistake.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from support.paths import REGISTRY

from toolloop_cli.engine.types import CallContext, ExecutionStatus, ToolExecution
from toolloop_cli.tools.registry import load_registry
from toolloop_cli.wiring import RegistryToolbox


def _context() -> CallContext:
    return CallContext(
        operation_id="op_1",
        call_id="call_1",
        idempotency_key="idk_1",
        tenant="default",
        subject="operator",
        deadline=time.time() + 30,
    )


def test_execution_statuses_are_todays_strings() -> None:
    assert {s.value for s in ExecutionStatus} == {
        "ok",
        "tool_error",
        "failed",
        "timed_out",
        "result_too_large",
        "invalid_result",
        "escalate",
    }
    assert json.dumps({"status": ExecutionStatus.TIMED_OUT}) == '{"status": "timed_out"}'


def test_a_status_given_as_its_string_is_the_member_and_others_are_refused() -> None:
    assert ToolExecution("ok").status is ExecutionStatus.OK  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'done'"):
        ToolExecution("done")  # type: ignore[arg-type]


def test_a_handler_run_comes_back_as_the_engines_execution(tmp_path: Path) -> None:
    toolbox = RegistryToolbox(load_registry(REGISTRY), tmp_path)
    done = toolbox.execute("get_order", {"order_id": "ord_1001"}, _context())
    assert type(done) is ToolExecution
    assert done.status is ExecutionStatus.OK, done.error


def test_stored_audit_status_is_the_plain_string(tmp_path: Path) -> None:
    """A finished call's audit record keeps the status text it always had."""
    from support.harness.ops import waiting_refund
    from support.harness.scenario import FixedClock

    from toolloop_cli.service import approvals, operations
    from toolloop_cli.store import open_store

    store = open_store(tmp_path / "store.db")
    op_id, apr = waiting_refund(store)
    approvals.approve(store, apr, "ops-lead", clock=FixedClock())
    assert operations.resume(store, op_id, clock=FixedClock()).target.value == "COMPLETED"
    store.close()
    conn = sqlite3.connect(tmp_path / "store.db")
    query = "SELECT protected_audit_json FROM calls WHERE protected_audit_json IS NOT NULL"
    audits = [row[0] for row in conn.execute(query)]
    conn.close()
    assert len(audits) == 3 and all('"status": "ok"' in text for text in audits)
