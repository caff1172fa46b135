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
import yaml
from support.paths import REGISTRY

from toolloop_cli.engine.types import CallContext, ExecutionStatus, ToolExecution
from toolloop_cli.errors import ToolloopError
from toolloop_cli.tools.registry import load_registry
from toolloop_cli.wiring import RegistryToolbox, cached_registry


def _context() -> CallContext:
    return CallContext(
        operation_id="op_1",
        call_id="call_1",
        idempotency_key="idk_1",
        tenant="default",
        subject="operator",
        deadline=time.time() + 30,
    )


def test_tool_infos_are_built_once_per_toolbox(tmp_path: Path) -> None:
    toolbox = RegistryToolbox(load_registry(REGISTRY), tmp_path)
    first = toolbox.lookup("get_order")
    assert first is not None and first.name == "get_order"
    assert toolbox.lookup("get_order") is first
    assert toolbox.lookup("no_such_tool") is None


def test_an_edited_registry_gets_fresh_tool_infos(tmp_path: Path) -> None:
    path = tmp_path / "refunds.yaml"
    path.write_text(REGISTRY.read_text())
    before = RegistryToolbox(cached_registry(path), tmp_path).lookup("get_order")
    doc = yaml.safe_load(path.read_text())
    doc["tools"]["get_order"]["timeout_ms"] = 4321
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    after = RegistryToolbox(cached_registry(path), tmp_path).lookup("get_order")
    assert before is not None and after is not None
    assert after.sha256 != before.sha256  # the new definition, not the first toolbox's


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


def test_running_a_tool_never_looked_up_is_an_internal_error(tmp_path: Path) -> None:
    toolbox = RegistryToolbox(load_registry(REGISTRY), tmp_path)
    with pytest.raises(AssertionError, match="internal error") as raised:
        toolbox.execute("no_such_tool", {}, _context())
    assert not isinstance(raised.value, ToolloopError)


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
