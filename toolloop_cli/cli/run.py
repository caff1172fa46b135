"""``run``, ``resume`` and ``step``: parse flags, call the library, render."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from toolloop_cli.errors import ToolloopError

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli import operations, store as stores, views
    from toolloop_cli.engine.loop import StepResult
    from toolloop_cli.store import Store
    from toolloop_cli.tools import registry as registries
else:
    operations = LazyModule("toolloop_cli.operations")
    stores = LazyModule("toolloop_cli.store")
    views = LazyModule("toolloop_cli.views")
    registries = LazyModule("toolloop_cli.tools.registry")

from . import render
from .exits import run_guarded
from .options import (
    DEFAULT_STORE,
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
    per_tool_limits,
)


def _progress(as_json: bool) -> Any:
    """Live progress lines for people (on stderr, so stdout stays clean)."""
    if as_json:
        return None

    def sink(kind: str, data: dict[str, object]) -> None:
        if kind == "transition":
            render.err.print(Text(f"  {data['source']} -> {data['target']}", style="dim"))
        elif kind == "call":
            render.err.print(Text(f"    call {data['call_id']} {data['name']}: {data['state']}"))
        elif kind == "backoff":
            render.err.print(Text(f"  retrying in {float(str(data['seconds'])):.2f} s", "dim"))
        elif kind == "call_streaming":  # arguments still arriving: nothing has run
            render.err.print(
                Text(f"    model is preparing call {data['call_id']} {data['name']}", "dim")
            )

    return sink


def _store_flag(store_path: Path) -> str:
    if store_path == DEFAULT_STORE:
        return ""
    return f" --store {shlex.quote(str(store_path))}"


def finish(
    store: Store, result: StepResult, as_json: bool, store_path: Path, extra: dict[str, Any]
) -> int:
    """Render the operation after a run/resume/step and return its exit code."""
    view = views.operation_view(store, result.operation.operation_id)
    if result.waiting:
        view["waiting"] = result.waiting
    view.update(extra)
    if as_json:
        render.emit_json(view)
    else:
        render.operation(view)
        if view["state"] == "WAITING_APPROVAL":
            _print_next_steps(view, store_path)
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
    return others[0] if others else "SUBJECT"


def _print_next_steps(view: dict[str, Any], store_path: Path) -> None:
    flag = _store_flag(store_path)
    who = _approver(view)
    pending = [a for a in view["approvals"] if a["status"] == "PENDING"]
    for apr in pending:
        call = next(c for c in view["calls"] if c["call_id"] == apr["call_id"])
        render.out.print(
            Text.assemble(
                ("waiting for approval ", "bold yellow"),
                (apr["approval_id"], "bold"),
                f": {apr['tool']} {render.short(call['arguments'], 200)}",
                (f" (expires {apr['expires_at']})", "dim"),
            )
        )
        render.out.print(
            f"  approve:  toolloop approve {apr['approval_id']} --as {who} --resume{flag}"
        )
        render.out.print(
            f"  deny:     toolloop approve {apr['approval_id']} --as {who} --deny "
            f'--reason "..."{flag}'
        )
    render.out.print(f"  resume:   toolloop resume {view['operation_id']}{flag}")


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
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            help="Write every model exchange to this cassette (vcrpy format, secrets scrubbed); "
            "resume keeps appending.",
        ),
    ] = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Start an operation and run it until it ends or waits for an approval."""

    def body() -> int:
        store = stores.open_store(store_path)
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
        result = operations.start(store, options, on_event=_progress(as_json))
        if interactive and sys.stdin.isatty() and not as_json and result.waiting:
            result = _ask_approvals(store, result)
        return finish(store, result, as_json, store_path, {})

    run_guarded(as_json, body)


def _ask_approvals(store: Store, result: StepResult) -> StepResult:
    """On a terminal, ask a listed approver for each pending decision, then resume."""
    op_id = result.operation.operation_id
    for apr in store.approvals(op_id):
        if apr.status != "PENDING":
            continue
        call = next(c for c in store.calls(op_id) if c.call_id == apr.call_id)
        render.out.print(f"{apr.tool} {render.short(call.arguments, 200)}")
        who = typer.prompt("approve as (empty to leave pending)", default="", show_default=False)
        if not who:
            return result
        deny = not typer.confirm("approve?", default=False)
        operations.approve(store, apr.approval_id, who, deny=deny)
    return operations.resume(store, op_id, on_event=_progress(False))


def resume(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    force_continue: Annotated[
        bool, typer.Option("--force-continue", help="Continue an ESCALATED operation.")
    ] = False,
    decided_by: Annotated[
        str | None, typer.Option("--as", help="The operator deciding a --force-continue.")
    ] = None,
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Continue an operation after an approval, a crash or an escalation."""

    def body() -> int:
        store = stores.open_store(store_path)
        result = operations.resume(
            store,
            operation_id,
            force_continue=force_continue,
            decided_by=decided_by,
            tenant=tenant,
            on_event=_progress(as_json),
        )
        return finish(store, result, as_json, store_path, {})

    run_guarded(as_json, body)


def step(
    operation_id: Annotated[str, typer.Argument(help="Operation id (op_…).")],
    tenant: TenantOpt = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Make exactly one transition and print FROM -> TO."""

    def body() -> int:
        store = stores.open_store(store_path)
        result = operations.step(store, operation_id, tenant=tenant)
        line = f"{result.source.value} -> {result.target.value}"
        if result.waiting:
            line = f"{result.source.value} (no transition: {result.waiting})"
        if as_json:
            return finish(
                store,
                result,
                True,
                store_path,
                {"step": {"from": result.source.value, "to": result.target.value}},
            )
        render.out.print(line)
        return views.exit_code(result.target)

    run_guarded(as_json, body)
