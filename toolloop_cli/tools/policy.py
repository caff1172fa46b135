"""The approval rules, in one place: who may decide, until when, and under which policy.

``approve``, ``resume --force-continue``, the engine's pin check (through the ``Toolbox``)
and ``replay --approve-as`` all ask these functions, so a rule is written once and worded
once. Each returns why something is refused, or None when it is allowed; the caller decides
what a refusal means (an error, a logged refusal, a divergence).

An approval pins its policy by revision and by ``Policy.policy_sha256`` (the canonical
block, every field). It is decided against that pinned policy, and a registry whose policy
block changed since, whether or not its revision did, may not approve or run it.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from toolloop_cli.engine.clock import MAX_SPAN_S, parse_iso
from toolloop_cli.tools.registry import Policy

__all__ = [
    "expiry_problem",
    "may_decide",
    "may_force_continue",
    "pin_problem",
    "policy_document",
    "policy_from_document",
]


def may_decide(policy: Policy, subject: str, requested_by: str) -> str | None:
    """Why ``subject`` may not decide an approval requested by ``requested_by``.

    Names are compared exactly (no trimming, no case folding): they are the labels the
    policy lists, not identities toolloop could check.
    """
    if subject not in policy.approvers:
        return (
            f"{subject} may not decide approvals under policy {policy.revision} "
            f"(approvers: {_listed(policy)})"
        )
    if policy.forbid_self_approval and subject == requested_by:
        return (
            f"{subject} started the operation and may not approve its own calls "
            f"(policy {policy.revision} forbids self-approval)"
        )
    return None


def may_force_continue(policy: Policy, subject: str) -> str | None:
    """Why ``subject`` may not continue an ESCALATED operation."""
    if subject not in policy.approvers:
        return (
            f"{subject} may not continue escalated operations under policy "
            f"{policy.revision} (approvers: {_listed(policy)})"
        )
    return None


def expiry_problem(approval_id: str, expires_at: str, now: datetime) -> str | None:
    """A decision is allowed while ``now < expires_at``, approve and deny alike."""
    if now < parse_iso(expires_at):
        return None
    return f"approval {approval_id} expired at {expires_at}"


def pin_problem(
    pinned_revision: str,
    pinned_sha256: str | None,
    current_revision: str,
    current_sha256: str | None,
    *,
    pinned: str = "was requested",
) -> str | None:
    """Why something pinned to one policy may not be used under the current one.

    The revision is compared first; then the hash, when both sides have one. A pin without
    a hash (an approval stored before the hash was pinned) is checked by revision only.
    ``pinned`` words what happened under the pinned policy ("was requested", "started").
    """
    if pinned_revision != current_revision:
        return f"{pinned} under policy {pinned_revision}, the registry now has {current_revision}"
    if pinned_sha256 is None or current_sha256 is None or pinned_sha256 == current_sha256:
        return None
    return (
        f"{pinned} under policy {pinned_revision}, and the policy changed without a revision "
        f"bump since (pinned {_short(pinned_sha256)}, the registry now has "
        f"{_short(current_sha256)})"
    )


def policy_document(policy: Policy) -> dict[str, Any]:
    """The canonical policy block ``Policy.policy_sha256`` hashes (stored with a pin)."""
    return {**asdict(policy), "approvers": list(policy.approvers)}


def policy_from_document(document: object) -> Policy:
    """The ``Policy`` a stored document describes; ``ValueError`` when it describes none."""
    if not isinstance(document, dict) or set(document) != _FIELDS:
        raise ValueError(f"not a policy document: {str(document)[:120]}")
    revision, approvers = document["revision"], document["approvers"]
    ttl, forbid = document["approval_ttl_s"], document["forbid_self_approval"]
    if not (
        isinstance(revision, str)
        and isinstance(approvers, list)
        and all(isinstance(a, str) for a in approvers)
        and type(ttl) is int
        and 0 < ttl <= MAX_SPAN_S
        and isinstance(forbid, bool)
    ):
        raise ValueError(f"not a policy document: {str(document)[:120]}")
    return Policy(revision, tuple(approvers), ttl, forbid)


_FIELDS = frozenset(f.name for f in fields(Policy))


def _listed(policy: Policy) -> str:
    return ", ".join(policy.approvers) or "nobody"


def _short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 19 else digest
