"""Panels: an operation's header, the call a person is asked to approve, the final text.

Every value from a view that a model, a cassette, a provider or a handler could have written
goes through ``render.safe``/``render.safe_json``; labels are literals.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import render
from .render import dim, line, safe, safe_json

_BORDER = {
    "COMPLETED": "green",
    "WAITING_APPROVAL": "yellow",
    "ESCALATED": "magenta",
    "PENDING": "yellow",
    "APPROVED": "green",
}


def border(state: str) -> str:
    """Green for success, yellow for waiting, magenta for a person, red for any other stop."""
    if state in _BORDER:
        return _BORDER[state]
    return "red" if state in render.STATE_STYLE and "red" in render.STATE_STYLE[state] else "cyan"


def _fields(rows: list[tuple[str, RenderableType]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(Text(label), value)
    return grid


def operation_header(view: dict[str, Any]) -> Panel:
    """State, task, who and what ran it, why it stopped, and its budgets against their limits."""
    registry = view["registry"]
    counters, guards = view["counters"], view["guards"]
    rows: list[tuple[str, RenderableType]] = [
        ("task", safe(view["task"], newlines=True)),
        (
            "model",
            line(safe(f"{view['provider']}/{view['api_family']}"), dim(" · "), safe(view["model"])),
        ),
        ("tenant", line(safe(view["tenant"]), dim(" · subject "), safe(view["subject"]))),
        (
            "registry",
            line(
                safe(f"{registry['name']}@{registry['revision']}"),
                dim(" · policy "),
                safe(registry["policy_revision"]),
            ),
        ),
    ]
    if view.get("reason"):
        rows.append(("reason", safe(view["reason"])))
    rows.append(
        (
            "budgets",
            safe(
                f"turns {counters['turns']}/{guards['max_turns']} · "
                f"tool calls {counters['tool_calls']}/{guards['max_tool_calls']} · "
                f"retries {counters['retries']}/{guards['max_retries']} · "
                f"tokens {counters['input_tokens']} in, {counters['output_tokens']} out"
            ),
        )
    )
    title = line(safe("operation ", "bold"), safe(view["operation_id"], "bold"), safe("  "))
    title.append_text(render.state_text(view["state"]))
    return Panel(
        _fields(rows),
        title=title,
        title_align="left",
        border_style=border(view["state"]),
        box=box.ROUNDED,
    )


#: the most of a final text a terminal is shown: wrapping text into a panel costs Rich time
#: that grows faster than the text (a 5 MB answer without spaces took 25 s), and nobody reads
#: that much in a terminal; ``--json`` has the whole text
SHOWN_TEXT_CHARS = 100_000


def final_text(text: str) -> Panel:
    body = safe(text[:SHOWN_TEXT_CHARS], newlines=True)
    if len(text) > SHOWN_TEXT_CHARS:
        rest = len(text) - SHOWN_TEXT_CHARS
        body.append("\n")
        body.append_text(safe(f"… {rest:,} more characters not shown here: --json has it all"))
    return Panel(
        body,
        title=safe("final text", "bold"),
        title_align="left",
        border_style="green",
        box=box.ROUNDED,
    )


def approval(view: dict[str, Any], *, context: bool = False) -> Panel:
    """One approval and its exact call: what a person decides on.

    The tool, its risk, the full arguments (pretty JSON, never cut), the idempotency key, the
    digest the approval is bound to, the policy revision and the expiry. ``context`` adds the
    operation's task and the text the model wrote in the turn that proposed the call.
    """
    call = view["call"]
    rows: list[tuple[str, RenderableType]] = [
        ("tool", line(safe(call["tool"], "bold"), dim("  risk "), render.risk_text(call["risk"]))),
        ("arguments", safe_json(call["arguments"], pretty=True, style="bold")),
        ("idempotency key", safe(call["idempotency_key"] or "none (a read)")),
        ("argument digest", safe(call["arguments_sha256"])),
        ("policy revision", safe(call["policy_revision"])),
        ("expires", safe(call["expires_at"])),
        ("status", _status(view)),
        (
            "call",
            line(
                safe(f"turn {call['turn']} · "),
                safe(call["call_id"]),
                dim(" of response "),
                safe(call["response_id"]),
            ),
        ),
        (
            "operation",
            line(safe(view["operation_id"]), dim(" · asked by "), safe(view["requested_by"])),
        ),
    ]
    if context:
        rows.append(("task", safe(view["task"], newlines=True)))
        model_text = view.get("model_text")
        rows.append(
            ("model wrote", safe(model_text, newlines=True) if model_text else dim("(no text)"))
        )
    warnings = _warnings(view)
    body: RenderableType = _fields(rows)
    if warnings:
        body = Group(body, *warnings)
    title = line(
        safe("approval ", "bold"),
        safe(view["approval_id"], "bold"),
        dim(" · "),
        safe(call["tool"], "bold"),
    )
    return Panel(
        body,
        title=title,
        title_align="left",
        border_style="red" if warnings else border(view["status"]),
        box=box.ROUNDED,
    )


def _status(view: dict[str, Any]) -> Text:
    status = render.state_text(view["status"])
    if view.get("decided_by"):
        status.append_text(line(dim(" by "), safe(view["decided_by"])))
    if view.get("reason"):
        status.append_text(line(dim(": "), safe(view["reason"])))
    return status


def _warnings(view: dict[str, Any]) -> list[Text]:
    """Why resume would refuse this call whatever is decided: shown before anyone decides."""
    found: list[Text] = []
    if not view["call"]["arguments_match"]:
        found.append(safe("the stored arguments do not hash to the approval's digest", "red"))
    if view["tool_changed"]:
        found.append(safe("the tool changed in the registry since the approval was asked", "red"))
    if view["registry_problem"]:
        problem = safe(view["registry_problem"], "red")
        found.append(line(safe("the registry cannot be read: ", "red"), problem))
    return [line(safe("warning: ", "bold red"), w) for w in found]


def approval_blocked(view: dict[str, Any]) -> bool:
    """True when resume would refuse the call even if approved (see ``_warnings``)."""
    return bool(_warnings(view))
