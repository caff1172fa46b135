"""The call steps: VALIDATING, WAITING_APPROVAL, EXECUTING and RESULTS_READY.

A side-effecting call's intent (state EXECUTING, with its idempotency key) is committed
before its handler starts and its result right after it returns, so a crash in between
leaves a call that ``execute`` reconciles through the key instead of running it blindly.
"""

from __future__ import annotations

from toolloop_cli.audit.binding import check_result_set
from toolloop_cli.audit.canonical import CanonicalJSONError
from toolloop_cli.errors import ApprovalError, StoreError, TamperedStore
from toolloop_cli.limits import utf8_size
from toolloop_cli.strict_json import parse_arguments

from . import envelopes, guards, parallel
from .clock import iso, later, parse_iso
from .context import (
    Deps,
    call_binding_inputs,
    call_to,
    op_binding,
    save_counters,
    stop,
    transition,
)
from .ids import arguments_digest, idempotency_key, new_approval_id
from .records import ApprovalRecord, CallRecord, OperationRecord
from .states import CALL_HAS_RESULT, CallState, OpState
from .types import CallContext, ResultForModel, ToolExecution, ToolInfo

C = CallState


def _turn_calls(deps: Deps, op: OperationRecord) -> list[CallRecord]:
    if op.current_turn is None:
        raise StoreError(f"operation {op.operation_id} has no current turn")
    return deps.store.calls(op.operation_id, op.current_turn)


# -- VALIDATING --------------------------------------------------------------------------------


def validate(deps: Deps, op: OperationRecord) -> OperationRecord:
    """Check every proposal against the registry; decide run, wait, or answer with an error."""
    with deps.store.transaction():
        valid: list[tuple[CallRecord, ToolInfo]] = []
        for call in _turn_calls(deps, op):
            if call.state is not C.PROPOSED:
                continue
            checked = _check_call(deps, op, call)
            if checked is not None:
                valid.append(checked)
        stuck = _no_progress(deps, op, valid)
        if stuck is not None:
            return stop(deps, op, OpState.NO_PROGRESS, stuck)
        if valid:
            signature = guards.turn_signature([_intent(c) for c, _ in valid])
            recent = guards.remember_turn(op.counters.recent_turns, signature)
            # written by the transition that ends this step, in the same transaction
            op = op.model_copy(
                update={"counters": op.counters.model_copy(update={"recent_turns": recent})}
            )
        allowed: dict[str, int] = {}
        for call, tool in valid:
            if _reuse_done_intent(deps, op, call, tool):
                continue
            tripped = guards.tool_call_budget(op.guards, op.counters, tool.name, allowed)
            if tripped is not None:
                return stop(deps, op, OpState.BUDGET_EXHAUSTED, tripped)
            allowed[tool.name] = allowed.get(tool.name, 0) + 1
            if tool.needs_approval:
                _request_approval(deps, op, call, tool)
            else:
                call_to(deps, call, C.APPROVED, "allowed by policy (approval: never)")
        states = {c.state for c in _turn_calls(deps, op)}
        if C.WAITING_APPROVAL in states:
            return transition(deps, op, OpState.WAITING_APPROVAL, "waiting for approval")
        if C.APPROVED in states:
            return transition(deps, op, OpState.EXECUTING)
        return transition(deps, op, OpState.RESULTS_READY, "no call to run")


def _check_call(
    deps: Deps, op: OperationRecord, call: CallRecord
) -> tuple[CallRecord, ToolInfo] | None:
    """INVALID with an error envelope, or the call bound to its key, digest and tool revision."""
    tool = deps.toolbox.lookup(call.name)
    if tool is None:
        result = envelopes.unknown_tool(call.name)
        call_to(deps, call, C.INVALID, "unknown tool", model_result=result)
        return None
    call, problem = _argument_problem(deps, tool, call)
    if problem is not None:
        call_to(deps, call, C.INVALID, "invalid arguments", model_result=problem)
        return None
    assert call.arguments is not None
    key = idempotency_key(
        op.operation_id, tool.name, tool.schema_version, call.arguments, tool.key_fields
    )
    return _bind(deps, call, tool, key), tool


def _intent(call: CallRecord) -> str:
    return guards.intent_digest(call.name, call.arguments_sha256 or "")


def _no_progress(
    deps: Deps, op: OperationRecord, valid: list[tuple[CallRecord, ToolInfo]]
) -> str | None:
    """Why the model is going round in circles, or None: repeats past the limit, A,B,A,B."""
    for call, _ in valid:
        earlier = [
            c
            for c in deps.store.calls_with_intent(
                op.operation_id, call.name, call.arguments_sha256 or ""
            )
            if c.turn_idx != call.turn_idx
        ]
        if guards.repeated_too_often(len(earlier), op.guards):
            ids = ", ".join([c.call_id for c in earlier] + [call.call_id])
            return (
                f"no progress: {call.name} {call.raw_arguments} proposed "
                f"{len(earlier) + 1} times with the same arguments (calls {ids}); "
                f"limit no_progress_after={op.guards.no_progress_after}"
            )
    if valid:
        signature = guards.turn_signature([_intent(c) for c, _ in valid])
        if guards.cycle(op.counters.recent_turns, signature):
            names = ", ".join(c.name for c, _ in valid)
            return (
                f"no progress: the model alternates between the same two turns (A,B,A,B); "
                f"this turn repeats {names} from two turns ago"
            )
    return None


def _argument_problem(
    deps: Deps, tool: ToolInfo, call: CallRecord
) -> tuple[CallRecord, dict[str, object] | None]:
    """The call with its arguments parsed, and why they cannot run (an envelope) or None.

    The byte cap comes first: text over it is never parsed (parsing costs many times the
    text), and it stays on the call exactly as the model sent it.
    """
    size = utf8_size(call.raw_arguments)
    if size > tool.max_argument_bytes:
        return call, envelopes.arguments_too_large(size, tool.max_argument_bytes)
    if call.arguments is None and call.argument_error is None:  # the adapter left it as text
        arguments, error = parse_arguments(call.raw_arguments)
        call = call.model_copy(update={"arguments": arguments, "argument_error": error})
    if call.arguments is None:
        return call, envelopes.invalid_json(call.argument_error or "not a JSON object")
    try:  # 1e999999 parses as inf, 2**60 as an int: neither can be hashed, so neither can run
        arguments_digest(call.arguments)
    except CanonicalJSONError as exc:
        return call, envelopes.invalid_json(str(exc))
    problems = deps.toolbox.validate(tool.name, call.arguments)
    if problems:
        return call, envelopes.invalid_arguments(problems)
    return call, None


def _bind(deps: Deps, call: CallRecord, tool: ToolInfo, key: str) -> CallRecord:
    """Record the key, digest and tool revision on the call (state unchanged)."""
    new = call.model_copy(
        update={
            "idempotency_key": key,
            "arguments_sha256": arguments_digest(call.arguments),
            "tool_sha256": tool.sha256,
        }
    )
    deps.store.save_call(new, call.state)
    return new


def _reuse_done_intent(deps: Deps, op: OperationRecord, call: CallRecord, tool: ToolInfo) -> bool:
    """An intent already done is not done again: DUPLICATE, with the earlier result.

    A side effect is matched by its idempotency key (``duplicate_of``), a read by its tool and
    canonical arguments (``repeat_of``): the model gets what it already had, marked as such.
    """
    if not tool.side_effecting:
        return _reuse_read(deps, op, call)
    if call.idempotency_key is None:
        return False
    for earlier in deps.store.calls_with_key(op.operation_id, call.idempotency_key):
        if earlier.call_id != call.call_id and earlier.state in (C.SUCCEEDED, C.RECONCILED):
            result = dict(earlier.model_result or {})
            result["duplicate_of"] = earlier.call_id
            call_to(
                deps, call, C.DUPLICATE, f"same intent as {earlier.call_id}", model_result=result
            )
            return True
    return False


def _request_approval(deps: Deps, op: OperationRecord, call: CallRecord, tool: ToolInfo) -> None:
    now = deps.clock.now()
    approval = ApprovalRecord(
        approval_id=new_approval_id(),
        operation_id=op.operation_id,
        response_id=call.response_id,
        call_id=call.call_id,
        tool=tool.name,
        tenant=op.tenant,
        requested_by=op.subject,
        status="PENDING",
        arguments_sha256=call.arguments_sha256 or "",
        policy_revision=deps.toolbox.policy_revision,
        tool_sha256=tool.sha256,
        requested_at=deps.now_iso(),
        expires_at=iso(later(now, deps.toolbox.approval_ttl_s)),
    )
    deps.store.insert_approval(approval)
    call_to(deps, call, C.WAITING_APPROVAL, "approval: always", approval_id=approval.approval_id)
    deps.on_event("approval", {"approval_id": approval.approval_id, "call_id": call.call_id})


def _reuse_read(deps: Deps, op: OperationRecord, call: CallRecord) -> bool:
    for earlier in deps.store.calls_with_intent(
        op.operation_id, call.name, call.arguments_sha256 or ""
    ):
        if earlier.call_id != call.call_id and earlier.state is C.SUCCEEDED:
            result = dict(earlier.model_result or {})
            result["repeat_of"] = earlier.call_id
            call_to(deps, call, C.DUPLICATE, f"repeat of {earlier.call_id}", model_result=result)
            return True
    return False


# -- WAITING_APPROVAL ----------------------------------------------------------------------------


def collect_decisions(deps: Deps, op: OperationRecord) -> tuple[OperationRecord, str | None]:
    """Apply recorded decisions, re-validating each approved call; None when all are settled."""
    waiting: list[str] = []
    with deps.store.transaction():
        now = deps.clock.now()
        for call in _turn_calls(deps, op):
            if call.state is not C.WAITING_APPROVAL or call.approval_id is None:
                continue
            apr = deps.store.get_approval(call.approval_id)
            expired = now >= parse_iso(apr.expires_at)
            if apr.status == "PENDING" and not expired:
                _check_pin(deps, call, apr)
                waiting.append(apr.approval_id)
            elif apr.status == "PENDING" or (apr.status == "APPROVED" and expired):
                if apr.status == "PENDING":
                    deps.store.decide_approval(apr.approval_id, "EXPIRED", None, iso(now), None)
                call_to(
                    deps,
                    call,
                    C.EXPIRED,
                    "approval expired",
                    model_result=envelopes.expired(apr.expires_at),
                )
            elif apr.status == "DENIED":
                result = envelopes.denied(apr.decided_by, apr.reason)
                call_to(deps, call, C.DENIED, f"denied by {apr.decided_by}", model_result=result)
            elif apr.status == "APPROVED":
                _revalidate(deps, call, apr)
                call_to(deps, call, C.APPROVED, f"approved by {apr.decided_by}")
            else:
                raise TamperedStore(f"approval {apr.approval_id} has unknown status {apr.status!r}")
        if waiting:
            return op, "waiting for approval: " + ", ".join(waiting)
        states = {c.state for c in _turn_calls(deps, op)}
        if C.APPROVED in states:
            return transition(deps, op, OpState.EXECUTING, "decisions recorded"), None
        return transition(deps, op, OpState.RESULTS_READY, "no approved call to run"), None


def _revalidate(deps: Deps, call: CallRecord, apr: ApprovalRecord) -> None:
    """Everything an approval was given for must still hold when the call is about to run."""
    digest = arguments_digest(call.arguments)
    if digest != apr.arguments_sha256 or digest != call.arguments_sha256:
        raise TamperedStore(
            f"call {call.call_id}: stored arguments no longer match the approved digest "
            f"{apr.arguments_sha256}"
        )
    _check_pin(deps, call, apr)
    assert call.arguments is not None
    problems = deps.toolbox.validate(call.name, call.arguments)
    if problems:
        raise ApprovalError(f"call {call.call_id} no longer validates: {'; '.join(problems)}")


def _check_pin(deps: Deps, call: CallRecord, apr: ApprovalRecord) -> None:
    """The policy and the tool definition an approval is asked or given for must not change.

    Tool hashes are over the parsed, canonical tool entry, so a re-ordered or re-formatted
    registry passes; any change to the tool (schema, risk, handler, timeout…) or to the
    policy revision refuses the resume before anything runs.
    """
    if call.tool_sha256 != apr.tool_sha256:
        raise TamperedStore(
            f"call {call.call_id} and approval {apr.approval_id} name different tool revisions"
        )
    if apr.policy_revision != deps.toolbox.policy_revision:
        raise ApprovalError(
            f"approval {apr.approval_id} was requested under policy {apr.policy_revision}, "
            f"the registry now has {deps.toolbox.policy_revision}: the call was not run; "
            "restore the registry, or deny the approval and resume"
        )
    tool = deps.toolbox.lookup(call.name)
    if tool is None or tool.sha256 != apr.tool_sha256:
        change = "was removed" if tool is None else f"changed (now {tool.sha256[:19]}…)"
        raise ApprovalError(
            f"tool {call.name} {change} in the registry since approval {apr.approval_id} "
            "was requested: the call was not run; restore the registry, or deny the approval "
            "and resume"
        )


def _refuse_drift(deps: Deps, op: OperationRecord) -> None:
    """A call allowed under one tool definition never runs (or reconciles) under another."""
    for call in _turn_calls(deps, op):
        if call.state not in (C.APPROVED, C.EXECUTING):
            continue
        tool = deps.toolbox.lookup(call.name)
        if tool is None or tool.sha256 != call.tool_sha256:
            change = "was removed from" if tool is None else "changed in"
            raise ApprovalError(
                f"tool {call.name} {change} the registry since call {call.call_id} was "
                f"allowed under {call.tool_sha256}: nothing was run; restore the registry "
                "to continue"
            )


# -- EXECUTING ----------------------------------------------------------------------------------


def execute(deps: Deps, op: OperationRecord) -> OperationRecord:
    """Run every approved call of the turn; each intent and each result in its own commit."""
    _refuse_drift(deps, op)
    for call in _turn_calls(deps, op):
        if call.state is C.EXECUTING:  # left running by a crash: reconcile before anything new
            op = _recover_call(deps, op, call)
    approved = [c for c in _turn_calls(deps, op) if c.state is C.APPROVED]
    for batch in parallel.batches(approved, lambda c: _is_sequential(deps, c)):
        late = guards.past_deadline(op, deps.clock.now())
        if late is not None:
            with deps.store.transaction():
                return stop(deps, op, OpState.BUDGET_EXHAUSTED, late)
        op = _run_batch(deps, op, batch)
    with deps.store.transaction():
        op = deps.store.get_operation(op.operation_id)
        calls = _turn_calls(deps, op)
        unknown = [c.call_id for c in calls if c.state is C.UNKNOWN_OUTCOME]
        if unknown:
            reason = (
                "outcome unknown for call(s) " + ", ".join(unknown) + ": the side effect may have "
                "happened and the downstream could not confirm it; check it, then resume with "
                "--force-continue"
            )
            return transition(deps, op, OpState.ESCALATED, reason)
        escalations = [_escalation(c) for c in calls if _escalation(c)]
        if escalations:
            return transition(deps, op, OpState.ESCALATED, "; ".join(escalations))
        return transition(deps, op, OpState.RESULTS_READY)


def _is_sequential(deps: Deps, call: CallRecord) -> bool:
    tool = deps.toolbox.lookup(call.name)
    return tool is not None and tool.sequential


def _escalation(call: CallRecord) -> str:
    """The reason a handler gave when it asked for a person ('' when it did not)."""
    audit = call.protected_audit or {}
    if call.state is C.FAILED and audit.get("status") == "escalate":
        return f"{call.name} ({call.call_id}) asked for a person: {audit.get('error')}"
    return ""


def _run_batch(deps: Deps, op: OperationRecord, batch: list[CallRecord]) -> OperationRecord:
    """Commit the batch's intents, run the handlers concurrently, commit each result."""
    with deps.store.transaction():
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

    def work(call: CallRecord) -> ToolExecution:
        assert call.arguments is not None
        return deps.toolbox.execute(call.name, call.arguments, _context(deps, op, call))

    for call, execution in parallel.run_all(started, work, op.guards.max_parallel):
        deps.failpoint("after_effect_before_result_commit")
        with deps.store.transaction():
            _record_execution(deps, op, call, execution)
        deps.failpoint("after_result_commit")
    return op


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


def _recover_call(deps: Deps, op: OperationRecord, call: CallRecord) -> OperationRecord:
    """A call left EXECUTING by a crash: reconcile a side effect, re-run a read."""
    tool = deps.toolbox.lookup(call.name)
    assert call.arguments is not None
    if tool is not None and tool.side_effecting:
        reconciled = deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
        if reconciled is not None:
            with deps.store.transaction():
                _record_reconciled(deps, op, call, reconciled)
            deps.failpoint("after_recover_commit")
            return op
        if not tool.has_reconcile:
            with deps.store.transaction():
                call_to(
                    deps,
                    call,
                    C.UNKNOWN_OUTCOME,
                    "interrupted while running; the tool has no reconcile handler",
                    protected_audit={"interrupted": True},
                )
            deps.failpoint("after_recover_commit")
            return op
    with deps.store.transaction():
        call = call_to(deps, call, C.EXECUTING, "re-run: the downstream has no record of the key")
    deps.failpoint("after_intent_commit")
    assert call.arguments is not None
    execution = deps.toolbox.execute(call.name, call.arguments, _context(deps, op, call))
    deps.failpoint("after_effect_before_result_commit")
    with deps.store.transaction():
        _record_execution(deps, op, call, execution)
    deps.failpoint("after_result_commit")
    return op


def _record_execution(
    deps: Deps, op: OperationRecord, call: CallRecord, execution: ToolExecution
) -> None:
    audit: dict[str, object] = {
        "status": execution.status,
        "error": execution.error,
        "result_bytes": execution.result_bytes,
        "duration_ms": round(execution.duration_ms, 3),
    }
    done = deps.now_iso()
    match execution.status:
        case "ok":
            call_to(
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
            call_to(
                deps,
                call,
                C.FAILED,
                "tool error",
                model_result=result,
                protected_audit=audit,
                finished_at=done,
            )
        case "timed_out":
            _record_timeout(deps, op, call, execution, audit, done)
        case "result_too_large" | "invalid_result":
            result = envelopes.error(execution.status, execution.error or execution.status)
            call_to(
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
            call_to(
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
            _settle_unknown(deps, op, call, audit, "side effect interrupted", known_finished=True)
        case _:
            result = envelopes.error("tool_failed", "the tool failed; the operator has the details")
            call_to(
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
) -> None:
    if not _side_effecting(deps, call):
        result = envelopes.error("timeout", execution.error or "the tool timed out")
        call_to(
            deps,
            call,
            C.TIMED_OUT,
            "timed out",
            model_result=result,
            protected_audit=audit,
            finished_at=done,
        )
        return
    # the abandoned handler may still apply the effect: "no record yet" proves nothing
    _settle_unknown(deps, op, call, audit, "side effect timed out", known_finished=False)


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
) -> None:
    """A side effect whose handler did not answer: ask the downstream by the call's key.

    Confirmed: RECONCILED with the downstream's saved result. No record of the key, and the
    handler is known to have finished (it raised): the effect did not happen, FAILED. Anything
    else (a timed-out handler may still apply it; no reconcile handler; the lookup failed)
    cannot be told: UNKNOWN_OUTCOME, which stops the operation ESCALATED.
    """
    assert call.arguments is not None
    reconciled = deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
    if reconciled is not None and reconciled.status == "ok":
        _record_reconciled(deps, op, call, reconciled)
        return
    tool = deps.toolbox.lookup(call.name)
    answer: object = "no record of the key"
    if reconciled is not None:
        answer = {"status": reconciled.status, "error": reconciled.error}
    elif tool is None or not tool.has_reconcile:
        answer = "the tool has no reconcile handler"
    elif known_finished:
        result = envelopes.error(
            "tool_failed", "the tool failed and the downstream has no record of the request"
        )
        call_to(
            deps,
            call,
            C.FAILED,
            f"{why}; the downstream has no record of the key",
            model_result=result,
            protected_audit={**audit, "reconcile": answer},
            finished_at=deps.now_iso(),
        )
        return
    detail = {**audit, "reconcile": answer}
    call_to(deps, call, C.UNKNOWN_OUTCOME, why, protected_audit=detail)


def _record_reconciled(
    deps: Deps, op: OperationRecord, call: CallRecord, reconciled: ToolExecution
) -> None:
    audit = {"reconciled": True, "status": reconciled.status, "error": reconciled.error}
    if reconciled.status == "ok":
        call_to(
            deps,
            call,
            C.RECONCILED,
            "downstream confirmed the key",
            model_result=envelopes.ok(reconciled.value),
            protected_audit=audit,
            finished_at=deps.now_iso(),
        )
    elif call.state is C.EXECUTING:
        call_to(deps, call, C.UNKNOWN_OUTCOME, "reconcile failed", protected_audit=audit)


# -- RESULTS_READY ------------------------------------------------------------------------------


def send_back(deps: Deps, op: OperationRecord) -> OperationRecord:
    """Re-bind the turn's results to their calls, then queue the next model request.

    The results are a table keyed by (response_id, call_id) that must match the turn's calls
    one to one; each result's hash and binding are recomputed from the stored call and the
    operation (audit.binding) and compared with those committed with it and with the audit
    log. Any failure stops the operation ESCALATED before a request is sent: an integrity
    failure needs a person, not a retry (docs/audit.md).
    """
    calls = _turn_calls(deps, op)
    results = [
        ResultForModel(
            response_id=call.response_id,
            call_id=call.call_id,
            name=call.name,
            is_error=envelopes.is_error(call.model_result),
            content=call.model_result,
        )
        for call in calls
        if call.state in CALL_HAS_RESULT and call.model_result is not None
    ]
    problems = check_result_set(op_binding(op), [call_binding_inputs(c) for c in calls], results)
    problems += [
        f"the audit log holds another binding for call {c.call_id}"
        for c in calls
        if c.call_binding_sha256 is not None
        and deps.store.audited_binding(c.operation_id, c.call_id) != c.call_binding_sha256
    ]
    if problems:
        with deps.store.transaction():
            reason = "results not sent: integrity check failed: " + "; ".join(problems)
            return transition(deps, op, OpState.ESCALATED, reason)
    items = deps.adapter.result_items(results)
    with deps.store.transaction():
        deps.store.append_items(op.operation_id, items)
        return transition(deps, op, OpState.MODEL_REQUESTED, f"{len(calls)} result(s) sent back")


# -- operator decisions -------------------------------------------------------------------------


def force_continue(deps: Deps, op: OperationRecord, decided_by: str) -> OperationRecord:
    """An operator's audited decision to continue an ESCALATED operation.

    Calls whose outcome is unknown are not run again: they are reconciled once more by their
    key (RECONCILED if the downstream now confirms it), and the model is told the outcome of
    the rest is unknown. Calls that never ran are run; otherwise the results go back.
    """
    why = f"forced continue by {decided_by} (was ESCALATED: {op.reason})"
    calls = _turn_calls(deps, op) if op.current_turn is not None else []
    # the downstream may know by now: ask once more by the same key before giving up on it
    answers = {
        call.call_id: deps.toolbox.reconcile(call.name, call.arguments, _context(deps, op, call))
        for call in calls
        if call.state is C.UNKNOWN_OUTCOME and call.arguments is not None and _unchanged(deps, call)
    }
    with deps.store.transaction():
        calls = _turn_calls(deps, op) if op.current_turn is not None else []
        for call in calls:
            answer = answers.get(call.call_id)
            if call.state is C.UNKNOWN_OUTCOME and answer is not None and answer.status == "ok":
                _record_reconciled(deps, op, call, answer)
            elif call.state is C.UNKNOWN_OUTCOME:
                result = envelopes.error(
                    "outcome_unknown",
                    "the outcome of this call is unknown; an operator chose to continue "
                    "without running it again",
                )
                call_to(deps, call, C.FAILED, why, model_result=result)
        calls = _turn_calls(deps, op) if op.current_turn is not None else []
        if any(c.state in (C.APPROVED, C.EXECUTING) for c in calls):
            return transition(deps, op, OpState.EXECUTING, why)
        return transition(deps, op, OpState.RESULTS_READY, why)
