"""Named crash points at persistence boundaries, for crash testing.

``TOOLLOOP_FAILPOINT=<name>[:<nth>]`` kills the process with SIGKILL the nth time (default
the first) it reaches the boundary ``name``. Nothing is flushed or cleaned up: the store
must be a legal state at every one of these points.
"""

from __future__ import annotations

import os
import signal

#: Every boundary, in the order a call goes through them.
FAILPOINTS: tuple[str, ...] = (
    "before_model_request",  # request built, nothing sent
    "after_intent_commit",  # call EXECUTING committed, handler not started
    "after_effect_before_result_commit",  # handler returned, result not committed
)

_hits: dict[str, int] = {}


def hit(name: str) -> None:
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
