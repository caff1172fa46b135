"""How the store writes each audited table, as the rules ``verify`` holds every record to.

Derived from the writes in ``repo.py`` and the state tables in ``engine/states.py``:

- operations: inserted MODEL_REQUESTED; later writes (``save_operation``) change the state,
  counters, current turn, final text, reason and ``updated_at``, nothing else: the task,
  provider, model, adapter, tenant, subject, registry and policy pins, settings, source,
  guards, creation time and deadline are fixed at insert; a replay's findings
  (``divergence_json``) are written once, when it ends;
- turns, transitions and conversation appends are written once (``insert_turn``,
  ``log_transition``, ``append_items``), appends in order;
- calls: inserted PROPOSED with their identity (operation, turn, position, response id, call
  id, tool name, the model's argument text); the parsed arguments, key, digest, tool hash,
  approval id and start/finish times are set once (``_bind``, ``call_to``); the state and the
  result columns change with each move until a final state, after which nothing does;
- approvals: inserted PENDING with who asked, the call, digests, policy revision and expiry,
  all fixed; ``decide_approval`` writes the status, who decided, when and why, once.

Any record that does not follow from the previous one about the same row is a rewrite.
"""

from __future__ import annotations

from toolloop_cli.audit.history import Rules, TableRules
from toolloop_cli.engine.states import (
    APPROVAL_TRANSITIONS,
    CALL_TRANSITIONS,
    OP_TRANSITIONS,
    ApprovalStatus,
    CallState,
)

from .rows import APR_NAMES, CALL_NAMES, OP_NAMES

__all__ = ["HISTORY_RULES"]

#: columns of an operation that its later writes may change
_OP_CHANGES = frozenset(
    {"state", "counters_json", "current_turn", "final_text", "reason", "updated_at"}
)

#: columns of an operation that are null at insert and written once (a replay's findings)
_OP_SET_ONCE = frozenset({"divergence_json"})

#: columns of a call that are null at insert and written once
_CALL_SET_ONCE = frozenset(
    {
        "arguments_json",
        "argument_error",
        "idempotency_key",
        "arguments_sha256",
        "tool_sha256",
        "approval_id",
        "started_at",
        "finished_at",
    }
)

#: columns of a call that change with each move until a final state
_CALL_CHANGES = frozenset(
    {"state", "model_result_json", "protected_audit_json", "result_sha256", "call_binding_sha256"}
)

#: columns of an approval its decision writes (once)
_DECISION = frozenset({"status", "decided_by", "decided_at", "reason"})

HISTORY_RULES: Rules = {
    "operation": TableRules(
        fixed=frozenset(OP_NAMES) - _OP_CHANGES - _OP_SET_ONCE,
        set_once=_OP_SET_ONCE,
        after_final=_OP_SET_ONCE,
        state="state",
        moves={
            s.value: frozenset(t.value for t in to)
            for s, to in OP_TRANSITIONS.items()
            if s is not None
        },
        initial=frozenset(t.value for t in OP_TRANSITIONS[None]),
    ),
    "turn": TableRules(once=True),
    "call": TableRules(
        fixed=frozenset(CALL_NAMES) - _CALL_SET_ONCE - _CALL_CHANGES,
        set_once=_CALL_SET_ONCE,
        state="state",
        moves={s.value: frozenset(t.value for t in to) for s, to in CALL_TRANSITIONS.items()},
        initial=frozenset({CallState.PROPOSED.value}),
    ),
    "approval": TableRules(
        fixed=frozenset(APR_NAMES) - _DECISION,
        set_once=_DECISION - {"status"},
        state="status",
        moves={s.value: frozenset(t.value for t in to) for s, to in APPROVAL_TRANSITIONS.items()},
        initial=frozenset({ApprovalStatus.PENDING.value}),
    ),
    "transition": TableRules(once=True),
    "items": TableRules(once=True, appends=True),
}
