"""VALIDATING: nothing the model proposes runs before it is checked, bound and allowed.

Each call is bound here to its idempotency key, argument digest and tool revision: the
identity that an approval, a recovery after a crash and the audit log all refer to later. A
call that cannot run is answered with an error envelope the model can act on, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def validate(
    deps: Deps, op: OperationRecord, calls: list[CallRecord] | None = None
) -> tuple[OperationRecord, list[CallRecord] | None]:
    """Check every proposal against the registry; decide run, wait, or answer with an error.

    ``calls`` are the turn's calls if the caller has them (else they are read). The earlier
    calls a turn is compared with (same key or intent) are read in one statement.
    """
    with deps.store.transaction():
        current = {c.seq: c for c in (calls if calls is not None else turn_calls(deps, op))}
        proposed = [_prepare(deps, op, c) for c in current.values() if c.state is C.PROPOSED]
        earlier = deps.store.earlier_calls(
            op.operation_id,
            op.current_turn if op.current_turn is not None else 0,
            [(p.call.name, p.digest) for p in proposed if p.digest is not None],
            [p.key for p in proposed if p.key is not None],
        )
        valid: list[tuple[CallRecord, ToolInfo]] = []
        for prepared in proposed:
            checked = _check_call(deps, prepared)
            current[checked.seq] = checked
            if checked.state is C.PROPOSED and prepared.tool is not None:
                valid.append((checked, prepared.tool))
        # a valid call's binding is written with the move it makes next, or before a stop
        signature = guards.turn_signature([_intent(c) for c, _ in valid]) if valid else None
        stuck = _no_progress(op, valid, earlier, signature)
        if stuck is not None:
            _save_bindings(deps, [c for c, _ in valid])
            return stop(deps, op, OpState.NO_PROGRESS, stuck), None
        if signature is not None:
            recent = guards.remember_turn(op.counters.recent_turns, signature)
            # written by the transition that ends this step, in the same transaction
            op = op.model_copy(
                update={"counters": op.counters.model_copy(update={"recent_turns": recent})}
            )
        allowed: dict[str, int] = {}
        for call, tool in valid:
            reused = _reuse_done_intent(deps, call, tool, earlier)
            if reused is not None:
                current[call.seq] = reused
                continue
            tripped = guards.tool_call_budget(op.guards, op.counters, tool.name, allowed)
            if tripped is not None:
                _save_bindings(deps, [c for c, _ in valid if current[c.seq] is c])
                return stop(deps, op, OpState.BUDGET_EXHAUSTED, tripped), None
            allowed[tool.name] = allowed.get(tool.name, 0) + 1
            if tool.needs_approval:
                current[call.seq] = _request_approval(deps, op, call, tool)
            else:
                current[call.seq] = call_to(
                    deps, call, C.APPROVED, "allowed by policy (approval: never)"
                )
        after = sorted(current.values(), key=lambda c: c.seq)
        states = {c.state for c in after}
        if C.WAITING_APPROVAL in states:
            target, why = OpState.WAITING_APPROVAL, "waiting for approval"
            return transition(deps, op, target, why), after
        if C.APPROVED in states:
            return transition(deps, op, OpState.EXECUTING), after
        return transition(deps, op, OpState.RESULTS_READY, "no call to run"), after


@dataclass(frozen=True)
class _Prepared:
    """A proposal checked against the registry without the store: its tool, its parsed
    arguments, why it cannot run (an error envelope) or its key and argument digest."""

    call: CallRecord
    tool: ToolInfo | None
    problem: dict[str, object] | None
    key: str | None = None
    digest: str | None = None


def _prepare(deps: Deps, op: OperationRecord, call: CallRecord) -> _Prepared:
    tool = deps.toolbox.lookup(call.name)
    if tool is None:
        return _Prepared(call, None, envelopes.unknown_tool(call.name))
    call, problem, digest = _argument_problem(deps, tool, call)
    if problem is not None:
        return _Prepared(call, tool, problem)
    assert call.arguments is not None
    key = idempotency_key(
        op.operation_id, tool.name, tool.schema_version, call.arguments, tool.key_fields
    )
    return _Prepared(call, tool, None, key, digest)


def _check_call(deps: Deps, prepared: _Prepared) -> CallRecord:
    """INVALID with an error envelope, or the call bound to its key, digest and tool revision."""
    call = prepared.call
    if prepared.tool is None:
        return call_to(deps, call, C.INVALID, "unknown tool", model_result=prepared.problem)
    if prepared.problem is not None:
        why = "invalid arguments"
        return call_to(deps, call, C.INVALID, why, model_result=prepared.problem)
    assert prepared.key is not None and prepared.digest is not None
    return _bind(call, prepared.tool, prepared.key, prepared.digest)


def _intent(call: CallRecord) -> str:
    return guards.intent_digest(call.name, call.arguments_sha256 or "")


def _no_progress(
    op: OperationRecord,
    valid: list[tuple[CallRecord, ToolInfo]],
    earlier: list[CallRecord],
    signature: str | None,
) -> str | None:
    """Why the model is going round in circles, or None: repeats past the limit, A,B,A,B
    (``signature``: the turn's, when it has valid calls)."""
    for call, _ in valid:
        same = [c for c in earlier if _same_intent(c, call)]
        if guards.repeated_too_often(len(same), op.guards):
            ids = ", ".join([c.call_id for c in same] + [call.call_id])
            return (
                f"no progress: {call.name} {call.raw_arguments} proposed "
                f"{len(same) + 1} times with the same arguments (calls {ids}); "
                f"limit no_progress_after={op.guards.no_progress_after}"
            )
    if signature is not None:
        if guards.cycle(op.counters.recent_turns, signature):
            names = ", ".join(c.name for c, _ in valid)
            return (
                f"no progress: the model alternates between the same two turns (A,B,A,B); "
                f"this turn repeats {names} from two turns ago"
            )
    return None


def _same_intent(earlier: CallRecord, call: CallRecord) -> bool:
    """The same tool with the same canonical arguments, in another turn."""
    return (
        earlier.turn_idx != call.turn_idx
        and earlier.name == call.name
        and earlier.arguments_sha256 == call.arguments_sha256
    )


def _argument_problem(
    deps: Deps, tool: ToolInfo, call: CallRecord
) -> tuple[CallRecord, dict[str, object] | None, str | None]:
    """The call with its arguments parsed; why they cannot run (an envelope) or None; and
    their digest when they can be hashed.

    The byte cap comes first: text over it is never parsed (parsing costs many times the
    text), and it stays on the call exactly as the model sent it.
    """
    size = utf8_size(call.raw_arguments)
    if size > tool.max_argument_bytes:
        return call, envelopes.arguments_too_large(size, tool.max_argument_bytes), None
    if call.arguments is None and call.argument_error is None:  # the adapter left it as text
        arguments, error = parse_arguments(call.raw_arguments)
        call = call.model_copy(update={"arguments": arguments, "argument_error": error})
    if call.arguments is None:
        return call, envelopes.invalid_json(call.argument_error or "not a JSON object"), None
    try:  # 1e999999 parses as inf, 2**60 as an int: neither can be hashed, so neither can run
        digest = arguments_digest(call.arguments)
    except CanonicalJSONError as exc:
        return call, envelopes.invalid_json(str(exc)), None
    problems = deps.toolbox.validate(tool.name, call.arguments)
    if problems:
        return call, envelopes.invalid_arguments(problems), digest
    return call, None, digest


def _bind(call: CallRecord, tool: ToolInfo, key: str, digest: str) -> CallRecord:
    """The call with its key, digest and tool revision (state unchanged; not yet written)."""
    return call.model_copy(
        update={"idempotency_key": key, "arguments_sha256": digest, "tool_sha256": tool.sha256}
    )


def _save_bindings(deps: Deps, bound: list[CallRecord]) -> None:
    """Write the binding of calls that make no move here (the step stops before)."""
    for call in bound:
        deps.store.save_call(call, call.state)


def _reuse_done_intent(
    deps: Deps, call: CallRecord, tool: ToolInfo, earlier: list[CallRecord]
) -> CallRecord | None:
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
        return _reuse_read(deps, call, earlier)
    if call.idempotency_key is None:
        return None
    same_key = [c for c in earlier if c.idempotency_key == call.idempotency_key]
    for before in same_key:
        if before.state in (C.SUCCEEDED, C.RECONCILED):
            result = dict(before.model_result or {})
            result["duplicate_of"] = before.call_id
            why = f"same intent as {before.call_id}"
            return call_to(deps, call, C.DUPLICATE, why, model_result=result)
    for before in same_key:
        if _outcome_unknown(before):
            result = dict(before.model_result or envelopes.outcome_unknown(_UNKNOWN))
            result["duplicate_of"] = before.call_id
            why = f"same intent as {before.call_id}, whose outcome is unknown: not run again"
            return call_to(deps, call, C.DUPLICATE, why, model_result=result)
    return None


_UNKNOWN = "the outcome of an earlier call with the same intent is unknown; it was not run again"


def _outcome_unknown(call: CallRecord) -> bool:
    """The call's side effect may or may not have happened (and was never settled)."""
    if call.state is C.UNKNOWN_OUTCOME:
        return True
    return call.state is C.FAILED and envelopes.code(call.model_result) == envelopes.OUTCOME_UNKNOWN


def _request_approval(
    deps: Deps, op: OperationRecord, call: CallRecord, tool: ToolInfo
) -> CallRecord:
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
    waiting = call_to(
        deps, call, C.WAITING_APPROVAL, "approval: always", approval_id=approval.approval_id
    )
    event: dict[str, object] = {"approval_id": approval.approval_id, "call_id": call.call_id}
    deps.store.after_commit(lambda: deps.on_event("approval", event))
    return waiting


def _reuse_read(deps: Deps, call: CallRecord, earlier: list[CallRecord]) -> CallRecord | None:
    for before in earlier:
        if (
            before.name == call.name
            and before.arguments_sha256 == call.arguments_sha256
            and (before.response_id, before.call_id) != (call.response_id, call.call_id)
            and before.state is C.SUCCEEDED
        ):
            result = dict(before.model_result or {})
            result["repeat_of"] = before.call_id
            why = f"repeat of {before.call_id}"
            return call_to(deps, call, C.DUPLICATE, why, model_result=result)
    return None
