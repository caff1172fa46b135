"""VALIDATING: nothing the model proposes runs before it is checked, bound and allowed.

Each call is bound here to its idempotency key, argument digest and tool revision: the
identity that an approval, a recovery after a crash and the audit log all refer to later. A
call that cannot run is answered with an error envelope the model can act on, never raised.
"""

from __future__ import annotations

from toolloop_cli.audit.canonical import CanonicalJSONError
from toolloop_cli.strict_json import parse_arguments, utf8_size

from . import envelopes, guards
from .clock import iso, later
from .context import Deps, call_to, stop, transition, turn_calls
from .ids import arguments_digest, idempotency_key, new_approval_id
from .records import ApprovalRecord, CallRecord, OperationRecord
from .states import ApprovalStatus, CallState, OpState
from .types import ToolInfo

C = CallState


def validate(deps: Deps, op: OperationRecord) -> OperationRecord:
    """Check every proposal against the registry; decide run, wait, or answer with an error."""
    with deps.store.transaction():
        valid: list[tuple[CallRecord, ToolInfo]] = []
        for call in turn_calls(deps, op):
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
        states = {c.state for c in turn_calls(deps, op)}
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
    """An intent already done, or perhaps done, is not done again: DUPLICATE.

    A side effect is matched by its idempotency key (``duplicate_of``), a read by its tool and
    canonical arguments (``repeat_of``): the model gets what it already had, marked as such.
    An earlier attempt whose outcome is unknown (UNKNOWN_OUTCOME, or FAILED ``outcome_unknown``
    once an operator continued past it) may have happened: running the intent again could
    do it twice, so the model gets that attempt's ``outcome_unknown`` answer again. Asking for
    a person again instead would stop the operation on every re-proposal of an intent the
    operator already chose to continue past, and an approver would not be told the first
    attempt may have happened.
    """
    if not tool.side_effecting:
        return _reuse_read(deps, op, call)
    if call.idempotency_key is None:
        return False
    earlier_calls = [
        c
        for c in deps.store.calls_with_key(op.operation_id, call.idempotency_key)
        if (c.response_id, c.call_id) != (call.response_id, call.call_id)
    ]
    for earlier in earlier_calls:
        if earlier.state in (C.SUCCEEDED, C.RECONCILED):
            result = dict(earlier.model_result or {})
            result["duplicate_of"] = earlier.call_id
            call_to(
                deps, call, C.DUPLICATE, f"same intent as {earlier.call_id}", model_result=result
            )
            return True
    for earlier in earlier_calls:
        if _outcome_unknown(earlier):
            result = dict(earlier.model_result or envelopes.outcome_unknown(_UNKNOWN))
            result["duplicate_of"] = earlier.call_id
            why = f"same intent as {earlier.call_id}, whose outcome is unknown: not run again"
            call_to(deps, call, C.DUPLICATE, why, model_result=result)
            return True
    return False


_UNKNOWN = "the outcome of an earlier call with the same intent is unknown; it was not run again"


def _outcome_unknown(call: CallRecord) -> bool:
    """The call's side effect may or may not have happened (and was never settled)."""
    if call.state is C.UNKNOWN_OUTCOME:
        return True
    return call.state is C.FAILED and envelopes.code(call.model_result) == envelopes.OUTCOME_UNKNOWN


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
        status=ApprovalStatus.PENDING,
        arguments_sha256=call.arguments_sha256 or "",
        policy_revision=deps.toolbox.policy_revision,
        tool_sha256=tool.sha256,
        requested_at=deps.now_iso(),
        expires_at=iso(later(now, deps.toolbox.approval_ttl_s)),
        policy_sha256=deps.toolbox.policy_sha256,
    )
    deps.store.insert_approval(approval, deps.toolbox.policy_document)
    call_to(deps, call, C.WAITING_APPROVAL, "approval: always", approval_id=approval.approval_id)
    deps.on_event("approval", {"approval_id": approval.approval_id, "call_id": call.call_id})


def _reuse_read(deps: Deps, op: OperationRecord, call: CallRecord) -> bool:
    """A read done before (another call: a later turn may reuse the id) is not done again."""
    for earlier in deps.store.calls_with_intent(
        op.operation_id, call.name, call.arguments_sha256 or ""
    ):
        other = (earlier.response_id, earlier.call_id) != (call.response_id, call.call_id)
        if other and earlier.state is C.SUCCEEDED:
            result = dict(earlier.model_result or {})
            result["repeat_of"] = earlier.call_id
            call_to(deps, call, C.DUPLICATE, f"repeat of {earlier.call_id}", model_result=result)
            return True
    return False
