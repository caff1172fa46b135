"""Named crash points at persistence boundaries, for crash testing.

``TOOLLOOP_FAILPOINT=<name>[:<nth>]`` kills the process with SIGKILL the nth time (default
the first) it reaches the boundary ``name``. Nothing is flushed or cleaned up: the store
must be a legal state at every one of these points, and ``resume`` must finish the work
without repeating a side effect. Every commit of the engine is followed by one of these
boundaries (``tests/reliability/test_failpoint_coverage.py`` checks it on the source), so a crash
harness that kills at each of them sees every state a crash can leave.
"""

from __future__ import annotations

import os
import signal

__all__ = ["FAILPOINTS", "failpoint", "hit", "reset"]

#: Every boundary, roughly in the order an operation goes through them.
FAILPOINTS: tuple[str, ...] = (
    "after_start_commit",  # operation and its first conversation items committed, nothing sent
    "before_model_request",  # request built, nothing sent
    "after_turn_commit",  # the model's answer and its proposed calls committed
    "after_approval_commit",  # a human decision committed, nothing run yet
    "after_force_continue_commit",  # an operator's forced continue committed
    "after_intent_commit",  # call EXECUTING committed (a read's: held), handler not started
    "after_effect_before_result_commit",  # handler returned, result not committed
    "after_result_commit",  # one call's result committed, its siblings maybe still running
    "after_recover_commit",  # a call left EXECUTING by a crash reconciled, re-run or escalated
    "after_step_commit",  # one engine step (validate, decide, execute, send back…) committed
)

_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    """Die here if ``TOOLLOOP_FAILPOINT`` names this boundary (and this is the nth hit)."""
    spec = os.environ.get("TOOLLOOP_FAILPOINT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == (int(nth) if nth.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)


#: The name the composition root hands the engine (``Deps.failpoint``).
hit = failpoint


def reset() -> None:
    """Forget the hit counts (a forked test child starts counting from zero)."""
    _hits.clear()
