"""``replay``: drive the loop from a recording and report where this run diverges (exit 17)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.replay import run as replays
    from toolloop_cli.service import views
else:
    replays = LazyModule("toolloop_cli.replay.run")
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.service.views")

from . import render, tables, telemetry as otel_cli
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt
from .render import dim, line, safe
from .telemetry import OtelContentOpt, OtelOpt

#: Exit code when the replay diverges from the recording (design.md §8).
DIVERGED = 17


class Results(StrEnum):
    live = "live"
    recorded = "recorded"


def replay(
    cassette: Annotated[Path, typer.Argument(help="Cassette to replay (vcrpy/pytest-recording).")],
    registry: Annotated[
        Path | None,
        typer.Option("--registry", help="Tool registry (optional with --results recorded)."),
    ] = None,
    results: Annotated[
        Results | None,
        typer.Option(
            "--results",
            help="live: run the registry's handlers; recorded: take each result from the "
            "recording. Default: live with --registry, else recorded.",
        ),
    ] = None,
    approve_as: Annotated[
        str | None,
        typer.Option(
            "--approve-as",
            help="Decide approvals the recording does not decide as this subject (audited).",
        ),
    ] = None,
    strict_requests: Annotated[
        bool,
        typer.Option(
            "--strict-requests", help="Also compare whole request bodies (toolloop recordings)."
        ),
    ] = False,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Tenant of the replay operations.")
    ] = None,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Replay a recording; each conversation becomes an operation. Exit 17 on divergence."""

    def body() -> int:
        traced = otel_cli.live(otel, otel_content)
        options = replays.ReplayOptions(
            cassette=cassette,
            registry=registry,
            results=results.value if results is not None else None,
            approve_as=approve_as,
            strict_requests=strict_requests,
            tenant=tenant,
        )
        prepared = replays.prepare(options)  # an unusable cassette creates no store
        store = stores.open_store(store_path)
        report = replays.replay(store, prepared)
        ops = [op.operation_id for op in report.operations]
        extra = otel_cli.export(traced, store, *ops, as_json=as_json)
        shown = [_view(store, op) for op in report.operations]
        if as_json:
            render.emit_json({**_json(report, shown), **extra})
        else:
            for view in shown:
                tables.operation(view)
                _print_divergences(view)
            _print_skipped(report)
        return _exit_code(report)

    run_guarded(as_json, body)


def _view(store: Any, op: Any) -> dict[str, Any]:
    view: dict[str, Any] = views.operation_view(store, op.operation_id)
    view["divergences"] = [d.as_json() for d in op.divergences]
    view["replay"] = {
        "interactions": list(op.interactions),
        "waiting": op.waiting,
        "data_dir": str(op.data_dir) if op.data_dir else None,
    }
    return view


def _json(report: Any, shown: list[dict[str, Any]]) -> dict[str, Any]:
    """The first operation's view, plus every operation's divergences and the skipped list."""
    top = dict(shown[0])
    top["divergences"] = [
        {**d, "operation_id": view["operation_id"]} for view in shown for d in view["divergences"]
    ]
    top["operations"] = [
        {
            "operation_id": view["operation_id"],
            "state": view["state"],
            "interactions": view["replay"]["interactions"],
            "divergences": view["divergences"],
        }
        for view in shown
    ]
    top["cassette"] = str(report.cassette)
    top["results"] = report.results
    top["skipped"] = [item.as_json() for item in report.skipped]
    return top


def _exit_code(report: Any) -> int:
    """17 on any divergence; else the first unfinished operation's state code (0 when none)."""
    if report.divergent:
        return DIVERGED
    codes = [views.exit_code(op.state) for op in report.operations]
    return next((code for code in codes if code), 0)


def _print_divergences(view: dict[str, Any]) -> None:
    found = view["divergences"]
    requests = len(view["turns"])
    if view["replay"]["waiting"]:
        render.out.print(
            line(
                safe(view["replay"]["waiting"], "yellow"),
                safe(
                    ": replay again with --approve-as SUBJECT, or decide "
                    "with toolloop approve APR --as SUBJECT --resume",
                    "yellow",
                ),
            )
        )
    if not found:
        done = f"no divergence: {requests} request(s) match the recording"
        render.out.print(safe(done, "bold green"))
        return
    render.out.print(safe(f"{len(found)} divergence(s) from the recording", "bold red"))
    for d in found:
        where = " ".join(
            part
            for part in (
                f"turn {d['turn']}" if d["turn"] is not None else "",
                f"call {d['call_id']}" if d["call_id"] else "",
                d["path"],
            )
            if part
        )
        render.out.print(
            line(
                safe("  "),
                safe(d["kind"], "bold"),
                safe(" "),
                safe(where),
                safe(": "),
                dim("recorded "),
                render.short(d["recorded"], 60),
                dim("  replayed "),
                render.short(d["replayed"], 60),
            )
        )
        render.out.print(line(dim("      "), dim(d["message"])))


def _print_skipped(report: Any) -> None:
    for item in report.skipped:
        render.out.print(
            dim(f"skipped interaction {item.index}: {item.method} {item.uri} ({item.reason})")
        )
