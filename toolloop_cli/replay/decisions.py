"""How a replay steps an operation when nobody is there: its clock and its approvals.

A replay has no human, and a cassette is not one: what it says was decided authorises
nothing that runs. With results from the registry's handlers (``live``), a pending approval
is decided only by ``--approve-as SUBJECT``, the operator's explicit decision, checked like
``approve`` (a listed approver, not the run's own subject when the policy forbids it, not
after expiry); without it the replay waits for ``toolloop approve`` like any run. With results
from the recording (``recorded``, nothing runs), it is decided as the recording's metadata
says, else as ``--approve-as``, else, for a call whose result the recording holds, as the
subject ``replay``. A refused decision is reported as a divergence and the approval stays
pending. Every decision is written like a human one, and the transition log says where it
came from.

The engine's clock stands still during a replay and moves forward only to moments the
metadata recorded (approval requests, decisions, expiries), so results that quote a time,
such as an expiry message, come out as they were recorded. A recorded expiry is time, not a
decision: it happens in both modes, and nothing runs because of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from toolloop_cli.engine import loop
from toolloop_cli.engine.clock import iso, parse_iso
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ports import Clock
from toolloop_cli.engine.records import ApprovalRecord, OperationRecord
from toolloop_cli.engine.states import ApprovalStatus, OpState, is_terminal
from toolloop_cli.errors import ToolloopError
from toolloop_cli.replay.divergence import Divergence
from toolloop_cli.store import Store
from toolloop_cli.tools import policy as policy_rules
from toolloop_cli.tools.registry import Policy

__all__ = ["REPLAY_SUBJECT", "Decisions", "ReplayClock", "drive"]

#: Who decides an approval that nobody decided, when nothing runs (recorded results).
REPLAY_SUBJECT = "replay"
_MAX_STEPS = 100_000


class ReplayClock:
    """The engine's clock in a replay: it stands still and only moves forward, when told.

    ``recorded_start`` set: the clock starts at ``start`` instead of the recording's start,
    and every recorded moment is moved by the same amount (intervals are kept).
    """

    def __init__(self, start: datetime, recorded_start: datetime | None = None) -> None:
        self.moment = start
        self.shift = start - recorded_start if recorded_start is not None else timedelta(0)

    def now(self) -> datetime:
        return self.moment

    def move_to(self, moment: datetime) -> None:
        """Forward to a moment the recording names (never back)."""
        self.moment = max(self.moment, moment + self.shift)


@dataclass(frozen=True)
class Decisions:
    """What a replay may decide approvals from."""

    #: "live" (handlers run: only ``approve_as`` decides) or "recorded" (nothing runs)
    mode: str
    #: (turn, call id) → the approval the recording's metadata holds for that call (a
    #: provider may give every turn's calls the same ids: the turn tells them apart)
    recorded: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    policy: Policy | None = None
    approve_as: str | None = None
    #: (turn, call id) of the calls that may be approved as ``replay``: results recorded,
    #: nothing runs
    recorded_results: frozenset[tuple[int, str]] = frozenset()


def drive(
    store: Store, deps: Deps, op_id: str, decisions: Decisions
) -> tuple[str | None, list[Divergence]]:
    """Step until terminal or stuck on an approval: (why it waits, refused decisions)."""
    refused: list[Divergence] = []
    for _ in range(_MAX_STEPS):
        op = store.get_operation(op_id)
        if is_terminal(op.state):
            return None, refused
        if op.state is OpState.VALIDATING:
            _move_to_requests(deps.clock, decisions, store, op)
        elif op.state is OpState.WAITING_APPROVAL:
            refused += _decide_pending(store, deps.clock, decisions, op)
        result = loop.step(deps, op_id)
        if result.waiting:
            return result.waiting, refused
    raise ToolloopError(f"replay of operation {op_id} did not settle in {_MAX_STEPS} steps")


def _move(clock: Clock, moment: Any) -> None:
    if isinstance(clock, ReplayClock) and isinstance(moment, str):
        clock.move_to(parse_iso(moment))


def _move_to_requests(
    clock: Clock, decisions: Decisions, store: Store, op: OperationRecord
) -> None:
    """Before VALIDATING: to when the recording asked for this turn's approvals."""
    if op.current_turn is None:
        return
    for call in store.calls(op.operation_id, op.current_turn):
        recorded = decisions.recorded.get((call.turn_idx, call.call_id), {})
        _move(clock, recorded.get("requested_at"))


#: the recorded decisions a replay with recorded results takes over
_DECIDED = (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)


def _decide_pending(
    store: Store, clock: Clock, decisions: Decisions, op: OperationRecord
) -> list[Divergence]:
    refused: list[Divergence] = []
    nothing_runs = decisions.mode == "recorded"
    for apr in store.approvals(op.operation_id):
        if apr.status is not ApprovalStatus.PENDING:
            continue
        key = _call_key(store, apr)
        recorded = decisions.recorded.get(key, {}) if key is not None else {}
        status = recorded.get("status")
        if status == ApprovalStatus.EXPIRED:
            _move(clock, recorded.get("expires_at"))
            continue
        if nothing_runs and status in _DECIDED and recorded.get("decided_by"):
            _move(clock, recorded.get("decided_at"))
            why = "replay: the decision recorded in the cassette"
            subject, reason = str(recorded["decided_by"]), recorded.get("reason")
        elif decisions.approve_as:
            status, subject, reason = ApprovalStatus.APPROVED, decisions.approve_as, None
            why = "replay --approve-as"
        elif nothing_runs and key in decisions.recorded_results:
            status, subject, reason = ApprovalStatus.APPROVED, REPLAY_SUBJECT, None
            why = "replay: recorded results, nothing runs"
        else:
            continue
        problem = _policy_problem(decisions, subject, apr, key, clock.now())
        if problem is not None:
            refused.append(Divergence("approval", None, apr.call_id, "$", subject, None, problem))
            continue
        _decide(store, clock, apr, ApprovalStatus(str(status)), subject, reason, why)
    return refused


def _call_key(store: Store, apr: ApprovalRecord) -> tuple[int, str] | None:
    """(turn, call id) of the approval's own call, found by its response id and call id."""
    call = store.get_call(apr.operation_id, apr.response_id, apr.call_id)
    return None if call is None else (call.turn_idx, call.call_id)


def _policy_problem(
    decisions: Decisions,
    subject: str,
    apr: ApprovalRecord,
    key: tuple[int, str] | None,
    now: datetime,
) -> str | None:
    """Why this subject's decision is refused: the rules ``approve`` applies (tools.policy).

    ``replay`` decides only where nothing runs and the recording holds the call's result
    (``key``: the approval's call, by turn and call id).
    """
    if subject == REPLAY_SUBJECT:
        if decisions.mode == "recorded" and key in decisions.recorded_results:
            return None
        return (
            f"{REPLAY_SUBJECT} is not a person: it decides only with --results recorded, "
            "for a call whose result the recording holds"
        )
    if decisions.policy is None:  # recorded results and no registry: nothing to check against
        return None
    return policy_rules.may_decide(
        decisions.policy, subject, apr.requested_by
    ) or policy_rules.expiry_problem(apr.approval_id, apr.expires_at, now)


def _decide(
    store: Store,
    clock: Clock,
    apr: ApprovalRecord,
    status: ApprovalStatus,
    subject: str,
    reason: str | None,
    why: str,
) -> None:
    at = iso(clock.now())
    with store.transaction():
        store.decide_approval(apr.approval_id, status, subject, at, reason)
        store.log_transition(
            apr.operation_id, "approval", "PENDING", status, at, why, apr.call_id, apr.response_id
        )
