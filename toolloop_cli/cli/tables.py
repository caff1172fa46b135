"""Tables for ``show``, ``runs`` and ``pending``: readable at 80 columns, coloured by state.

Cells are ``Text`` built with ``render.safe``: a cell string is never parsed as markup and
never carries a control character to the terminal. Ids fold rather than vanish, so each one
can still be copied whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

if TYPE_CHECKING:  # the records (pydantic) load when a table is drawn, not at `--help`
    from toolloop_cli.engine.records import OperationRecord

from . import panels, render
from .render import dim, line, newline, safe, safe_json

#: how much of a result an overview shows (``show --json`` has all of it)
RESULT_WIDTH = 160


def when(moment: str) -> str:
    """An ISO timestamp to the second, for tables (the full value is in ``--json``)."""
    day, _, time = moment.partition("T")
    return f"{day} {time[:8]}Z" if time else moment


def _table(title: str) -> Table:
    return Table(
        title=safe(title, "bold"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )


def operation(view: dict[str, Any]) -> None:
    """An operation for a person: header panel, turns, calls, approvals, final text."""
    render.block(panels.operation_header(view))
    if view.get("turns"):
        render.block(turns(view["turns"]))
    if view.get("calls"):
        render.block(calls(view["calls"]))
    if view.get("approvals"):
        render.block(approvals(view["approvals"]))
    if view.get("final_text"):
        render.block(panels.final_text(view["final_text"]))


def turns(rows: list[dict[str, Any]]) -> Table:
    """Each model turn: its outcome and finish reason, tokens, response id and any detail."""
    table = _table(f"{len(rows)} turn(s)")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("outcome", overflow="fold", max_width=20)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("response / detail", overflow="fold")
    for t in rows:
        usage = t.get("usage") or {}
        outcome = line(render.state_text(t["outcome"]), newline(), dim(t["finish_reason"] or "-"))
        where = dim(t["response_id"] or "-")
        if t.get("detail"):
            where.append_text(line(newline(), safe(t["detail"])))
        table.add_row(
            safe(t["index"]),
            outcome,
            dim(f"{usage.get('input_tokens', 0)}/{usage.get('output_tokens', 0)}"),
            where,
        )
    return table


def calls(rows: list[dict[str, Any]]) -> Table:
    """Each call: turn, tool, state and call id, the full arguments, the result cut short."""
    table = _table(f"{len(rows)} call(s)")
    table.add_column("turn", justify="right", no_wrap=True)
    table.add_column("tool · state / call id", overflow="fold", max_width=34)
    table.add_column("arguments → result", overflow="fold")
    for c in rows:
        what = safe_json(c["arguments"])
        if c["result"] is not None:
            what.append_text(
                line(newline(), dim("→ "), render.short(c["result"], RESULT_WIDTH, "dim"))
            )
        table.add_row(
            safe(c["turn"]),
            line(
                safe(c["name"], "bold"),
                safe(" "),
                render.state_text(c["state"]),
                newline(),
                dim(c["call_id"]),
            ),
            what,
        )
    return table


def approvals(rows: list[dict[str, Any]]) -> Table:
    """Each approval: its id and call id, tool, decision (who, why) and expiry."""
    table = _table(f"{len(rows)} approval(s)")
    table.add_column("approval / call id", no_wrap=True, overflow="ellipsis", max_width=36)
    table.add_column("tool", overflow="fold", max_width=20)
    table.add_column("decision / expires", overflow="fold")
    for a in rows:
        decision = render.state_text(a["status"])
        if a["decided_by"]:
            decision.append_text(line(dim(" by "), safe(a["decided_by"])))
        if a["reason"]:
            decision.append_text(line(dim(": "), safe(a["reason"])))
        decision.append_text(line(newline(), dim("expires "), dim(when(a["expires_at"]))))
        table.add_row(
            line(safe(a["approval_id"]), newline(), dim(a["call_id"])),
            safe(a["tool"], "bold"),
            decision,
        )
    return table


def runs(ops: list[OperationRecord]) -> Table:
    """Operations newest first, each task cut to its column (``runs --json`` has all of it)."""
    table = _table(f"{len(ops)} operation(s)")
    table.add_column("operation / task", no_wrap=True, overflow="ellipsis", max_width=35)
    table.add_column("state / created", no_wrap=True)
    table.add_column("model", overflow="fold")
    for op in ops:
        table.add_row(
            line(safe(op.operation_id, "bold"), newline(), safe(op.task.partition("\n")[0])),
            line(render.state_text(op.state.value), newline(), dim(when(op.created_at))),
            line(dim(f"{op.provider}/"), safe(op.model)),
        )
    return table


def escalated(ops: list[dict[str, Any]]) -> Table:
    """Operations stopped for a person, with why and the command that continues one."""
    table = _table(f"{len(ops)} escalated operation(s)")
    table.add_column("operation / state", overflow="fold")
    table.add_column("reason, and how to continue", overflow="fold")
    for op in ops:
        table.add_row(
            line(safe(op["operation_id"], "bold"), newline(), render.state_text(op["state"])),
            line(
                safe(op["reason"] or "-"),
                newline(),
                dim(
                    f"after checking: toolloop resume {op['operation_id']} "
                    "--force-continue --as SUBJECT"
                ),
            ),
        )
    return table
