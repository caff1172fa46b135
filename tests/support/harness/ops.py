"""Operations paused for approval, made the way a user makes them (the refund recording)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.audit_log import row_writes
from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.states import OpState
from toolloop_cli.service import operations
from toolloop_cli.store import Store

from .scenario import REFUND_OPENAI, REFUNDS, TASK, FixedClock


def waiting_refund(
    store: Store,
    *,
    tenant: str = "default",
    subject: str = "operator",
    registry: Path = REFUNDS,
    clock: Any = None,
) -> tuple[str, str]:
    """Run the refund recording until it waits; return (operation id, approval id)."""
    options = operations.RunOptions(
        task=TASK,
        registry=registry,
        transcript=REFUND_OPENAI,
        tenant=tenant,
        subject=subject,
    )
    result = operations.start(store, options, clock=clock or FixedClock())
    assert result.target is OpState.WAITING_APPROVAL, result.operation.reason
    (apr,) = [a for a in store.approvals(result.operation.operation_id) if a.status == "PENDING"]
    return result.operation.operation_id, apr.approval_id


def many_waiting_refunds(store: Store, count: int) -> tuple[str, list[str]]:
    """One scripted operation proposing ``count`` refunds at once, each awaiting approval."""
    calls = [
        {"name": "submit_refund", "arguments": {"order_id": "ord_1001", "amount_cents": n + 1}}
        for n in range(count)
    ]
    options = operations.RunOptions(
        task="many refunds",
        registry=REFUNDS,
        provider="scripted",
        model="scripted-model",
        guard_overrides={"max_tool_calls": count},
    )
    transport = ScriptedTransport([{"calls": calls}])
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.WAITING_APPROVAL, result.operation.reason
    op_id = result.operation.operation_id
    return op_id, [a.approval_id for a in store.approvals(op_id)]


def refused_records(store: Store, operation_id: str) -> list[dict[str, Any]]:
    """The ``approval_refused`` records of an operation's transition log."""
    return [t for t in store.transitions(operation_id) if t["kind"] == "approval_refused"]


def audit_records(store: Store, kind: str, needle: str) -> list[dict[str, Any]]:
    """The row writes of ``kind`` in the audit log (each with its whole row, as ``verify``
    rebuilds it) whose row mentions ``needle``."""
    return [
        w
        for w in row_writes(store.conn)
        if w["kind"] == kind and needle in json.dumps(w["row"], ensure_ascii=False)
    ]
