"""Output: Rich for people, exactly one JSON object for programs. The only place that prints."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

_STATE_STYLE = {
    "COMPLETED": "bold green",
    "WAITING_APPROVAL": "bold yellow",
    "REFUSED": "bold red",
    "INCOMPLETE": "bold red",
    "FAILED": "bold red",
    "NO_PROGRESS": "bold red",
    "BUDGET_EXHAUSTED": "bold red",
    "ESCALATED": "bold magenta",
}


def emit_json(obj: dict[str, Any]) -> None:
    """The one JSON object of a ``--json`` command, on stdout."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=False) + "\n")
    sys.stdout.flush()


def state_text(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, "bold"))


def short(value: Any, width: int = 80) -> str:
    text = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )
    return text if len(text) <= width else text[: width - 1] + "…"


def operation(view: dict[str, Any]) -> None:
    """An operation for a person: header, turns, calls, approvals."""
    head = Text.assemble(
        ("operation ", "dim"), (view["operation_id"], "bold"), "  ", state_text(view["state"])
    )
    out.print(head)
    out.print(
        f"[dim]{view['provider']}/{view['api_family']} · model {view['model']} · "
        f"tenant {view['tenant']} · subject {view['subject']} · "
        f"registry {view['registry']['name']}@{view['registry']['revision']}[/dim]"
    )
    if view.get("reason"):
        out.print(f"[dim]reason:[/dim] {view['reason']}")
    if view.get("turns"):
        out.print(_turns_table(view["turns"]))
    if view.get("calls"):
        out.print(_calls_table(view["calls"]))
    if view.get("approvals"):
        out.print(_approvals_table(view["approvals"]))
    counters = view["counters"]
    guards = view["guards"]
    out.print(
        f"[dim]budgets: turns {counters['turns']}/{guards['max_turns']} · "
        f"tool calls {counters['tool_calls']}/{guards['max_tool_calls']} · "
        f"retries {counters['retries']}/{guards['max_retries']} · "
        f"tokens in {counters['input_tokens']} out {counters['output_tokens']}[/dim]"
    )
    if view.get("final_text"):
        out.print(Text("final text: ", style="bold") + Text(view["final_text"]))


def _turns_table(turns: list[dict[str, Any]]) -> Table:
    table = Table(title="turns", title_justify="left", expand=False)
    for col in ("#", "response id", "outcome", "finish reason", "detail"):
        table.add_column(col)
    for t in turns:
        table.add_row(
            str(t["index"]),
            t["response_id"] or "-",
            t["outcome"],
            t["finish_reason"] or "-",
            short(t["detail"] or "", 60),
        )
    return table


def _calls_table(calls: list[dict[str, Any]]) -> Table:
    table = Table(title="calls", title_justify="left", expand=False)
    for col in ("turn", "call id", "tool", "arguments", "state", "result"):
        table.add_column(col, overflow="fold")
    for c in calls:
        table.add_row(
            str(c["turn"]),
            c["call_id"],
            c["name"],
            short(c["arguments"], 50),
            state_text(c["state"]),
            short(c["result"], 60) if c["result"] is not None else "-",
        )
    return table


def _approvals_table(approvals: list[dict[str, Any]]) -> Table:
    table = Table(title="approvals", title_justify="left", expand=False)
    for col in ("approval id", "call id", "tool", "status", "decided by", "expires at"):
        table.add_column(col, overflow="fold")
    for a in approvals:
        table.add_row(
            a["approval_id"],
            a["call_id"],
            a["tool"],
            a["status"],
            a["decided_by"] or "-",
            a["expires_at"],
        )
    return table
