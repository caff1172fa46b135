"""Flags shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_STORE = ".toolloop/store.db"

#: a SQLite file, or a postgresql:// URL (kept a string: a Path would fold its "//")
StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="TOOLLOOP_STORE",
        help="Store: a SQLite file, or a postgresql://… URL (env TOOLLOOP_STORE).",
        show_default=True,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Also print every raw transition and call move (on stderr)."
    ),
]
ApproverOpt = Annotated[
    str | None,
    typer.Option(
        "--as",
        envvar="TOOLLOOP_SUBJECT",
        help="Who decides approvals at the --interactive prompt (a policy approver; "
        "env TOOLLOOP_SUBJECT). Without it, interactive mode leaves approvals pending.",
        show_default=False,
    ),
]
TenantOpt = Annotated[
    str | None,
    typer.Option("--tenant", envvar="TOOLLOOP_TENANT", help="Only see this tenant's operations."),
]

# -- loop guards (design.md §6): each flag overrides the registry's `defaults`, which override
# -- the built-in default shown in the help. None means "not given on the command line".
_G = "Loop guards"
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option("--max-turns", min=1, help="Model turns (default 20).", rich_help_panel=_G),
]
MaxToolCallsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tool-calls", min=0, help="Tool runs in all (default 50).", rich_help_panel=_G
    ),
]
MaxCallsPerToolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--max-calls-per-tool",
        metavar="TOOL=N",
        help="Tool runs of one tool (repeatable).",
        rich_help_panel=_G,
    ),
]
MaxRetriesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-retries", min=0, help="Retries of a failed request (default 3).", rich_help_panel=_G
    ),
]
DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline-s",
        min=0.001,
        help="Total deadline, seconds (default 86400).",
        rich_help_panel=_G,
    ),
]
ToolTimeoutOpt = Annotated[
    int | None,
    typer.Option(
        "--tool-timeout-ms", min=1, help="Cap on every tool's timeout.", rich_help_panel=_G
    ),
]
MaxInputTokensOpt = Annotated[
    int | None,
    typer.Option("--max-input-tokens", min=0, help="Input tokens in all.", rich_help_panel=_G),
]
MaxOutputTokensOpt = Annotated[
    int | None,
    typer.Option("--max-output-tokens", min=0, help="Output tokens in all.", rich_help_panel=_G),
]
MaxTotalTokensOpt = Annotated[
    int | None, typer.Option("--max-total-tokens", min=0, help="Tokens in all.", rich_help_panel=_G)
]
MaxCostOpt = Annotated[
    float | None,
    typer.Option("--max-cost-usd", min=0, help="Cost in USD, from --prices.", rich_help_panel=_G),
]
MaxResultBytesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-result-bytes",
        min=1,
        help="Cap on one tool result (default 65536).",
        rich_help_panel=_G,
    ),
]
MaxParallelOpt = Annotated[
    int | None,
    typer.Option(
        "--max-parallel",
        min=1,
        help="Calls of one turn run at once (default 4).",
        rich_help_panel=_G,
    ),
]
NoProgressOpt = Annotated[
    int | None,
    typer.Option(
        "--no-progress-after",
        min=2,
        help="Stop at the Nth identical tool + arguments proposal (default 3).",
        rich_help_panel=_G,
    ),
]
PricesOpt = Annotated[
    Path | None,
    typer.Option(
        "--prices", help="YAML price table adding to the bundled one.", rich_help_panel=_G
    ),
]


def per_tool_limits(values: list[str] | None) -> dict[str, int] | None:
    """``TOOL=N`` flags as a mapping (None when none were given)."""
    if not values:
        return None
    limits: dict[str, int] = {}
    for value in values:
        tool, sep, count = value.partition("=")
        if not sep or not tool or not count.isdigit():
            raise typer.BadParameter(
                f"expected TOOL=N, got {value!r}", param_hint="--max-calls-per-tool"
            )
        limits[tool] = int(count)
    return limits
