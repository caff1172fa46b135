"""Who and for whom: the names an operation and a decision are kept under.

A tenant, a subject (who started a run) and an approver (``approve --as``) are labels the
store, the policy and every listing compare exactly. A label that is empty, padded with
spaces or holding a control or invisible character (a newline, a bidi override) looks like
another one when shown, or like nothing at all ("error:  may not decide approvals"), so it
is refused where it comes in, before anything is written.
"""

from __future__ import annotations

import unicodedata

from toolloop_cli.errors import UsageError

__all__ = ["MAX_NAME_CHARS", "check_name", "check_task"]

#: longer than any tenant or person's name; every listing shows it in full
MAX_NAME_CHARS = 256


def _unseen(ch: str) -> bool:
    """A character a name may not hold: control, format (bidi, zero-width), surrogate,
    private-use or unassigned ("C*"), or a line or paragraph separator."""
    category = unicodedata.category(ch)
    return category[0] == "C" or category in ("Zl", "Zp")


def _spelled(ch: str) -> str:
    """``ch`` as it is, or spelled as an escape (``\\n``, ``\\u202e``) when it cannot be seen."""
    return ascii(ch)[1:-1] if _unseen(ch) else ch


def check_name(value: str, what: str) -> str:
    """``value``, when it can name a tenant or a person; else ``UsageError`` saying why."""
    why = None
    if not value:
        why = "it is empty"
    elif value != value.strip():
        why = "it starts or ends with a space"
    elif len(value) > MAX_NAME_CHARS:
        why = f"it is longer than {MAX_NAME_CHARS} characters"
    else:
        bad = next(filter(_unseen, value), None)
        if bad is not None:
            why = f"it holds {_spelled(bad)}, a control or invisible character"
    if why is not None:
        shown = "".join(map(_spelled, value[:80])) + ("…" if len(value) > 80 else "")
        raise UsageError(f"{what} '{shown}' cannot be a name: {why}")
    return value


def check_task(task: str) -> str:
    """A task says what the model should do: an empty one (or only spaces) is refused."""
    if not task.strip():
        raise UsageError("the task is empty: say what the model should do")
    return task
