"""``show`` and ``runs``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.service import views
else:
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.service.views")

from . import render, tables
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
        view = views.operation_view(
            stores.open_store(store_path, must_exist=True), operation_id, tenant
        )
        if as_json:
            render.emit_json(view)
        else:
            tables.operation(view)
        return 0

    run_guarded(as_json, body)


def runs(
    limit: Annotated[int, typer.Option("--limit", min=1, max=1_000_000_000)] = 50,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """List operations, newest first."""

    def body() -> int:
        ops = stores.open_store(store_path, must_exist=True).list_operations(tenant, limit)
        if as_json:
            render.emit_json({"operations": [views.summary(op) for op in ops]})
            return 0
        render.block(tables.runs(ops))
        return 0

    run_guarded(as_json, body)
