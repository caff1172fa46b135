"""``report OP``: write one self-contained HTML file about an operation (docs/report.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from toolloop_cli.errors import UsageError

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.report import (
        data as report_data,
        render as report_render,
        target as report_target,
    )
else:
    stores = LazyModule("toolloop_cli.store")
    report_data = LazyModule("toolloop_cli.report.data")
    report_render = LazyModule("toolloop_cli.report.render")
    report_target = LazyModule("toolloop_cli.report.target")

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt


def report(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="HTML file to write (default: report-OP.html; '-': stdout). An existing file "
            "is replaced "
            "only when it is an earlier report (or with --force); never the store, the run's "
            "registry or cassettes, or anything but a regular file.",
        ),
    ] = None,
    against: Annotated[
        str | None,
        typer.Option(
            "--against", help="Also show the diff with this run (operation id or cassette)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing -o file that is not a report."),
    ] = False,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Write an HTML report of one operation; it loads nothing remote.

    Header, budgets, turns, calls, approvals, verify, a replay's divergences; a diff with --against.
    """

    def body() -> int:
        to_stdout = output is not None and str(output) == "-"
        if to_stdout and as_json:
            raise UsageError("-o - writes the page to stdout, which --json cannot share")
        store = stores.open_store(store_path, must_exist=True)
        if to_stdout:  # the page alone, for a pipe (nothing is written to a file)
            data = report_data.report_data(store, operation_id, against=against, tenant=tenant)
            render.emit_text(report_render.render_html(data))
            return 0
        target = output if output is not None else Path(f"report-{operation_id}.html")
        resolved = report_target.report_target(
            store, target, operation_id, against=against, tenant=tenant, force=force
        )
        data = report_data.report_data(store, operation_id, against=against, tenant=tenant)
        report_render.write_report(resolved, report_render.render_html(data))
        if as_json:
            render.emit_json(
                {
                    "operation_id": operation_id,
                    "state": data["operation"]["state"],
                    "report": str(target),
                    "verified": data["verify"]["ok"],
                    "divergences": _count(data["replay"], "divergences"),
                    "differences": _count(data["diff"], "differences"),
                }
            )
        else:
            render.out.print(Text.assemble(("report written: ", "bold"), str(target)))
        return 0

    run_guarded(as_json, body)


def _count(part: dict[str, object] | None, key: str) -> int | None:
    found = None if part is None else part.get(key)
    return len(found) if isinstance(found, list) else None
