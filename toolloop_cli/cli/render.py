"""Output: Rich for people, exactly one JSON object for programs. The only place that prints."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
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
    for turn in view.get("turns", []):
        out.print(_turn_line(turn))
    for call in view.get("calls", []):
        out.print(_call_line(call))
    for apr in view.get("approvals", []):
        out.print(_approval_line(apr))
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


def _turn_line(t: dict[str, Any]) -> Text:
    line = Text.assemble(
        (f"turn {t['index']} ", "bold"),
        t["outcome"],
        (f"  {t['finish_reason'] or '-'}  {t['response_id'] or ''}", "dim"),
    )
    if t["detail"]:
        line.append(f"\n      {short(t['detail'], 110)}", style="dim")
    return line


def _call_line(c: dict[str, Any]) -> Text:
    """One call per line: turn, tool, arguments, state, then its result indented below."""
    line = Text.assemble(
        (f"  turn {c['turn']} ", "dim"),
        (c["name"], "bold"),
        " ",
        short(c["arguments"], 70),
        "  ",
        state_text(c["state"]),
        (f"  {c['call_id']}", "dim"),
    )
    if c["result"] is not None:
        line.append("\n      → " + short(c["result"], 110), style="dim")
    return line


def _approval_line(a: dict[str, Any]) -> Text:
    decided = f" by {a['decided_by']}" if a["decided_by"] else ""
    why = f": {a['reason']}" if a["reason"] else ""
    return Text.assemble(
        ("  approval ", "dim"),
        (a["approval_id"], "bold"),
        f" {a['tool']} ",
        state_text(a["status"]),
        f"{decided}{why}",
        (f"  expires {a['expires_at']}", "dim"),
    )
