"""Approval statuses are one enum, and every status the engine writes is one the record allows."""

from __future__ import annotations

from pathlib import Path

from support.paths import REGISTRY
from support.scripted import call, run_script, turn

from toolloop_cli.engine.context import stop
from toolloop_cli.engine.states import APPROVAL_TRANSITIONS, ApprovalStatus, OpState
from toolloop_cli.store import open_store
from toolloop_cli.wiring import cached_registry, deps_for


def test_every_approval_status_has_its_moves_and_only_pending_is_decided() -> None:
    assert set(APPROVAL_TRANSITIONS) == set(ApprovalStatus)
    decided = {s for s, to in APPROVAL_TRANSITIONS.items() if to}
    assert decided == {ApprovalStatus.PENDING}


def test_an_approval_left_pending_when_the_operation_stops_reads_back_cancelled(
    store_path: Path,
) -> None:
    """A budget that ends the run while a call waits cancels its approval; the record type
    reads the stored CANCELLED back as the enum, not as a string it does not allow."""
    store = open_store(store_path)
    result, transport = run_script(
        store, [turn(call("submit_refund", {"order_id": "ord_1001", "amount_cents": 1}))], REGISTRY
    )
    assert result.target is OpState.WAITING_APPROVAL
    op_id = result.operation.operation_id
    (apr,) = store.approvals(op_id)
    assert apr.status is ApprovalStatus.PENDING
    deps = deps_for(store, result.operation, cached_registry(REGISTRY), transport=transport)
    with store.transaction():
        stop(deps, store.get_operation(op_id), OpState.BUDGET_EXHAUSTED, "deadline")
    (apr,) = store.approvals(op_id)
    assert apr.status is ApprovalStatus.CANCELLED
    assert apr.decided_by is None and apr.reason == "deadline"
