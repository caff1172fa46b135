"""``approve`` and ``pending``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.engine import states
    from toolloop_cli.service import approvals, operations, views
else:
    approvals = LazyModule("toolloop_cli.service.approvals")
    operations = LazyModule("toolloop_cli.service.operations")
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.service.views")
    states = LazyModule("toolloop_cli.engine.states")

from . import render, telemetry as otel_cli
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt
from .run import _progress, finish
from .telemetry import OtelContentOpt, OtelOpt


def approve(
    approval_id: Annotated[str, typer.Argument(help="Approval id (apr_…).")],
    subject: Annotated[str, typer.Option("--as", help="Who decides (a policy approver).")],
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve.")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (sent on denial).")] = None,
    then_resume: Annotated[
        bool, typer.Option("--resume", help="Resume the operation after deciding.")
    ] = False,
    tenant: TenantOpt = None,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Record a decision on one pending approval (the first decision stands)."""

    def body() -> int:
        traced = otel_cli.live(otel, otel_content)
        store = stores.open_store(store_path)
        apr = approvals.approve(
            store, approval_id, subject, deny=deny, reason=reason, tenant=tenant
        )
        if then_resume:
            otel_cli.mark(traced, store, apr.operation_id)
            result = operations.resume(
                store, apr.operation_id, tenant=tenant, on_event=_progress(as_json)
            )
            extra = otel_cli.export(traced, store, apr.operation_id, as_json=as_json)
            return finish(
                store, result, as_json, store_path, {"decision": apr.model_dump(), **extra}
            )
        if as_json:
            render.emit_json({"decision": apr.model_dump(), "operation_id": apr.operation_id})
        else:
            render.out.print(
                Text.assemble(
                    (apr.status, "bold"),
                    f" {apr.approval_id} ({apr.tool}, call {apr.call_id}) by {apr.decided_by}",
                )
            )
            render.out.print(f"  next: toolloop resume {apr.operation_id}")
        return 0

    run_guarded(as_json, body)


def pending(
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """List approvals waiting for a decision, and operations escalated to a person."""

    def body() -> int:
        store = stores.open_store(store_path)
        rows = store.pending_approvals(tenant)
        escalated = store.operations_in_state(states.OpState.ESCALATED, tenant)
        if as_json:
            render.emit_json(
                {
                    "pending": [a.model_dump() for a in rows],
                    "escalated": [views.summary(op) for op in escalated],
                }
            )
            return 0
        table = Table(title=f"{len(rows)} pending approval(s)", title_justify="left")
        for col in ("approval id", "operation", "tool", "call id", "requested by", "expires at"):
            table.add_column(col, overflow="fold")
        for a in rows:
            table.add_row(
                a.approval_id, a.operation_id, a.tool, a.call_id, a.requested_by, a.expires_at
            )
        render.out.print(table)
        for op in escalated:
            render.out.print(
                Text.assemble(
                    ("ESCALATED ", "bold magenta"), (op.operation_id, "bold"), f": {op.reason}"
                )
            )
            render.out.print(
                f"  after checking: toolloop resume {op.operation_id} --force-continue --as SUBJECT"
            )
        return 0

    run_guarded(as_json, body)
