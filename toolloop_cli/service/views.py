"""Read models of operations: the JSON object every command prints with ``--json``."""

from __future__ import annotations

from typing import Any

from toolloop_cli.engine.ids import arguments_digest
from toolloop_cli.engine.records import ApprovalRecord, CallRecord, OperationRecord
from toolloop_cli.engine.states import EXIT_CODES, ApprovalStatus, OpState
from toolloop_cli.errors import TamperedStore, ToolloopError
from toolloop_cli.store import Store
from toolloop_cli.wiring import cached_registry


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
            "text": t.text,
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
            "response_id": a.response_id,
            "call_id": a.call_id,
            "tool": a.tool,
            "status": a.status.value,
            "expires_at": a.expires_at,
            "decided_by": a.decided_by,
            "decided_at": a.decided_at,
            "reason": a.reason,
            "policy_revision": a.policy_revision,
            "policy_sha256": a.policy_sha256,
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
            "policy_sha256": op.policy_sha256,
        },
        "guards": op.guards.model_dump(),
        "counters": op.counters.model_dump(),
        "created_at": op.created_at,
        "updated_at": op.updated_at,
        "deadline_at": op.deadline_at,
    }


def approval_call(store: Store, apr: ApprovalRecord) -> CallRecord:
    """The call an approval was asked for, through the approval's own row.

    Call ids are unique only within one response, so the call is the one named by the
    approval's (operation, response id, call id), never the first call with that call id.
    A row that names no call, or a call bound to another approval, is a tampered store.
    """
    call = store.get_call(apr.operation_id, apr.response_id, apr.call_id)
    if call is None:
        raise TamperedStore(
            f"approval {apr.approval_id} names call {apr.call_id} of response "
            f"{apr.response_id}, which is not in the store"
        )
    if call.approval_id != apr.approval_id or call.name != apr.tool:
        raise TamperedStore(
            f"approval {apr.approval_id} names call {apr.call_id} of response "
            f"{apr.response_id}, which belongs to {call.approval_id or 'no approval'} "
            f"({call.name})"
        )
    return call


def approval_view(
    store: Store,
    approval_id: str,
    tenant: str | None = None,
    *,
    approval: ApprovalRecord | None = None,
) -> dict[str, Any]:
    """What a person deciding an approval is shown: the approval and its exact call.

    ``call`` carries the tool, its risk, the full arguments, the idempotency key, the digest
    the approval is bound to (and whether the stored arguments still hash to it), the policy
    revision and the expiry. ``task`` and ``model_text`` are the operation's task and the
    text of the model turn that proposed the call (adapters keep a turn's text parts joined,
    not their position relative to the call).
    """
    apr = approval or store.get_approval(approval_id, tenant)
    op = store.get_operation(apr.operation_id)
    call = approval_call(store, apr)
    risk, tool_changed, problem = _tool_facts(op, apr)
    arguments = call.arguments if call.arguments is not None else call.raw_arguments
    digest_ok = (
        call.arguments is not None and arguments_digest(call.arguments) == apr.arguments_sha256
    )
    turn = next((t for t in store.turns(op.operation_id) if t.idx == call.turn_idx), None)
    return {
        **apr.model_dump(),
        "call": {
            "turn": call.turn_idx,
            "response_id": call.response_id,
            "call_id": call.call_id,
            "tool": call.name,
            "risk": risk,
            "state": call.state.value,
            "arguments": arguments,
            "idempotency_key": call.idempotency_key,
            "arguments_sha256": apr.arguments_sha256,
            "arguments_match": digest_ok,
            "policy_revision": apr.policy_revision,
            "expires_at": apr.expires_at,
        },
        "tool_changed": tool_changed,
        "registry_problem": problem,
        "task": op.task,
        "model_text": turn.text
        if turn is not None and turn.response_id == call.response_id
        else None,
    }


def waiting_approval_views(store: Store, operation_id: str) -> list[dict[str, Any]]:
    """``approval_view`` of the operation's pending approvals, in the order they were asked."""
    return [
        approval_view(store, apr.approval_id, approval=apr)
        for apr in store.approvals(operation_id)
        if apr.status is ApprovalStatus.PENDING
    ]


def _tool_facts(op: OperationRecord, apr: ApprovalRecord) -> tuple[str | None, bool, str | None]:
    """The tool's risk from the operation's registry, whether the tool changed since the
    approval was asked (resume then refuses it), or why the registry cannot be read."""
    try:
        registry = cached_registry(op.registry_path, import_handlers=False)
    except ToolloopError as exc:
        return None, False, str(exc)
    tool = registry.get(apr.tool)
    if tool is None:
        return None, True, f"registry {op.registry_path} no longer has tool {apr.tool}"
    return tool.risk, tool.sha256 != apr.tool_sha256, None
