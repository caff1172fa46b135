"""``worker``: take runnable operations from the store and run them (see service/worker.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from toolloop_cli.engine.clock import MAX_SPAN_S

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt, TenantOpt
from .render import line, safe


def worker(
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency", min=1, max=256, help="Operations run at once (threads, 1-256)."
        ),
    ] = 1,
    drain: Annotated[
        bool,
        typer.Option("--drain", help="Stop once nothing is runnable (else run until Ctrl-C)."),
    ] = False,
    poll_s: Annotated[
        float,
        typer.Option("--poll", min=0.05, help="Seconds between looks when nothing wakes it."),
    ] = 1.0,
    lease_ttl_s: Annotated[
        float | None,
        typer.Option(
            "--lease-ttl",
            min=1.0,
            max=float(MAX_SPAN_S),
            help="Seconds a taken operation's lease lasts unrenewed (how soon another "
            "host takes over from a worker that died). Default 300.",
        ),
    ] = None,
    host_id: Annotated[
        str | None,
        typer.Option(
            "--host-id",
            envvar="TOOLLOOP_HOST_ID",
            help="The host named in this worker's leases (default: the host name).",
        ),
    ] = None,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Run submitted and approved operations to a pause or an end.

    Any number of workers, on any hosts, may share a store; PostgreSQL wakes them (NOTIFY).
    """

    def body() -> int:
        import os
        import threading

        from toolloop_cli.store.lease import HOST_ENV

        if host_id:
            os.environ[HOST_ENV] = host_id  # every lease this process writes names it

        from toolloop_cli.service.worker import WorkerOptions, run_worker

        stop = threading.Event()

        def taken(op_id: str, state: str) -> None:
            if not as_json:
                render.err.print(line(safe(op_id), " ", safe(state)))

        options = WorkerOptions(store_path, concurrency, drain, poll_s, tenant, lease_ttl_s)
        try:
            stats = run_worker(options, stop=stop, on_taken=taken)
        except KeyboardInterrupt:
            stop.set()
            return 0
        if as_json:
            render.emit_json(
                {
                    "taken": stats.taken,
                    "ended": stats.ended,
                    "busy": stats.busy,
                    "failed": stats.failed,
                    "not_run": sorted(stats.not_run),
                }
            )
        else:
            render.out.print(line(safe(f"ran {stats.taken} operation(s): {stats.ended}")))
            if stats.not_run:
                left = ", ".join(sorted(stats.not_run))
                render.out.print(line(safe(f"not run ({len(stats.not_run)}): {left}")))
        return 0

    run_guarded(as_json, body)
