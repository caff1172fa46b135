"""Operation and call states, the transition tables (as data) and exit codes."""

from __future__ import annotations

from enum import StrEnum


class OpState(StrEnum):
    """Where an operation is. Terminal states never change again."""

    MODEL_REQUESTED = "MODEL_REQUESTED"  # a model turn is in flight or about to be sent
    VALIDATING = "VALIDATING"  # proposals parsed; schema, auth and policy checks running
    WAITING_APPROVAL = "WAITING_APPROVAL"  # a call awaits a human decision; nothing held in memory
    EXECUTING = "EXECUTING"  # allowed calls are running
    RESULTS_READY = "RESULTS_READY"  # every call of the turn has a result; next: send back
    COMPLETED = "COMPLETED"  # explicit successful completion with final text
    REFUSED = "REFUSED"  # the provider refused
    INCOMPLETE = "INCOMPLETE"  # truncated, filtered, or a stream cut before its done event
    FAILED = "FAILED"  # non-retryable API failure, or retries exhausted
    NO_PROGRESS = "NO_PROGRESS"  # the model repeats itself without new information
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"  # a loop guard tripped
    ESCALATED = "ESCALATED"  # a safe stop for a human


class CallState(StrEnum):
    """Where one proposed tool call is."""

    PROPOSED = "PROPOSED"
    INVALID = "INVALID"  # unknown tool, unparsable or schema-violating arguments
    DENIED = "DENIED"  # policy, authorisation or a human said no
    WAITING_APPROVAL = "WAITING_APPROVAL"
    APPROVED = "APPROVED"  # allowed to run (by policy or by a human)
    EXPIRED = "EXPIRED"  # the approval window closed before execution
    EXECUTING = "EXECUTING"  # the handler was started; its outcome is not committed yet
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the handler raised or reported a business error
    TIMED_OUT = "TIMED_OUT"  # a read handler over its timeout
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"  # a side effect may have happened
    RECONCILED = "RECONCILED"  # the downstream confirmed the outcome through the key
    DUPLICATE = "DUPLICATE"  # the same intent was already done; its result is reused
    NOT_EXECUTED = "NOT_EXECUTED"  # the operation stopped before this call could run


O = OpState  # noqa: E741
C = CallState

TERMINAL: frozenset[OpState] = frozenset(
    {
        O.COMPLETED,
        O.REFUSED,
        O.INCOMPLETE,
        O.FAILED,
        O.NO_PROGRESS,
        O.BUDGET_EXHAUSTED,
        O.ESCALATED,
    }
)

#: Every operation transition the engine may make. None -> MODEL_REQUESTED is its creation
#: (``loop.begin``); MODEL_REQUESTED -> MODEL_REQUESTED is a retry.
OP_TRANSITIONS: dict[OpState | None, frozenset[OpState]] = {
    None: frozenset({O.MODEL_REQUESTED}),
    O.MODEL_REQUESTED: frozenset(
        {
            O.MODEL_REQUESTED,
            O.VALIDATING,
            O.COMPLETED,
            O.REFUSED,
            O.INCOMPLETE,
            O.FAILED,
            O.NO_PROGRESS,
            O.BUDGET_EXHAUSTED,
            O.ESCALATED,
        }
    ),
    O.VALIDATING: frozenset(
        {
            O.WAITING_APPROVAL,
            O.EXECUTING,
            O.RESULTS_READY,
            O.NO_PROGRESS,
            O.BUDGET_EXHAUSTED,
            O.ESCALATED,
            O.FAILED,
        }
    ),
    O.WAITING_APPROVAL: frozenset(
        {O.EXECUTING, O.RESULTS_READY, O.BUDGET_EXHAUSTED, O.ESCALATED, O.FAILED}
    ),
    # -> INCOMPLETE: the model's answers end before this turn's results could go back
    # (``Deps.input_ends``: a replayed recording that stops on calls nobody answered)
    O.EXECUTING: frozenset(
        {O.RESULTS_READY, O.BUDGET_EXHAUSTED, O.ESCALATED, O.FAILED, O.INCOMPLETE}
    ),
    O.RESULTS_READY: frozenset(
        {O.MODEL_REQUESTED, O.BUDGET_EXHAUSTED, O.NO_PROGRESS, O.ESCALATED, O.FAILED, O.INCOMPLETE}
    ),
    O.COMPLETED: frozenset(),
    O.REFUSED: frozenset(),
    O.INCOMPLETE: frozenset(),
    O.FAILED: frozenset(),
    O.NO_PROGRESS: frozenset(),
    O.BUDGET_EXHAUSTED: frozenset(),
    O.ESCALATED: frozenset({O.MODEL_REQUESTED, O.RESULTS_READY, O.EXECUTING}),
}

#: Every call transition. INVALID, DENIED, EXPIRED, FAILED, TIMED_OUT still yield an error result.
CALL_TRANSITIONS: dict[CallState, frozenset[CallState]] = {
    C.PROPOSED: frozenset(
        {C.INVALID, C.DENIED, C.WAITING_APPROVAL, C.APPROVED, C.DUPLICATE, C.NOT_EXECUTED}
    ),
    C.WAITING_APPROVAL: frozenset({C.APPROVED, C.DENIED, C.EXPIRED, C.NOT_EXECUTED}),
    C.APPROVED: frozenset({C.EXECUTING, C.EXPIRED, C.DENIED, C.DUPLICATE, C.NOT_EXECUTED}),
    C.EXECUTING: frozenset(
        {C.SUCCEEDED, C.FAILED, C.TIMED_OUT, C.UNKNOWN_OUTCOME, C.RECONCILED, C.EXECUTING}
    ),
    C.UNKNOWN_OUTCOME: frozenset({C.RECONCILED, C.EXECUTING, C.FAILED}),
    C.INVALID: frozenset(),
    C.DENIED: frozenset(),
    C.EXPIRED: frozenset(),
    C.SUCCEEDED: frozenset(),
    C.FAILED: frozenset(),
    C.TIMED_OUT: frozenset(),
    C.RECONCILED: frozenset(),
    C.DUPLICATE: frozenset(),
    C.NOT_EXECUTED: frozenset(),
}


class ApprovalStatus(StrEnum):
    """Where an approval stands; only PENDING is ever decided, and only once."""

    PENDING = "PENDING"  # asked, not yet decided
    APPROVED = "APPROVED"  # a listed approver said yes (or a replay's recorded yes)
    DENIED = "DENIED"  # a listed approver said no
    EXPIRED = "EXPIRED"  # nobody decided before ``expires_at``
    CANCELLED = "CANCELLED"  # the operation stopped before anyone decided


A = ApprovalStatus

#: Every approval status change: a PENDING approval is decided once, and never again.
APPROVAL_TRANSITIONS: dict[ApprovalStatus, frozenset[ApprovalStatus]] = {
    A.PENDING: frozenset({A.APPROVED, A.DENIED, A.EXPIRED, A.CANCELLED}),
    A.APPROVED: frozenset(),
    A.DENIED: frozenset(),
    A.EXPIRED: frozenset(),
    A.CANCELLED: frozenset(),
}

#: Call states that carry a result (or an error envelope) for the model.
CALL_HAS_RESULT: frozenset[CallState] = frozenset(
    {
        C.INVALID,
        C.DENIED,
        C.EXPIRED,
        C.SUCCEEDED,
        C.FAILED,
        C.TIMED_OUT,
        C.RECONCILED,
        C.DUPLICATE,
    }
)

#: Exit codes of run / resume / step by the state the operation ended in.
EXIT_CODES: dict[OpState, int] = {
    O.COMPLETED: 0,
    O.WAITING_APPROVAL: 10,
    O.REFUSED: 11,
    O.INCOMPLETE: 12,
    O.FAILED: 13,
    O.NO_PROGRESS: 14,
    O.BUDGET_EXHAUSTED: 15,
    O.ESCALATED: 16,
}


def is_terminal(state: OpState) -> bool:
    """True for states that never change again (ESCALATED only by an operator's force)."""
    return state in TERMINAL
