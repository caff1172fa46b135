"""``step()`` makes exactly one operation transition and persists it; ``run()`` steps on.

Each state has one step function. A step reads what it needs from the store, does at most
one kind of side effect (a model request, or the tool calls of one turn, each call's intent
and result committed around its handler), and commits the operation's new state in the same
transaction as the rows that justify it. A process killed at any line resumes from the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from toolloop_cli.errors import (
    OperationTerminal as OperationTerminal,  # re-exported: its home was this module
    ToolloopError,
)

from . import approving, executing, guards, sending, validating
from .context import Deps, stop
from .model_turn import request_model
from .records import CallRecord, OperationRecord
from .states import OpState, is_terminal

#: the steps that run a turn's tools or send its results back
_BEFORE_TOOLS = frozenset({OpState.EXECUTING, OpState.RESULTS_READY})


@dataclass(frozen=True)
class StepResult:
    """What one step did: ``source -> target``; ``waiting`` says why nothing could change.

    ``calls`` are the current turn's calls as the step left them (None when it did not read
    them): the next step starts from them instead of reading them again.
    """

    source: OpState
    target: OpState
    operation: OperationRecord
    waiting: str | None = None
    calls: list[CallRecord] | None = None
    #: the steps the run that ended with this one made, this one included (``run`` sets it)
    steps: int = 1


def step(deps: Deps, operation_id: str) -> StepResult:
    """Make exactly one transition of the operation (or report why none can happen yet)."""
    return advance(deps, deps.store.get_operation(operation_id))


def advance(deps: Deps, op: OperationRecord, calls: list[CallRecord] | None = None) -> StepResult:
    """``step`` from records already in hand: ``op`` as last read or written, and its turn's
    ``calls`` (None: read them). A stale record is refused by the store's compare-and-set."""
    source = op.state
    if is_terminal(source):
        raise OperationTerminal(
            f"operation {op.operation_id} is {source.value} (terminal): nothing to do, "
            "nothing was run"
        )
    late = guards.past_deadline(op, deps.clock.now())
    if source is not OpState.MODEL_REQUESTED and late is not None:
        with deps.store.transaction():
            op = stop(deps, op, OpState.BUDGET_EXHAUSTED, late)
        deps.failpoint("after_step_commit")
        return StepResult(source, op.state, op)
    ended = deps.input_ends(op) if source in _BEFORE_TOOLS else None
    if ended is not None:
        with deps.store.transaction():
            op = stop(deps, op, OpState.INCOMPLETE, ended)
        deps.failpoint("after_step_commit")
        deps.on_event("transition", {"source": source.value, "target": op.state.value})
        return StepResult(source, op.state, op)
    waiting: str | None = None
    match source:
        case OpState.MODEL_REQUESTED:
            op, calls = request_model(deps, op)
        case OpState.VALIDATING:
            op, calls = validating.validate(deps, op, calls)
        case OpState.WAITING_APPROVAL:
            op, calls, waiting = approving.collect_decisions(deps, op, calls)
        case OpState.EXECUTING:
            op, calls = executing.execute(deps, op, calls)
        case OpState.RESULTS_READY:
            op, calls = sending.send_back(deps, op)
        case _:  # pragma: no cover - terminal states are handled above
            raise OperationTerminal(f"operation {op.operation_id} is {source.value}")
    # every step function returns right after its last commit: this is the boundary after it
    deps.failpoint("after_step_commit")
    if waiting:
        return StepResult(source, op.state, op, waiting=waiting, calls=calls)
    deps.on_event("transition", {"source": source.value, "target": op.state.value})
    return StepResult(source, op.state, op, calls=calls)


#: called after each step ``run`` makes (the service renews its lease there)
AfterStep = Callable[[StepResult], None]


def run(
    deps: Deps,
    operation_id: str,
    max_steps: int = 1_000_000,
    after_step: AfterStep | None = None,
    op: OperationRecord | None = None,
) -> StepResult:
    """Step until the operation is terminal or waits for a human; return the last step.

    The operation is read once (or ``op`` is that read); each step hands its records on.
    """
    if op is None:
        op = deps.store.get_operation(operation_id)
    calls: list[CallRecord] | None = None
    with deps.store.holding():  # steps with no wait between them share one commit
        for made in range(1, max_steps + 1):
            last = advance(deps, op, calls)
            if after_step is not None:
                after_step(last)
            if is_terminal(last.target) or last.waiting:
                return replace(last, steps=made) if made > 1 else last
            op, calls = last.operation, last.calls
    raise ToolloopError(f"operation {operation_id} did not settle in {max_steps} steps")


def resume(
    deps: Deps,
    operation_id: str,
    force_continue: bool = False,
    decided_by: str | None = None,
    after_step: AfterStep | None = None,
    op: OperationRecord | None = None,
) -> StepResult:
    """Continue a paused or interrupted operation; ESCALATED needs ``force_continue``.

    ``decided_by`` names the operator whose explicit decision a forced continue is; it is
    written into the transition log.
    """
    if op is None:
        op = deps.store.get_operation(operation_id)
    if op.state is OpState.ESCALATED:
        if not force_continue:
            raise OperationTerminal(
                f"operation {operation_id} is ESCALATED ({op.reason}); nothing was run. "
                "An operator may continue it with --force-continue"
            )
        op = executing.force_continue(deps, op, decided_by or "an operator")
        deps.failpoint("after_force_continue_commit")
    elif is_terminal(op.state):
        raise OperationTerminal(
            f"operation {operation_id} is already {op.state.value}: nothing to resume, "
            "nothing was run"
        )
    return run(deps, operation_id, after_step=after_step, op=op)


def begin(
    deps: Deps,
    op: OperationRecord,
    task: str,
    *,
    history: list[dict[str, object]] | None = None,
) -> OperationRecord:
    """Store a new operation and the conversation it starts from, in one transaction.

    The conversation is the adapter's for ``task``, or ``history`` when the operation goes on
    from one (a replayed recording's first request). Its creation is the transition
    ``None -> MODEL_REQUESTED``, checked and logged like every other; nothing is sent yet.
    """
    from .machine import check_op_transition
    from .types import ModelSettings

    check_op_transition(None, op.state)
    with deps.store.transaction():
        deps.store.insert_operation(op)
        deps.store.log_transition(op.operation_id, "operation", None, op.state.value, op.created_at)
        items = (
            history
            if history is not None
            else deps.adapter.start(task, ModelSettings(**op.settings))
        )
        deps.store.append_items(op.operation_id, items)
    deps.failpoint("after_start_commit")
    return op
