"""``run --interactive`` on a terminal: ask a named approver about each pending call.

The approver comes from ``--as`` or ``TOOLLOOP_SUBJECT``, never from the prompt, so the name
on the decision is the one the person started the command with. Each call is shown as a
panel (tool, risk, full arguments, idempotency key, policy revision, expiry, the task and
what the model wrote); the choices are approve, deny with a reason, or leave it pending.
The decision goes through ``service.approvals.approve``, so every policy check applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.prompt import Prompt

from toolloop_cli.errors import ApprovalError, OperationNotFound

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli.service import approvals, views
    from toolloop_cli.store import Store
else:
    approvals = LazyModule("toolloop_cli.service.approvals")
    views = LazyModule("toolloop_cli.service.views")

from . import panels, render
from .render import dim, line, safe

_CHOICES = {"a": "approve", "d": "deny", "p": "pending"}


def ask(store: Store, operation_id: str, approver: str | None) -> bool:
    """Ask about every pending approval of the operation; True when none is left pending."""
    waiting = views.waiting_approval_views(store, operation_id)
    if approver is None:
        render.err.print(
            line(
                safe("interactive approval needs an approver: ", "bold yellow"),
                safe("give --as SUBJECT or set TOOLLOOP_SUBJECT; leaving "),
                safe(", ".join(v["approval_id"] for v in waiting)),
                safe(" pending"),
            )
        )
        return False
    settled = True
    for view in waiting:
        settled = _ask_one(store, view, approver) and settled
    return settled


def _ask_one(store: Store, view: dict[str, Any], approver: str) -> bool:
    render.block(panels.approval(view, context=True))
    if panels.approval_blocked(view):
        render.out.print(
            safe("resume would refuse this call whatever is decided: left pending", "bold red")
        )
        return False
    choice = _read(
        line(
            safe("decide as "),
            safe(approver, "bold"),
            safe(": [a]pprove, [d]eny with a reason, or leave [p]ending"),
        ),
        choices=list(_CHOICES),
        default="p",
    )
    if choice is None or _CHOICES[choice] == "pending":
        render.out.print(line(safe("left pending: "), safe(view["approval_id"])))
        return False
    reason = None
    if _CHOICES[choice] == "deny":
        reason = _reason()
        if reason is None:
            render.out.print(
                line(safe("no reason given, left pending: "), safe(view["approval_id"]))
            )
            return False
    try:
        decided = approvals.approve(
            store, view["approval_id"], approver, deny=reason is not None, reason=reason
        )
    except (ApprovalError, OperationNotFound) as exc:
        render.err.print(line(safe("refused: ", "bold red"), safe(str(exc))))
        return False
    render.out.print(
        line(
            render.state_text(decided.status),
            safe(" "),
            safe(decided.approval_id),
            dim(" by "),
            safe(decided.decided_by or approver),
        )
    )
    return True


def _reason() -> str | None:
    """The denial reason (sent to the model): asked until given; end of input gives up."""
    while True:
        reason = _read(safe("reason for the denial (the model is told)"), choices=None, default="")
        if reason is None:
            return None
        if reason.strip():
            return reason.strip()


def _read(question: Any, *, choices: list[str] | None, default: str) -> str | None:
    """One answer from the terminal, or None at end of input or an interrupt (Ctrl-D, Ctrl-C):
    the approval is then left pending, as if the person had chosen so."""
    try:
        return Prompt.ask(
            question,
            console=render.out,
            choices=choices,
            default=default,
            show_default=bool(choices),
        )
    except (EOFError, KeyboardInterrupt):
        render.out.print()
        return None
