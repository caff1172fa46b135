"""``show`` and ``runs``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.service import views
else:
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.service.views")

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt


def show(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Show one operation: turns, calls, results, approvals, budgets."""

    def body() -> int:
        view = views.operation_view(stores.open_store(store_path), operation_id, tenant)
        if as_json:
            render.emit_json(view)
        else:
            render.operation(view)
        return 0

    run_guarded(as_json, body)


def runs(
    limit: Annotated[int, typer.Option("--limit", min=1)] = 50,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """List operations, newest first."""

    def body() -> int:
        ops = stores.open_store(store_path).list_operations(tenant, limit)
        if as_json:
            render.emit_json({"operations": [views.summary(op) for op in ops]})
            return 0
        table = Table(title=f"{len(ops)} operation(s)", title_justify="left")
        for col in ("operation", "state", "provider", "model", "created", "task"):
            table.add_column(col, overflow="fold")
        for op in ops:
            table.add_row(
                op.operation_id,
                render.state_text(op.state.value),
                f"{op.provider}/{op.api_family}",
                op.model,
                op.created_at,
                render.short(op.task, 50),
            )
        render.out.print(table)
        return 0

    run_guarded(as_json, body)
