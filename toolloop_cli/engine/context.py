"""What every step shares: its dependencies and the two ways to change state."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolloop_cli.audit.binding import (
    CALL_FIELDS,
    OP_FIELDS,
    OP_PINNED_FIELDS,
    call_binding_sha256,
    result_sha256,
)
from toolloop_cli.audit.request_hash import RequestHasher
from toolloop_cli.errors import StoreError

from . import envelopes
from .clock import SystemClock, iso
from .machine import check_call_transition, check_op_transition
from .ports import Clock, ModelAdapter, StorePort, Toolbox, Transport
from .records import CallRecord, OperationRecord
from .states import ApprovalStatus, CallState, OpState, is_terminal
from .types import Usage


@dataclass
class Deps:
    """Everything a step needs, built by the composition root."""

    store: StorePort
    adapter: ModelAdapter
    transport: Transport
    toolbox: Toolbox
    clock: Clock = field(default_factory=SystemClock)
    sleep: Callable[[float], None] = time.sleep
    failpoint: Callable[[str], None] = lambda name: None
    on_event: Callable[[str, dict[str, object]], None] = lambda kind, data: None
    rng: random.Random = field(default_factory=random.Random)
    #: USD cost of one answer's usage for a model (0 when no price is known)
    cost_of: Callable[[str, Usage], float] = lambda model, usage: 0.0
    #: binding fields of each operation stepped with these deps (fixed once it started)
    bindings: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: running request hashes, so a turn hashes only its new conversation items
    request_hasher: RequestHasher = field(default_factory=RequestHasher)
    #: asked before a turn's tools run or its results go back: why the model's answers end
    #: here (a replayed recording with nothing after this turn), so the operation ends
    #: INCOMPLETE and the turn's open calls NOT_EXECUTED; None lets it go on
    input_ends: Callable[[OperationRecord], str | None] = lambda op: None
    #: asked before a failed request is sent again: why no answer would come (a replayed
    #: recording with nothing after the failure: its client gave up), so the operation
    #: ends FAILED with the recorded error; None lets the retry go
    retry_ends: Callable[[OperationRecord], str | None] = lambda op: None
    #: the operation was taken over from a runner that may still be running (its lease
    #: expired, its process not shown gone): a call it left EXECUTING may still be in its
    #: handler, so it is reconciled only once that handler's timeout has passed
    taken_over: bool = False

    def now_iso(self) -> str:
        return iso(self.clock.now())


def current_turn(op: OperationRecord) -> int:
    """The operation's current turn; a call step without one is a broken store."""
    if op.current_turn is None:
        raise StoreError(f"operation {op.operation_id} has no current turn")
    return op.current_turn


def turn_calls(deps: Deps, op: OperationRecord) -> list[CallRecord]:
    """The calls of the operation's current turn."""
    return deps.store.calls(op.operation_id, current_turn(op))


def transition(
    deps: Deps,
    op: OperationRecord,
    target: OpState,
    reason: str | None = None,
    **changes: object,
) -> OperationRecord:
    """Move ``op`` to ``target`` (inside the caller's transaction); refuses illegal moves.

    A pause for a person and an end are barriers: on disk before anyone is told.
    """
    check_op_transition(op.state, target)
    if target is OpState.WAITING_APPROVAL or is_terminal(target):
        deps.store.barrier()
    now = deps.now_iso()
    update: dict[str, object] = {"state": target, "updated_at": now, **changes}
    if reason is not None:
        update["reason"] = reason
    new = op.model_copy(update=update)
    deps.store.save_operation(new, op.state)
    deps.store.log_transition(
        op.operation_id, "operation", op.state.value, target.value, now, reason
    )
    return new


def save_counters(deps: Deps, op: OperationRecord, **changes: object) -> OperationRecord:
    """Persist counter or field changes without a state change (inside a transaction)."""
    new = op.model_copy(update={"updated_at": deps.now_iso(), **changes})
    deps.store.save_operation(new, op.state)
    return new


def call_to(
    deps: Deps,
    call: CallRecord,
    target: CallState,
    reason: str | None = None,
    **changes: object,
) -> CallRecord:
    """Move ``call`` to ``target`` (inside the caller's transaction); refuses illegal moves."""
    check_call_transition(call.state, target)
    now = deps.now_iso()
    new = seal_result(deps, call.model_copy(update={"state": target, **changes}))
    deps.store.save_call(new, call.state)
    deps.store.log_transition(
        call.operation_id,
        "call",
        call.state.value,
        target.value,
        now,
        reason,
        call.call_id,
        call.response_id,
    )
    event: dict[str, object] = {
        "call_id": call.call_id,
        "name": call.name,
        "state": target.value,
        "turn": call.turn_idx,
    }
    deps.store.after_commit(lambda: deps.on_event("call", event))
    return new


_OPEN = (CallState.PROPOSED, CallState.WAITING_APPROVAL, CallState.APPROVED)


def stop(deps: Deps, op: OperationRecord, target: OpState, reason: str) -> OperationRecord:
    """End ``op`` in a terminal state; calls of the turn that never ran become NOT_EXECUTED."""
    if op.current_turn is not None:
        for call in deps.store.calls(op.operation_id, op.current_turn):
            if call.state in _OPEN:
                # an approval decided but not yet collected keeps its decision (first stands)
                if (
                    call.approval_id
                    and call.state is CallState.WAITING_APPROVAL
                    and deps.store.get_approval(call.approval_id).status is ApprovalStatus.PENDING
                ):
                    deps.store.decide_approval(
                        call.approval_id, ApprovalStatus.CANCELLED, None, deps.now_iso(), reason
                    )
                call_to(
                    deps,
                    call,
                    CallState.NOT_EXECUTED,
                    reason,
                    model_result=envelopes.not_executed(reason),
                )
    return transition(deps, op, target, reason)


def op_binding(op: OperationRecord) -> dict[str, Any]:
    """The fields of an operation a call binding includes (they never change once started)."""
    return {name: getattr(op, name) for name in (*OP_FIELDS, *OP_PINNED_FIELDS)}


def call_binding_inputs(call: CallRecord) -> dict[str, Any]:
    """A call as ``audit.binding`` reads it: binding fields, result and its stored hashes."""
    fields = {name: getattr(call, name) for name in CALL_FIELDS}
    fields.update(
        raw_arguments=call.raw_arguments,
        model_result=call.model_result,
        protected_audit=call.protected_audit,
        result_sha256=call.result_sha256,
        call_binding_sha256=call.call_binding_sha256,
    )
    return fields


def seal_result(deps: Deps, call: CallRecord) -> CallRecord:
    """Hash a call's result and bind it to the call and its operation (audit.binding).

    Done on every call write that carries a result, in the transaction that commits it, so
    ``send_back`` and ``verify`` can recompute both from the stored call and operation.
    """
    if call.model_result is None and call.protected_audit is None:
        return call
    op = deps.bindings.get(call.operation_id)
    if op is None:
        op = deps.bindings[call.operation_id] = op_binding(
            deps.store.get_operation(call.operation_id)
        )
    result_sha = result_sha256(call.model_result, call.protected_audit)
    binding = call_binding_sha256(op, call_binding_inputs(call), result_sha)
    return call.model_copy(update={"result_sha256": result_sha, "call_binding_sha256": binding})
