"""Read models of operations: the JSON object every command prints with ``--json``."""

from __future__ import annotations

from typing import Any

from toolloop_cli.engine.records import OperationRecord
from toolloop_cli.engine.states import EXIT_CODES, OpState
from toolloop_cli.store import Store


def exit_code(state: OpState) -> int:
    """The exit code of run / resume / step for an operation in ``state`` (0 only for success)."""
    return EXIT_CODES.get(state, 0)


def operation_view(store: Store, operation_id: str, tenant: str | None = None) -> dict[str, Any]:
    """design.md §8: operation, turns, calls, approvals, budgets."""
    op = store.get_operation(operation_id, tenant)
    turns = [
        {
            "index": t.idx,
            "response_id": t.response_id,
            "outcome": t.outcome.value,
            "finish_reason": t.finish_reason,
            "detail": t.detail,
            "error": t.error.model_dump() if t.error else None,
            "usage": t.usage.model_dump(),
        }
        for t in store.turns(operation_id)
    ]
    calls = [
        {
            "turn": c.turn_idx,
            "response_id": c.response_id,
            "call_id": c.call_id,
            "name": c.name,
            "arguments": c.arguments if c.arguments is not None else c.raw_arguments,
            "state": c.state.value,
            "idempotency_key": c.idempotency_key,
            "approval_id": c.approval_id,
            "result": c.model_result,
            "result_sha256": c.result_sha256,
            "call_binding_sha256": c.call_binding_sha256,
        }
        for c in store.calls(operation_id)
    ]
    approvals = [
        {
            "approval_id": a.approval_id,
            "call_id": a.call_id,
            "tool": a.tool,
            "status": a.status,
            "expires_at": a.expires_at,
            "decided_by": a.decided_by,
            "decided_at": a.decided_at,
            "reason": a.reason,
            "policy_revision": a.policy_revision,
            "arguments_sha256": a.arguments_sha256,
        }
        for a in store.approvals(operation_id)
    ]
    return {**summary(op), "turns": turns, "calls": calls, "approvals": approvals}


def summary(op: OperationRecord) -> dict[str, Any]:
    """The operation's own fields (no turns or calls): what ``runs`` lists."""
    return {
        "operation_id": op.operation_id,
        "state": op.state.value,
        "provider": op.provider,
        "api_family": op.api_family,
        "model": op.model,
        "transport": op.transport,
        "adapter_revision": op.adapter_revision,
        "tenant": op.tenant,
        "subject": op.subject,
        "task": op.task,
        "final_text": op.final_text,
        "reason": op.reason,
        "registry": {
            "name": op.registry_name,
            "revision": op.registry_revision,
            "path": op.registry_path,
            "sha256": op.registry_sha256,
            "policy_revision": op.policy_revision,
        },
        "guards": op.guards.model_dump(),
        "counters": op.counters.model_dump(),
        "created_at": op.created_at,
        "updated_at": op.updated_at,
        "deadline_at": op.deadline_at,
    }
