"""WAITING_APPROVAL: a person's decision applies only to the call it was given for.

An approval is pinned to the call's argument digest, the tool revision and the policy (its
revision and the hash of its block; the toolbox applies the rule). Any of them changing while
it waits refuses the resume before anything runs, so a decision is never carried over to a
call the person did not see, nor made under a policy it was not requested under.
"""

from __future__ import annotations

from datetime import datetime

from toolloop_cli.errors import ApprovalError, RegistryDrift, TamperedStore

from . import envelopes
from .clock import iso, parse_iso
from .context import Deps, call_to, transition, turn_calls
from .ids import arguments_digest
from .records import ApprovalRecord, CallRecord, OperationRecord
from .states import ApprovalStatus, CallState, OpState

C = CallState


def collect_decisions(
    deps: Deps, op: OperationRecord, calls: list[CallRecord] | None = None
) -> tuple[OperationRecord, list[CallRecord], str | None]:
    """Apply recorded decisions, re-validating each approved call.

    Returns the operation, the turn's calls as now stored, and why it still waits (None when
    every decision is in).
    """
    waiting: list[str] = []
    with deps.store.transaction():
        now = deps.clock.now()
        # the calls' rows change only here; their approvals are read now, decisions included
        current = calls if calls is not None else turn_calls(deps, op)
        if not any(c.state is C.WAITING_APPROVAL for c in current):
            # the operation waits only while a call of its turn does. None does: a call was
            # moved out of the turn around toolloop. Every call of the operation is read
            # first, so one that no longer reads as a call is refused by name before anything
            # is written; a readable one is escalated when the results would go back
            # (``sending``), never skipped. A call deleted outside toolloop leaves its
            # approval naming nothing: refused, never taken as a turn with nothing to run.
            _check_approved_calls_exist(deps, op, deps.store.calls(op.operation_id))
        after: list[CallRecord] = []
        for call in current:
            after.append(_decided(deps, call, now, waiting))
        if waiting:
            return op, after, "waiting for approval: " + ", ".join(waiting)
        states = {c.state for c in after}
        if C.APPROVED in states:
            return transition(deps, op, OpState.EXECUTING, "decisions recorded"), after, None
        return transition(deps, op, OpState.RESULTS_READY, "no approved call to run"), after, None


def _check_approved_calls_exist(deps: Deps, op: OperationRecord, calls: list[CallRecord]) -> None:
    """Every approval of ``op`` names one of its stored calls."""
    held = {(c.response_id, c.call_id) for c in calls}
    for apr in deps.store.approvals(op.operation_id):
        if (apr.response_id, apr.call_id) not in held:
            raise TamperedStore(
                f"approval {apr.approval_id} of operation {op.operation_id} names call "
                f"{apr.call_id} of response {apr.response_id}, which the store does not "
                "hold: written around toolloop (see toolloop verify)"
            )


def _decided(deps: Deps, call: CallRecord, now: datetime, waiting: list[str]) -> CallRecord:
    """The call with its approval's decision applied (or left waiting, its id in ``waiting``)."""
    if call.state is not C.WAITING_APPROVAL or call.approval_id is None:
        return call
    apr = deps.store.get_approval(call.approval_id)
    if (apr.operation_id, apr.response_id, apr.call_id) != (
        call.operation_id,
        call.response_id,
        call.call_id,
    ):
        # an approval moved to another call (or operation) outside toolloop: its decision is
        # not this call's, and the call would otherwise wait on it for ever
        raise TamperedStore(
            f"call {call.call_id} of operation {call.operation_id} waits on approval "
            f"{apr.approval_id}, which names call {apr.call_id} of response "
            f"{apr.response_id} of operation {apr.operation_id}: written around toolloop "
            "(see toolloop verify)"
        )
    expired = now >= parse_iso(apr.expires_at)
    if apr.status is ApprovalStatus.PENDING and not expired:
        _check_pin(deps, call, apr)
        waiting.append(apr.approval_id)
        return call
    # a decision is acted on only as it was recorded, and on the call as it was recorded: a
    # row written around toolloop (an expiry moved, a call's idempotency key changed) runs
    # nothing, and is never written again as if it were toolloop's own
    deps.store.check_approval_logged(apr.approval_id)
    deps.store.check_call_logged(call)
    if apr.status is ApprovalStatus.PENDING or (apr.status is ApprovalStatus.APPROVED and expired):
        if apr.status is ApprovalStatus.PENDING:
            deps.store.decide_approval(
                apr.approval_id, ApprovalStatus.EXPIRED, None, iso(now), None
            )
        result = envelopes.expired(apr.expires_at)
        return call_to(deps, call, C.EXPIRED, "approval expired", model_result=result)
    if apr.status is ApprovalStatus.DENIED:
        result = envelopes.denied(apr.decided_by, apr.reason)
        return call_to(deps, call, C.DENIED, f"denied by {apr.decided_by}", model_result=result)
    if apr.status is ApprovalStatus.APPROVED:
        _revalidate(deps, call, apr)
        return call_to(deps, call, C.APPROVED, f"approved by {apr.decided_by}")
    raise TamperedStore(f"approval {apr.approval_id} has unknown status {apr.status!r}")


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

    Tool and policy hashes are over the parsed, canonical entries, so a re-ordered or
    re-formatted registry passes; any change to the tool (schema, risk, handler, timeout…)
    or to the policy block (approvers, self-approval, TTL, revision) refuses the resume
    before anything runs.
    """
    if call.tool_sha256 != apr.tool_sha256:
        raise TamperedStore(
            f"call {call.call_id} and approval {apr.approval_id} name different tool revisions"
        )
    changed = deps.toolbox.pin_problem(apr.policy_revision, apr.policy_sha256)
    if changed is not None:
        raise ApprovalError(
            f"approval {apr.approval_id} {changed}: the call was not run; "
            "restore the registry, or deny the approval and resume"
        )
    tool = deps.toolbox.lookup(call.name)
    if tool is None or tool.sha256 != apr.tool_sha256:
        change = "was removed" if tool is None else f"changed (now {tool.sha256[:19]}…)"
        raise RegistryDrift(
            f"tool {call.name} {change} in the registry since approval {apr.approval_id} "
            "was requested: the call was not run; restore the registry, or deny the approval "
            "and resume"
        )
