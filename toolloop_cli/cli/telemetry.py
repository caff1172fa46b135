"""``--otel`` on the commands that run operations, and ``export-otel``.

Tracing is off unless ``--otel URL`` or ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is given.
A traced command notes what had closed before it ran, runs, then exports what closed since,
built from the store (toolloop_cli/telemetry). A failed live export is one warning line: the
operation already committed, so its exit code stays the state's; ``export-otel`` can send it
again later (same trace, same span ids).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from toolloop_cli.errors import ToolloopError

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.store import Store
    from toolloop_cli.telemetry import tracing
else:
    stores = LazyModule("toolloop_cli.store")
    tracing = LazyModule("toolloop_cli.telemetry.tracing")

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt
from .render import dim, line, safe

_T = "Tracing"
OtelOpt = Annotated[
    str | None,
    typer.Option(
        "--otel",
        metavar="ENDPOINT",
        help="Export OpenTelemetry spans to this OTLP/HTTP endpoint (base URL, as "
        "OTEL_EXPORTER_OTLP_ENDPOINT, which also turns tracing on). Needs the otel extra.",
        rich_help_panel=_T,
    ),
]
OtelContentOpt = Annotated[
    bool,
    typer.Option(
        "--otel-content",
        help="Also export the task, messages, tool arguments and results (off by default).",
        rich_help_panel=_T,
    ),
]


class Live:
    """Tracing for one command: the segments closed before it ran, per operation."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.before: dict[str, int] = {}

    def mark(self, store: Store, operation_id: str) -> None:
        self.before[operation_id] = tracing.closed_segments(store, operation_id)


def live(
    endpoint: str | None, content: bool, store: Store | None = None, operation_id: str = ""
) -> Live | None:
    """Tracing if asked for (else None); fails (exit 2) before anything runs without the extra.

    Given an existing operation, notes how many of its segments had already closed.
    """
    target = tracing.target(endpoint, content)
    if target is None:
        return None
    traced = Live(target)
    if store is not None and operation_id:
        traced.mark(store, operation_id)
    return traced


def mark(traced: Live | None, store: Store, operation_id: str) -> None:
    if traced is not None:
        traced.mark(store, operation_id)


def export(
    traced: Live | None, store: Store, *operation_ids: str, as_json: bool = False
) -> dict[str, Any]:
    """Export what closed during the command; the ``--json`` key ``otel`` when traced."""
    if traced is None:
        return {}
    asked = [(op, traced.before.get(op, 0)) for op in operation_ids]
    summary: dict[str, Any] = {"endpoint": traced.target.endpoint, "content": traced.target.content}
    try:
        reports = tracing.export(store, asked, traced.target)
    except ToolloopError as exc:
        summary.update(spans=0, error=str(exc))
        render.err.print(
            line(
                Text("warning: ", "bold yellow"),
                f"{exc}; the operation is unaffected: send it later with toolloop export-otel "
                + " ".join(operation_ids),
            )
        )
        return {"otel": summary}
    summary.update(spans=sum(r.spans for r in reports), operations=[r.as_json() for r in reports])
    if not as_json:
        for r in reports:
            if r.spans:
                render.err.print(dim(f"  otel: {r.spans} span(s) of trace {r.trace_id} sent"))
    return {"otel": summary}


def export_otel(
    operation_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="OP", help="Operations to export (default: every one in the store)."
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="OTLP/HTTP endpoint (base URL). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
            "OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318.",
        ),
    ] = None,
    content: OtelContentOpt = False,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Export operations from the store as OpenTelemetry traces (same ids every time)."""

    def body() -> int:
        target = tracing.export_target(endpoint, content)
        store = stores.open_store(store_path, must_exist=True)
        if operation_ids:
            ids = [store.get_operation(op, tenant).operation_id for op in operation_ids]
        else:
            ids = [op.operation_id for op in reversed(store.list_operations(tenant, None))]
        reports = tracing.export(store, [(op, 0) for op in ids], target)
        total = sum(r.spans for r in reports)
        if as_json:
            render.emit_json(
                {
                    "endpoint": target.endpoint,
                    "content": target.content,
                    "spans": total,
                    "operations": [r.as_json() for r in reports],
                }
            )
            return 0
        for r in reports:
            running = "; a running segment is exported when it closes" if r.running else ""
            render.out.print(
                line(
                    safe(r.operation_id, "bold"),
                    f"  trace {r.trace_id}  {r.spans} span(s) of {r.segments} segment(s){running}",
                )
            )
        render.out.print(safe(f"{total} span(s) sent to {target.endpoint}"))
        return 0

    run_guarded(as_json, body)
