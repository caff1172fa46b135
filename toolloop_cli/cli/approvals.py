"""``approve`` and ``pending``: each approval is shown with its exact call before anyone decides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from toolloop_cli.errors import OperationNotFound

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

from . import panels, render, tables, telemetry as otel_cli
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt, VerboseOpt
from .progress import progress
from .render import dim, line, safe
from .run import finish, store_flag
from .telemetry import OtelContentOpt, OtelOpt


def approve(
    approval_id: Annotated[str, typer.Argument(help="Approval id (apr_…).")],
    subject: Annotated[
        str,
        typer.Option(
            "--as",
            help="Who decides, one of the policy's approvers: the decider's name, recorded; "
            "not authenticated.",
        ),
    ],
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve.")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (sent on denial).")] = None,
    then_resume: Annotated[
        bool, typer.Option("--resume", help="Resume the operation after deciding.")
    ] = False,
    tenant: TenantOpt = None,
    verbose: VerboseOpt = False,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Record a decision on one pending approval (the first decision stands).

    The call is printed in full (tool, risk, arguments, idempotency key, digest, policy
    revision, expiry) before the decision is recorded. The --as name is recorded as given,
    not authenticated: whoever can write the store can decide, so protect the store file.
    """

    def body() -> int:
        traced = otel_cli.live(otel, otel_content)
        store = stores.open_store(store_path, must_exist=True)
        shown = _shown(store, approval_id, tenant)
        if shown is not None and not as_json:
            render.block(panels.approval(shown, context=True))
        apr = approvals.approve(
            store, approval_id, subject, deny=deny, reason=reason, tenant=tenant
        )
        call = shown["call"] if shown is not None else None
        if not as_json:
            render.out.print(_decision(apr))
        if then_resume:
            otel_cli.mark(traced, store, apr.operation_id)
            with progress(as_json, verbose) as sink:
                result = operations.resume(store, apr.operation_id, tenant=tenant, on_event=sink)
            extra = {
                "decision": apr.model_dump(),
                "call": call,
                **otel_cli.export(traced, store, apr.operation_id, as_json=as_json),
            }
            return finish(store, result, as_json, store_path, extra)
        if as_json:
            render.emit_json(
                {"decision": apr.model_dump(), "operation_id": apr.operation_id, "call": call}
            )
        else:
            render.out.print(
                safe(f"  next: toolloop resume {apr.operation_id}{store_flag(store_path)}")
            )
        return 0

    run_guarded(as_json, body)


def _decision(apr: Any) -> Text:
    """``APPROVED apr_… by ops-lead`` (and the reason of a denial)."""
    shown = line(
        render.state_text(apr.status),
        safe(" "),
        safe(apr.approval_id, "bold"),
        dim(" by "),
        safe(apr.decided_by or "-"),
    )
    if apr.reason:
        shown.append_text(line(dim(": "), safe(apr.reason)))
    return shown


def _shown(store: Any, approval_id: str, tenant: str | None) -> dict[str, Any] | None:
    """The approval with its call; None when it is not visible (``approve`` then refuses it
    and logs the attempt on its owner, as it always has)."""
    try:
        return views.approval_view(store, approval_id, tenant)
    except OperationNotFound:
        return None


def pending(
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """List approvals waiting for a decision, each with its full call, and escalated operations."""

    def body() -> int:
        store = stores.open_store(store_path, must_exist=True)
        rows = store.pending_approvals(tenant)
        shown = [views.approval_view(store, a.approval_id, approval=a) for a in rows]
        escalated = [
            views.summary(op) for op in store.operations_in_state(states.OpState.ESCALATED, tenant)
        ]
        if as_json:
            render.emit_json(
                {
                    "pending": [
                        {**a.model_dump(), "call": view["call"]}
                        for a, view in zip(rows, shown, strict=True)
                    ],
                    "escalated": escalated,
                }
            )
            return 0
        render.out.print(safe(f"{len(rows)} pending approval(s)", "bold"))
        for view in shown:
            render.block(panels.approval(view))
        if escalated:
            render.block(tables.escalated(escalated))
        return 0

    run_guarded(as_json, body)
