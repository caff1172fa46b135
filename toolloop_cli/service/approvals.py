"""The library API behind ``approve``: record one human decision, or log why it was refused."""

from __future__ import annotations

from datetime import datetime

from toolloop_cli.engine.clock import SystemClock, iso
from toolloop_cli.engine.ports import Clock
from toolloop_cli.engine.records import ApprovalRecord
from toolloop_cli.engine.states import ApprovalStatus
from toolloop_cli.errors import AlreadyDecided, ApprovalError, OperationNotFound, TamperedStore
from toolloop_cli.store import Store
from toolloop_cli.tools import policy as policy_rules
from toolloop_cli.tools.registry import Policy
from toolloop_cli.wiring import cached_registry, failpoints

from .names import check_name

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

    Every refused decision (wrong approver, self-approval, expired, already decided, a policy
    changed since the request, another tenant's approval) is written to the transition log
    as ``approval_refused``, in its own transaction, before the error is raised.
    """
    check_name(subject, "approver")
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
            # decided only as it was requested: a row written around toolloop (an expiry
            # moved, a digest changed) is refused, not carried into the log by the decision
            store.check_approval_logged(approval_id)
            status = ApprovalStatus.DENIED if deny else ApprovalStatus.APPROVED
            store.decide_approval(approval_id, status, subject, iso(now), reason)
            store.log_transition(
                apr.operation_id,
                "approval",
                "PENDING",
                status,
                iso(now),
                reason,
                apr.call_id,
                apr.response_id,
            )
        failpoints.failpoint("after_approval_commit")
    except ApprovalError as exc:
        _log_refusal(store, apr, f"{subject} (tenant {tenant or apr.tenant}): {exc}", iso(now))
        raise
    return store.get_approval(approval_id)


def _check_decision(
    store: Store, apr: ApprovalRecord, subject: str, deny: bool, now: datetime
) -> None:
    """Why ``subject`` may not decide ``apr`` now (an ``ApprovalError``), or nothing.

    The decision is made against the policy the approval was requested under (its pinned
    block). Approving also needs the registry's current policy to be that one: a policy
    changed since, with or without a new revision, could not run the call. A denial runs
    nothing, so it stays possible under a changed (or unreadable) registry. An approval
    stored before the hash was pinned is decided against the current policy, as before.
    """
    current: Policy | None = None
    if not deny and apr.status is ApprovalStatus.PENDING:
        current = _current(store, apr)
        changed = policy_rules.pin_problem(
            apr.policy_revision, apr.policy_sha256, current.revision, current.policy_sha256
        )
        if changed is not None:
            raise ApprovalError(
                f"approval {apr.approval_id} {changed}: nothing was decided; restore the "
                "registry, or deny the approval"
            )
    policy = _pinned(store, apr) or current or _current(store, apr)
    refused = policy_rules.may_decide(policy, subject, apr.requested_by)
    if refused is not None:
        raise ApprovalError(refused)
    if apr.status is not ApprovalStatus.PENDING:
        raise AlreadyDecided(
            f"approval {apr.approval_id} is already {apr.status}"
            + (f" by {apr.decided_by}" if apr.decided_by else "")
        )
    expired = policy_rules.expiry_problem(apr.approval_id, apr.expires_at, now)
    if expired is not None:
        raise ApprovalError(
            f"{expired}; resume the operation to tell the model, which may propose the call again"
        )


def _current(store: Store, apr: ApprovalRecord) -> Policy:
    """The policy of the operation's registry file as it is now (parsed, nothing imported:
    a decision needs the policy only), at the path the audit log vouches for."""
    path = store.get_logged_operation(apr.operation_id).registry_path
    return cached_registry(path, import_handlers=False).policy


def _pinned(store: Store, apr: ApprovalRecord) -> Policy | None:
    """The policy ``apr`` was requested under; None for an approval stored before the pin."""
    if apr.policy_sha256 is None:
        return None
    try:
        return policy_rules.policy_from_document(store.pinned_policy(apr.policy_sha256))
    except ValueError as exc:
        raise TamperedStore(f"approval {apr.approval_id}: its pinned policy is {exc}") from None


def _log_refusal(store: Store, apr: ApprovalRecord, why: str, at: str) -> None:
    """The audited record of a refused decision (the approval itself is unchanged)."""
    current = store.get_approval(apr.approval_id).status
    with store.transaction():
        store.log_transition(
            apr.operation_id,
            "approval_refused",
            current,
            current,
            at,
            why,
            apr.call_id,
            apr.response_id,
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
