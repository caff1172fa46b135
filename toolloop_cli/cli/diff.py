"""``diff A B``: two operations or two cassettes side by side; exit 0 when equal, 18 when not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.service import diff as run_diff
else:
    run_diff = LazyModule("toolloop_cli.service.diff")
    stores = LazyModule("toolloop_cli.store")

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt
from .render import line, newline, safe

#: Exit code when the runs differ: 1 is kept for a bug (design.md §8), so not diff(1)'s 1.
DIFFERENT = 18


def diff(
    a: Annotated[str, typer.Argument(help="Operation id (op_…) or cassette file.")],
    b: Annotated[str, typer.Argument(help="Operation id (op_…) or cassette file.")],
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Compare two runs: turns, calls, arguments, results, states, final text."""

    def body() -> int:
        reads = run_diff.reads_store(a, b)
        store = stores.open_store(store_path, must_exist=True) if reads else None
        report = run_diff.diff(store, a, b)
        if as_json:
            render.emit_json(
                {
                    "a": report.a,
                    "b": report.b,
                    "equal": report.equal,
                    "differences": [d.as_json() for d in report.differences],
                }
            )
        else:
            _print(report)
        return 0 if report.equal else DIFFERENT

    run_guarded(as_json, body)


def _print(report: Any) -> None:
    if report.equal:
        render.out.print(safe("no differences", "bold green"))
        return
    table = Table(
        title=safe(f"{len(report.differences)} difference(s)", "bold"),
        title_justify="left",
        show_lines=True,
    )
    table.add_column("where", overflow="fold", style="bold")
    table.add_column(line(safe("A  "), safe(report.a)), overflow="fold")
    table.add_column(line(safe("B  "), safe(report.b)), overflow="fold")
    for d in report.differences:
        where = safe(d.path)
        if d.call_a or d.call_b:
            ids = d.call_a if d.call_a == d.call_b else f"{d.call_a or '-'} / {d.call_b or '-'}"
            where.append_text(line(newline(), safe(ids)))
        table.add_row(where, _cell(d.a, d.kind == "only_b"), _cell(d.b, d.kind == "only_a"))
    render.block(table)


def _cell(value: Any, absent: bool) -> Text:
    if absent:
        return safe("(absent)", "dim")
    return render.short(value, 200)
