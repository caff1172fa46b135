"""``run``, ``resume`` and ``step``: parse flags, call the library, render."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolloop_cli.errors import ToolloopError

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import store as stores
    from toolloop_cli.engine.loop import StepResult
    from toolloop_cli.service import operations, views
    from toolloop_cli.store import Store
    from toolloop_cli.tools import registry as registries
else:
    operations = LazyModule("toolloop_cli.service.operations")
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.service.views")
    registries = LazyModule("toolloop_cli.tools.registry")

from . import panels, prompt, render, tables, telemetry as otel_cli
from .exits import run_guarded
from .options import (
    DEFAULT_STORE,
    ApproverOpt,
    DeadlineOpt,
    JsonOpt,
    MaxCallsPerToolOpt,
    MaxCostOpt,
    MaxInputTokensOpt,
    MaxOutputTokensOpt,
    MaxParallelOpt,
    MaxResultBytesOpt,
    MaxRetriesOpt,
    MaxToolCallsOpt,
    MaxTotalTokensOpt,
    MaxTurnsOpt,
    NoProgressOpt,
    PricesOpt,
    StoreOpt,
    TenantOpt,
    ToolTimeoutOpt,
    VerboseOpt,
    per_tool_limits,
)
from .progress import progress
from .render import safe
from .telemetry import OtelContentOpt, OtelOpt


def store_flag(store_path: str) -> str:
    """`` --store …`` for the commands a hint shows (a URL's password as ``***``)."""
    if store_path == DEFAULT_STORE:
        return ""
    from toolloop_cli.store.postgres import redacted

    shown = redacted(store_path) if stores.store_file(store_path) is None else store_path
    return f" --store {shlex.quote(str(shown))}"


def finish(
    store: Store, result: StepResult, as_json: bool, store_path: str, extra: dict[str, Any]
) -> int:
    """Render the operation after a run/resume/step and return its exit code."""
    view = views.operation_view(store, result.operation.operation_id)
    if result.waiting:
        view["waiting"] = result.waiting
    view.update(extra)
    if as_json:
        render.emit_json(view)
    else:
        tables.operation(view)
        if view["state"] == "WAITING_APPROVAL":
            _print_next_steps(store, view, store_path)
    return views.exit_code(result.target)


def _approver(view: dict[str, Any]) -> str:
    """A subject the policy lets decide (not the run's own subject), for the hint lines.

    The path comes from the store, so the registry is only parsed: nothing is imported.
    """
    try:
        policy = registries.load_registry(view["registry"]["path"], import_handlers=False).policy
    except ToolloopError:
        return "SUBJECT"
    others = [a for a in policy.approvers if a != view["subject"]]
    return shlex.quote(others[0]) if others else "SUBJECT"


def _print_next_steps(store: Store, view: dict[str, Any], store_path: str) -> None:
    """Each waiting call in full (through its approval's own row), then the commands."""
    flag = store_flag(store_path)
    who = _approver(view)
    for shown in views.waiting_approval_views(store, view["operation_id"]):
        apr = shown["approval_id"]
        render.block(panels.approval(shown))
        render.out.print(safe(f"  approve:  toolloop approve {apr} --as {who} --resume{flag}"))
        render.out.print(
            safe(f'  deny:     toolloop approve {apr} --as {who} --deny --reason "..."{flag}')
        )
    render.out.print(safe(f"  resume:   toolloop resume {view['operation_id']}{flag}"))


def run(
    task: Annotated[str, typer.Argument(help="What the model should do.")],
    registry: Annotated[Path, typer.Option("--registry", help="Tool registry YAML file.")],
    transcript: Annotated[
        Path | None, typer.Option("--transcript", help="Take model turns from this cassette.")
    ] = None,
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            help="Live provider: openai, anthropic, gemini (Interactions) or gemini-generate "
            "(generateContent). Keys from OPENAI_API_KEY / ANTHROPIC_API_KEY / GEMINI_API_KEY.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name (live).")] = None,
    tenant: Annotated[str, typer.Option("--tenant", envvar="TOOLLOOP_TENANT")] = "default",
    subject: Annotated[
        str, typer.Option("--subject", envvar="TOOLLOOP_SUBJECT", help="Who runs the task.")
    ] = "operator",
    max_turns: MaxTurnsOpt = None,
    max_tool_calls: MaxToolCallsOpt = None,
    max_calls_per_tool: MaxCallsPerToolOpt = None,
    max_retries: MaxRetriesOpt = None,
    deadline_s: DeadlineOpt = None,
    tool_timeout_ms: ToolTimeoutOpt = None,
    max_input_tokens: MaxInputTokensOpt = None,
    max_output_tokens: MaxOutputTokensOpt = None,
    max_total_tokens: MaxTotalTokensOpt = None,
    max_cost_usd: MaxCostOpt = None,
    max_result_bytes: MaxResultBytesOpt = None,
    max_parallel: MaxParallelOpt = None,
    no_progress_after: NoProgressOpt = None,
    prices: PricesOpt = None,
    turn_max_output_tokens: Annotated[
        int | None,
        typer.Option("--turn-max-output-tokens", min=1, help="Output-token cap of each request."),
    ] = None,
    stream: Annotated[bool, typer.Option("--stream/--no-stream")] = False,
    interactive: Annotated[
        bool, typer.Option("--interactive/--no-interactive", help="Ask for approvals on a TTY.")
    ] = False,
    approver: ApproverOpt = None,
    verbose: VerboseOpt = False,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            help="Write every model exchange to this cassette (vcrpy format, secrets scrubbed); "
            "resume keeps appending.",
        ),
    ] = None,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="Only store the operation, for a `toolloop worker` to run; print its id.",
        ),
    ] = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Start an operation and run it until it ends or waits for an approval."""

    def body() -> int:
        traced = otel_cli.live(otel, otel_content)
        options = operations.RunOptions(
            task=task,
            registry=registry,
            transcript=transcript,
            provider=provider,
            model=model,
            tenant=tenant,
            subject=subject,
            guard_overrides={
                "max_turns": max_turns,
                "max_tool_calls": max_tool_calls,
                "max_calls_per_tool": per_tool_limits(max_calls_per_tool),
                "max_retries": max_retries,
                "deadline_s": deadline_s,
                "tool_timeout_ms": tool_timeout_ms,
                "max_input_tokens": max_input_tokens,
                "max_output_tokens": max_output_tokens,
                "max_total_tokens": max_total_tokens,
                "max_cost_usd": max_cost_usd,
                "max_result_bytes": max_result_bytes,
                "max_parallel": max_parallel,
                "no_progress_after": no_progress_after,
            },
            prices=prices,
            stream=stream,
            max_output_tokens=turn_max_output_tokens,
            record=record,
        )
        # checked before the store is opened: a refused run creates no store
        planned = operations.plan(options, store_file=stores.store_file(store_path))
        store = stores.open_store(store_path)
        if detach:
            op = operations.submit(store, options, planned=planned)
            if as_json:
                render.emit_json({"operation_id": op.operation_id, "state": op.state.value})
            else:
                render.out.print(safe(op.operation_id))
            return 0
        with progress(as_json, verbose) as sink:
            result = operations.start(store, options, on_event=sink, planned=planned)
        if interactive and sys.stdin.isatty() and not as_json:
            result = _interact(store, result, approver or None, verbose)
        extra = otel_cli.export(traced, store, result.operation.operation_id, as_json=as_json)
        return finish(store, result, as_json, store_path, extra)

    run_guarded(as_json, body)


def _interact(store: Store, result: StepResult, approver: str | None, verbose: bool) -> StepResult:
    """Ask about each waiting call; resume once none is left pending, as often as needed."""
    op_id = result.operation.operation_id
    while result.waiting:
        prompt.ask(store, op_id, approver)
        if views.waiting_approval_views(store, op_id):
            return result  # left pending: the hint below says how to decide later
        with progress(False, verbose) as sink:
            result = operations.resume(store, op_id, on_event=sink)
    return result


def resume(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    force_continue: Annotated[
        bool, typer.Option("--force-continue", help="Continue an ESCALATED operation.")
    ] = False,
    decided_by: Annotated[
        str | None, typer.Option("--as", help="The operator deciding a --force-continue.")
    ] = None,
    tenant: TenantOpt = None,
    verbose: VerboseOpt = False,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Continue an operation after an approval, a crash or an escalation."""

    def body() -> int:
        store = stores.open_store(store_path, must_exist=True)
        traced = otel_cli.live(otel, otel_content, store, operation_id)
        with progress(as_json, verbose) as sink:
            result = operations.resume(
                store,
                operation_id,
                force_continue=force_continue,
                decided_by=decided_by,
                tenant=tenant,
                on_event=sink,
            )
        extra = otel_cli.export(traced, store, operation_id, as_json=as_json)
        return finish(store, result, as_json, store_path, extra)

    run_guarded(as_json, body)


def step(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    tenant: TenantOpt = None,
    otel: OtelOpt = None,
    otel_content: OtelContentOpt = False,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Make exactly one transition and print FROM -> TO."""

    def body() -> int:
        store = stores.open_store(store_path, must_exist=True)
        traced = otel_cli.live(otel, otel_content, store, operation_id)
        result = operations.step(store, operation_id, tenant=tenant)
        extra = otel_cli.export(traced, store, operation_id, as_json=as_json)
        line = f"{result.source.value} -> {result.target.value}"
        if result.waiting:
            line = f"{result.source.value} (no transition: {result.waiting})"
        if as_json:
            return finish(
                store,
                result,
                True,
                store_path,
                {"step": {"from": result.source.value, "to": result.target.value}, **extra},
            )
        render.out.print(safe(line))
        return views.exit_code(result.target)

    run_guarded(as_json, body)
