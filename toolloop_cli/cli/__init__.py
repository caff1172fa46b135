"""The command line: the only place that imports Typer or Rich, prints, or picks an exit code."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from toolloop_cli import __version__
from toolloop_cli.store.durability import DURABILITY_ENV, Durability

from . import (
    approvals,
    audit,
    diff,
    inspect,
    prose,
    registry,
    render,
    replay,
    report,
    run,
    serve,
    stores,
    telemetry,
    typer_help,
    worker,
)
from .usage import JsonUsageErrors

typer_help.load()  # before Typer renders any help or usage error

app = typer.Typer(
    name="toolloop",
    cls=JsonUsageErrors,
    help="Run LLM tool-calling loops safely: persisted, approvable, verifiable.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        render.out.print(render.safe(f"toolloop {__version__}"))
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    durability: Annotated[
        Durability,
        typer.Option(
            "--durability",
            envvar=DURABILITY_ENV,
            case_sensitive=False,
            help="When the store fsyncs: 'barriers' (default: before a side effect, at a "
            "human decision, a pause and an end; every commit survives a killed process) or "
            "'full' (every commit). Env TOOLLOOP_DURABILITY.",
        ),
    ] = Durability.BARRIERS,
) -> None:
    """toolloop: tool-calling loops as a finite state machine with a local store."""
    before = os.environ.get(DURABILITY_ENV)
    os.environ[DURABILITY_ENV] = durability.value  # every store this command opens

    def restore() -> None:  # the command is over (matters when called in-process)
        if before is None:
            os.environ.pop(DURABILITY_ENV, None)
        else:
            os.environ[DURABILITY_ENV] = before

    ctx.call_on_close(restore)


app.command("run")(run.run)
app.command("resume")(run.resume)
app.command("step")(run.step)
app.command("approve")(approvals.approve)
app.command("pending")(approvals.pending)
app.command("show")(inspect.show)
app.command("runs")(inspect.runs)
app.command("verify")(audit.verify)
app.command("serve")(serve.serve)
app.command("replay")(replay.replay)
app.command("diff")(diff.diff)
app.command("export-otel")(telemetry.export_otel)
app.command("report")(report.report)
app.command("worker")(worker.worker)
app.add_typer(registry.app, name="registry")
app.add_typer(stores.app, name="store")
prose.reflow_commands(app)


def main() -> None:
    """Console-script entry point."""
    app()
