"""The library API behind ``approve``: record one human decision, or log why it was refused."""

from __future__ import annotations

from datetime import datetime

from toolloop_cli.engine.clock import SystemClock, iso, parse_iso
from toolloop_cli.engine.ports import Clock
from toolloop_cli.engine.records import ApprovalRecord
from toolloop_cli.errors import AlreadyDecided, ApprovalError, OperationNotFound
from toolloop_cli.store import Store
from toolloop_cli.wiring import cached_registry, failpoints

__all__ = ["approve"]


def approve(
    store: Store,
    approval_id: str,
    subject: str,
    *,
    deny: bool = False,
    reason: str | None = None,
    tenant: str | None = None,
    clock: Clock | None = None,
) -> ApprovalRecord:
    """Record one human decision. The first decision stands; nothing runs until ``resume``.

    Every refused decision (wrong approver, self-approval, expired, already decided, another
    tenant's approval) is written to the transition log as ``approval_refused``, in its own
    transaction, before the error is raised.
    """
    clock = clock or SystemClock()
    now = clock.now()
    try:
        apr = store.get_approval(approval_id, tenant)
    except OperationNotFound:
        _refused_elsewhere(store, approval_id, subject, tenant, iso(now))
        raise
    try:
        _check_decision(store, apr, subject, deny, now)
        with store.transaction():
            status = "DENIED" if deny else "APPROVED"
            store.decide_approval(approval_id, status, subject, iso(now), reason)
            store.log_transition(
                apr.operation_id, "approval", "PENDING", status, iso(now), reason, apr.call_id
            )
        failpoints.failpoint("after_approval_commit")
    except ApprovalError as exc:
        _log_refusal(store, apr, f"{subject} (tenant {tenant or apr.tenant}): {exc}", iso(now))
        raise
    return store.get_approval(approval_id)


def _check_decision(
    store: Store, apr: ApprovalRecord, subject: str, deny: bool, now: datetime
) -> None:
    """Why ``subject`` may not decide ``apr`` now (an ``ApprovalError``), or nothing."""
    op = store.get_operation(apr.operation_id)
    policy = cached_registry(op.registry_path).policy
    if subject not in policy.approvers:
        allowed = ", ".join(policy.approvers) or "nobody"
        raise ApprovalError(
            f"{subject} may not decide approvals under policy {policy.revision} "
            f"(approvers: {allowed})"
        )
    if policy.forbid_self_approval and subject == apr.requested_by:
        raise ApprovalError(
            f"{subject} started operation {apr.operation_id} and may not approve its own calls "
            f"(policy {policy.revision} forbids self-approval)"
        )
    if apr.status != "PENDING":
        raise AlreadyDecided(
            f"approval {apr.approval_id} is already {apr.status}"
            + (f" by {apr.decided_by}" if apr.decided_by else "")
        )
    if not deny and now >= parse_iso(apr.expires_at):
        raise ApprovalError(
            f"approval {apr.approval_id} expired at {apr.expires_at}; resume the operation to "
            "tell the model, which may propose the call again"
        )


def _log_refusal(store: Store, apr: ApprovalRecord, why: str, at: str) -> None:
    """The audited record of a refused decision (the approval itself is unchanged)."""
    current = store.get_approval(apr.approval_id).status
    with store.transaction():
        store.log_transition(
            apr.operation_id, "approval_refused", current, current, at, why, apr.call_id
        )


def _refused_elsewhere(
    store: Store, approval_id: str, subject: str, tenant: str | None, at: str
) -> None:
    """A decision on another tenant's approval is refused as unknown, and logged on its owner."""
    if tenant is None:
        return  # no such approval at all: nothing to attach the record to
    try:
        apr = store.get_approval(approval_id)
    except OperationNotFound:
        return
    why = f"{subject} (tenant {tenant}): approval belongs to another tenant"
    _log_refusal(store, apr, why, at)
