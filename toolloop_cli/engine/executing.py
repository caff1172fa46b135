"""EXECUTING: the only step that runs tool handlers, so the one a crash can cut in half.

A side-effecting call's intent (state EXECUTING, with its idempotency key) is committed
before its handler starts and its result right after it returns, so a crash in between
leaves a call that ``execute`` reconciles through the key instead of running it blindly.
An operator's ``force_continue`` is here too: it settles unknown outcomes by the same
reconciliation, through the same key.
"""

from __future__ import annotations

from collections.abc import Callable

from toolloop_cli.errors import RegistryDrift, TamperedStore

from . import envelopes, guards, parallel
from .clock import parse_iso
from .context import Deps, call_to, save_counters, stop, transition, turn_calls
from .records import CallRecord, OperationRecord
from .states import ApprovalStatus, CallState, OpState
from .types import CallContext, ToolExecution, ToolInfo

C = CallState

#: how long the handlers of a batch of reads may run while its intents are held uncommitted
#: (the store's write lock with them); past it they are committed, and the handlers go on
READS_HELD_S = 0.01


def execute(
    deps: Deps, op: OperationRecord, calls: list[CallRecord] | None = None
) -> tuple[OperationRecord, list[CallRecord] | None]:
    """Run every approved call of the turn: each side effect's intent committed before its
    handler runs, a batch of reads' intents held with the turn (``_run_batch``).

    A side effect's result is committed as soon as its handler returns; the results of a batch
    of reads are committed together (a crash re-runs them), the last batch's with the step's
    transition. ``calls`` are the turn's calls if the caller has them; the calls as they end
    are returned.
    """
    current = {c.seq: c for c in (calls if calls is not None else turn_calls(deps, op))}
    _refuse_drift(deps, list(current.values()))
    for call in list(current.values()):
        if call.state is C.EXECUTING:  # left running by a crash: reconcile before anything new
            current[call.seq] = _recover_call(deps, op, call)
    approved = [c for c in current.values() if c.state is C.APPROVED]
    pending: _Pending = []
    for batch in parallel.batches(approved, lambda c: _is_sequential(deps, c)):
        if pending:  # the reads of the batch before: committed before anything else happens
            with deps.store.transaction():
                current.update((c.seq, c) for c in _record_all(deps, op, pending))
            deps.failpoint("after_result_commit")
        late = guards.past_deadline(op, deps.clock.now())
        if late is not None:
            with deps.store.transaction():
                return stop(deps, op, OpState.BUDGET_EXHAUSTED, late), None
        op, ran, pending = _run_batch(deps, op, batch)
        current.update((c.seq, c) for c in ran)
    if pending:
        with deps.store.transaction():
            current.update((c.seq, c) for c in _record_all(deps, op, pending))
            op, after = _finish(deps, op, current)
        deps.failpoint("after_result_commit")
        return op, after
    with deps.store.transaction():
        return _finish(deps, op, current)


#: reads whose handlers returned, their results not yet committed
_Pending = list[tuple[CallRecord, ToolExecution]]


def _record_all(deps: Deps, op: OperationRecord, pending: _Pending) -> list[CallRecord]:
    return [_record_execution(deps, op, call, execution) for call, execution in pending]


def _finish(
    deps: Deps, op: OperationRecord, current: dict[int, CallRecord]
) -> tuple[OperationRecord, list[CallRecord]]:
    """The step's transition once every call has run (inside the caller's transaction)."""
    after = sorted(current.values(), key=lambda c: c.seq)
    unknown = [c.call_id for c in after if c.state is C.UNKNOWN_OUTCOME]
    if unknown:
        reason = (
            "outcome unknown for call(s) " + ", ".join(unknown) + ": the side effect may have "
            "happened and the downstream could not confirm it; check it, then resume with "
            "--force-continue"
        )
        return transition(deps, op, OpState.ESCALATED, reason), after
    escalations = [_escalation(c) for c in after if _escalation(c)]
    if escalations:
        return transition(deps, op, OpState.ESCALATED, "; ".join(escalations)), after
    return transition(deps, op, OpState.RESULTS_READY), after


def _refuse_drift(deps: Deps, calls: list[CallRecord]) -> None:
    """A call allowed under one tool definition never runs (or reconciles) under another."""
    for call in calls:
        if call.state not in (C.APPROVED, C.EXECUTING):
            continue
        tool = deps.toolbox.lookup(call.name)
        if tool is None or tool.sha256 != call.tool_sha256:
            change = "was removed from" if tool is None else "changed in"
            raise RegistryDrift(
                f"tool {call.name} {change} the registry since call {call.call_id} was "
                f"allowed under {call.tool_sha256}: nothing was run; restore the registry "
                "to continue"
            )


def _is_sequential(deps: Deps, call: CallRecord) -> bool:
    tool = deps.toolbox.lookup(call.name)
    return tool is not None and tool.sequential


def _escalation(call: CallRecord) -> str:
    """The reason a handler gave when it asked for a person ('' when it did not)."""
    audit = call.protected_audit or {}
    if call.state is C.FAILED and audit.get("status") == "escalate":
        return f"{call.name} ({call.call_id}) asked for a person: {audit.get('error')}"
    return ""


def _run_batch(
    deps: Deps, op: OperationRecord, batch: list[CallRecord]
) -> tuple[OperationRecord, list[CallRecord], _Pending]:
    """Commit the batch's intents, run the handlers concurrently, commit each side effect's
    result as it returns; a batch of reads returns its executions for one commit.

    The intents of side effects are a barrier: after a power loss, an effect that happened
    always has its intent (and so its key) in the store. A batch of reads has no effect to
    lose: its intents are held with the turn's other state changes while its handlers run
    (one commit for the whole turn, results included), and committed only if the handlers
    are still running after ``READS_HELD_S``, so that no other writer waits on a slow read.
    A crash in between loses the turn since its model request: it is made again.
    """
    effects = any(_side_effecting(deps, c) for c in batch)
    if effects:
        _refuse_unvouched(deps, batch)
    with deps.store.transaction(before_wait=effects):  # the handlers start right after it
        if effects:
            deps.store.barrier()
        by_tool = dict(op.counters.tool_calls_by_tool)
        started: list[CallRecord] = []
        for call in batch:
            by_tool[call.name] = by_tool.get(call.name, 0) + 1
            now = deps.now_iso()
            started.append(call_to(deps, call, C.EXECUTING, "intent committed", started_at=now))
        counters = op.counters.model_copy(
            update={
                "tool_calls": op.counters.tool_calls + len(batch),
                "tool_calls_by_tool": by_tool,
            }
        )
        op = save_counters(deps, op, counters=counters)
    deps.failpoint("after_intent_commit")

    def start(call: CallRecord, on_done: Callable[[], None]) -> parallel.Running[ToolExecution]:
        assert call.arguments is not None
        return deps.toolbox.start(call.name, call.arguments, _context(deps, op, call), on_done)

    ended: list[CallRecord] = []
    reads: _Pending = []
    patience = None if effects else parallel.Patience(READS_HELD_S, deps.store.release)
    for call, execution in parallel.run_all(started, start, op.guards.max_parallel, patience):
        deps.failpoint("after_effect_before_result_commit")
        if not effects:
            reads.append((call, execution))
            continue
        with deps.store.transaction(before_wait=True):  # an effect's result: at once
            ended.append(_record_execution(deps, op, call, execution))
        deps.failpoint("after_result_commit")
    return op, ended, reads


def _refuse_unvouched(deps: Deps, batch: list[CallRecord]) -> None:
    """A side effect runs only as it was allowed: its row as the audit log last recorded it
    and, for a tool that needs approval, with an approval of its own, given for these
    arguments. A call set APPROVED around toolloop raises ``TamperedStore``: nothing runs."""
    for call in batch:
        tool = deps.toolbox.lookup(call.name)
        if tool is None or not tool.side_effecting:
            continue
        deps.store.check_call_logged(call)
        if not tool.needs_approval:
            continue
        apr = deps.store.get_approval(call.approval_id) if call.approval_id else None
        if (
            apr is None
            or apr.status is not ApprovalStatus.APPROVED
            or (apr.response_id, apr.call_id) != (call.response_id, call.call_id)
            or apr.arguments_sha256 != call.arguments_sha256
        ):
            raise TamperedStore(
                f"call {call.call_id} of operation {call.operation_id}: {call.name} needs an "
                "approval and the call has none given for it; nothing was run: run "
                "`toolloop verify`"
            )
        deps.store.check_approval_logged(apr.approval_id)


def _context(deps: Deps, op: OperationRecord, call: CallRecord) -> CallContext:
    return CallContext(
        operation_id=op.operation_id,
        call_id=call.call_id,
        idempotency_key=call.idempotency_key or "",
        tenant=op.tenant,
        subject=op.subject,
        deadline=parse_iso(op.deadline_at).timestamp(),
        timeout_ms=op.guards.tool_timeout_ms,
        max_result_bytes=op.guards.max_result_bytes,
    )


def _recover_call(deps: Deps, op: OperationRecord, call: CallRecord) -> CallRecord:
    """A call left EXECUTING by a crash: reconcile a side effect, re-run a read."""
    deps.store.release()  # a reconcile handler or the call's own handler runs next
    tool = deps.toolbox.lookup(call.name)
    assert call.arguments is not None
    if tool is not None and tool.side_effecting:
        _outwait_inherited_attempt(deps, op, call, tool)
        reconciled = deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
        if reconciled is not None:
            with deps.store.transaction():
                call = _record_reconciled(deps, op, call, reconciled)
            deps.failpoint("after_recover_commit")
            return call
        if not tool.has_reconcile:
            with deps.store.transaction():
                call = call_to(
                    deps,
                    call,
                    C.UNKNOWN_OUTCOME,
                    "interrupted while running; the tool has no reconcile handler",
                    protected_audit={"interrupted": True},
                )
            deps.failpoint("after_recover_commit")
            return call
        _refuse_unvouched(deps, [call])  # run again only as it was allowed to run at first
    with deps.store.transaction(before_wait=True):
        if tool is not None and tool.side_effecting:
            deps.store.barrier()
        call = call_to(deps, call, C.EXECUTING, "re-run: the downstream has no record of the key")
    deps.failpoint("after_intent_commit")
    assert call.arguments is not None
    execution = deps.toolbox.execute(call.name, call.arguments, _context(deps, op, call))
    deps.failpoint("after_effect_before_result_commit")
    with deps.store.transaction():
        call = _record_execution(deps, op, call, execution)
    deps.failpoint("after_result_commit")
    return call


#: added to a handler's timeout before its attempt counts as over: clocks of two hosts differ
#: a little, and a handler is started a moment after its intent's time is taken
ATTEMPT_GRACE_S = 1.0


def _outwait_inherited_attempt(
    deps: Deps, op: OperationRecord, call: CallRecord, tool: ToolInfo
) -> None:
    """Wait until the handler a taken-over runner started for ``call`` is past its timeout.

    The runner whose lease expired may not be gone: frozen, or cut off from the store, it
    may still be in the handler, about to apply the effect. Asking the downstream now could
    hear "no record" and run it a second time; once the handler's timeout has passed, the
    answer is the outcome (a handler that outlives its timeout breaks its contract, as in
    any single run). A runner shown gone (its process ended on this host) is not waited for.
    """
    if not deps.taken_over or call.started_at is None:
        return
    timeout_ms = tool.timeout_ms or op.guards.tool_timeout_ms or 0
    over = parse_iso(call.started_at).timestamp() + timeout_ms / 1000 + ATTEMPT_GRACE_S
    left = over - deps.clock.now().timestamp()
    if left > 0:
        deps.sleep(left)


def _record_execution(
    deps: Deps, op: OperationRecord, call: CallRecord, execution: ToolExecution
) -> CallRecord:
    audit: dict[str, object] = {
        "status": execution.status.value,  # plain text: as stored, and hashed on the fast path
        "error": execution.error,
        "result_bytes": execution.result_bytes,
        "duration_ms": round(execution.duration_ms, 3),
    }
    done = deps.now_iso()
    match execution.status:
        case "ok":
            return call_to(
                deps,
                call,
                C.SUCCEEDED,
                None,
                model_result=envelopes.ok(execution.value),
                protected_audit=audit,
                finished_at=done,
            )
        case "tool_error":
            result = envelopes.error("tool_error", execution.error or "the tool reported an error")
            return call_to(
                deps,
                call,
                C.FAILED,
                "tool error",
                model_result=result,
                protected_audit=audit,
                finished_at=done,
            )
        case "timed_out":
            return _record_timeout(deps, op, call, execution, audit, done)
        case "result_too_large" | "invalid_result":
            result = envelopes.error(execution.status, execution.error or execution.status)
            return call_to(
                deps,
                call,
                C.FAILED,
                execution.status,
                model_result=result,
                protected_audit=audit,
                finished_at=done,
            )
        case "escalate":
            why = execution.error or "the tool asked for a person"
            result = envelopes.error("escalated", f"the call was stopped for a person: {why}")
            return call_to(
                deps,
                call,
                C.FAILED,
                "handler escalated",
                model_result=result,
                protected_audit=audit,
                finished_at=done,
            )
        case "failed" if _side_effecting(deps, call):
            # raised mid-flight (a dropped connection…): the effect may or may not have happened
            return _settle_unknown(
                deps, op, call, audit, "side effect interrupted", known_finished=True
            )
        case _:
            result = envelopes.error("tool_failed", "the tool failed; the operator has the details")
            return call_to(
                deps,
                call,
                C.FAILED,
                "handler raised",
                model_result=result,
                protected_audit=audit,
                finished_at=done,
            )


def _record_timeout(
    deps: Deps,
    op: OperationRecord,
    call: CallRecord,
    execution: ToolExecution,
    audit: dict[str, object],
    done: str,
) -> CallRecord:
    if not _side_effecting(deps, call):
        result = envelopes.error("timeout", execution.error or "the tool timed out")
        return call_to(
            deps,
            call,
            C.TIMED_OUT,
            "timed out",
            model_result=result,
            protected_audit=audit,
            finished_at=done,
        )
    # the abandoned handler may still apply the effect: "no record yet" proves nothing
    return _settle_unknown(deps, op, call, audit, "side effect timed out", known_finished=False)


def _unchanged(deps: Deps, call: CallRecord) -> bool:
    """The call's tool is still in the registry, as it was when the call was allowed."""
    tool = deps.toolbox.lookup(call.name)
    return tool is not None and tool.sha256 == call.tool_sha256


def _side_effecting(deps: Deps, call: CallRecord) -> bool:
    tool = deps.toolbox.lookup(call.name)
    return tool is not None and tool.side_effecting


def _settle_unknown(
    deps: Deps,
    op: OperationRecord,
    call: CallRecord,
    audit: dict[str, object],
    why: str,
    *,
    known_finished: bool,
) -> CallRecord:
    """A side effect whose handler did not answer: ask the downstream by the call's key.

    Confirmed: RECONCILED with the downstream's saved result. No record of the key, and the
    handler is known to have finished (it raised): the effect did not happen, FAILED. Anything
    else (a timed-out handler may still apply it; no reconcile handler; the lookup failed)
    cannot be told: UNKNOWN_OUTCOME, which stops the operation ESCALATED.
    """
    assert call.arguments is not None
    reconciled = deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
    if reconciled is not None and reconciled.status == "ok":
        return _record_reconciled(deps, op, call, reconciled)
    tool = deps.toolbox.lookup(call.name)
    answer: object = "no record of the key"
    if reconciled is not None:
        answer = {"status": reconciled.status.value, "error": reconciled.error}
    elif tool is None or not tool.has_reconcile:
        answer = "the tool has no reconcile handler"
    elif known_finished:
        result = envelopes.error(
            "tool_failed", "the tool failed and the downstream has no record of the request"
        )
        return call_to(
            deps,
            call,
            C.FAILED,
            f"{why}; the downstream has no record of the key",
            model_result=result,
            protected_audit={**audit, "reconcile": answer},
            finished_at=deps.now_iso(),
        )
    detail = {**audit, "reconcile": answer}
    return call_to(deps, call, C.UNKNOWN_OUTCOME, why, protected_audit=detail)


def _record_reconciled(
    deps: Deps, op: OperationRecord, call: CallRecord, reconciled: ToolExecution
) -> CallRecord:
    audit = {"reconciled": True, "status": reconciled.status.value, "error": reconciled.error}
    if reconciled.status == "ok":
        return call_to(
            deps,
            call,
            C.RECONCILED,
            "downstream confirmed the key",
            model_result=envelopes.ok(reconciled.value),
            protected_audit=audit,
            finished_at=deps.now_iso(),
        )
    if call.state is C.EXECUTING:
        return call_to(deps, call, C.UNKNOWN_OUTCOME, "reconcile failed", protected_audit=audit)
    return call


# -- operator decisions -------------------------------------------------------------------------


def force_continue(deps: Deps, op: OperationRecord, decided_by: str) -> OperationRecord:
    """An operator's audited decision to continue an ESCALATED operation.

    Calls whose outcome is unknown are not run again: they are reconciled once more by their
    key (RECONCILED if the downstream now confirms it), and the model is told the outcome of
    the rest is unknown. Calls that never ran are run; otherwise the results go back.
    """
    why = f"forced continue by {decided_by} (was ESCALATED: {op.reason})"
    calls = turn_calls(deps, op) if op.current_turn is not None else []
    # the downstream may know by now: ask once more by the same key before giving up on it
    answers = {
        call.call_id: deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
        for call in calls
        if call.state is C.UNKNOWN_OUTCOME and call.arguments is not None and _unchanged(deps, call)
    }
    with deps.store.transaction():
        deps.store.barrier()  # an operator's decision
        calls = turn_calls(deps, op) if op.current_turn is not None else []
        for call in calls:
            answer = answers.get(call.call_id)
            if call.state is C.UNKNOWN_OUTCOME and answer is not None and answer.status == "ok":
                _record_reconciled(deps, op, call, answer)
            elif call.state is C.UNKNOWN_OUTCOME:
                result = envelopes.outcome_unknown(
                    "the outcome of this call is unknown; an operator chose to continue "
                    "without running it again"
                )
                call_to(deps, call, C.FAILED, why, model_result=result)
        calls = turn_calls(deps, op) if op.current_turn is not None else []
        if any(c.state in (C.APPROVED, C.EXECUTING) for c in calls):
            return transition(deps, op, OpState.EXECUTING, why)
        return transition(deps, op, OpState.RESULTS_READY, why)
