"""What every step shares: its dependencies and the two ways to change state."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import envelopes
from .clock import SystemClock, iso
from .machine import check_call_transition, check_op_transition
from .ports import Clock, ModelAdapter, StorePort, Toolbox, Transport
from .records import CallRecord, OperationRecord
from .states import CallState, OpState
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

    def now_iso(self) -> str:
        return iso(self.clock.now())


def transition(
    deps: Deps,
    op: OperationRecord,
    target: OpState,
    reason: str | None = None,
    **changes: object,
) -> OperationRecord:
    """Move ``op`` to ``target`` (inside the caller's transaction); refuses illegal moves."""
    check_op_transition(op.state, target)
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
    new = call.model_copy(update={"state": target, **changes})
    deps.store.save_call(new, call.state)
    deps.store.log_transition(
        call.operation_id, "call", call.state.value, target.value, now, reason, call.call_id
    )
    deps.on_event("call", {"call_id": call.call_id, "name": call.name, "state": target.value})
    return new


_OPEN = (CallState.PROPOSED, CallState.WAITING_APPROVAL, CallState.APPROVED)


def stop(deps: Deps, op: OperationRecord, target: OpState, reason: str) -> OperationRecord:
    """End ``op`` in a terminal state; calls of the turn that never ran become NOT_EXECUTED."""
    if op.current_turn is not None:
        for call in deps.store.calls(op.operation_id, op.current_turn):
            if call.state in _OPEN:
                if call.approval_id and call.state is CallState.WAITING_APPROVAL:
                    deps.store.decide_approval(
                        call.approval_id, "CANCELLED", None, deps.now_iso(), reason
                    )
                call_to(
                    deps,
                    call,
                    CallState.NOT_EXECUTED,
                    reason,
                    model_result=envelopes.not_executed(reason),
                )
    return transition(deps, op, target, reason)
