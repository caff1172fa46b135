"""The one gate every state change goes through: refuses what the tables do not allow."""

from __future__ import annotations

from toolloop_cli.errors import IllegalTransition

from .states import CALL_TRANSITIONS, OP_TRANSITIONS, CallState, OpState


def check_op_transition(source: OpState | None, target: OpState) -> None:
    """Raise ``IllegalTransition`` unless ``source -> target`` is in ``OP_TRANSITIONS``
    (``source`` None: the operation's creation)."""
    if target not in OP_TRANSITIONS[source]:
        raise IllegalTransition("operation", str(source), target.value)


def check_call_transition(source: CallState, target: CallState) -> None:
    """Raise ``IllegalTransition`` unless ``source -> target`` is in ``CALL_TRANSITIONS``."""
    if target not in CALL_TRANSITIONS[source]:
        raise IllegalTransition("call", source.value, target.value)
