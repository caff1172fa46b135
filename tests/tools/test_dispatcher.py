"""The dispatcher: every way a handler can end becomes an Execution, and nothing escapes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from toolloop_cli.tools.context import HandlerTimeout, ToolContext, ToolError
from toolloop_cli.tools.dispatcher import execute, reconcile
from toolloop_cli.tools.registry import Handler, ToolDef

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}


def make_tool(
    handler: Handler,
    *,
    reconcile_with: Handler | None = None,
    timeout_ms: int = 1000,
    max_result_bytes: int = 65536,
    result_schema: dict[str, Any] | None = None,
) -> ToolDef:
    return ToolDef(
        name="probe",
        schema_version="probe-v1",
        description="a tool for tests",
        risk="write",
        timeout_ms=timeout_ms,
        handler=handler,
        handler_path="tests:probe",
        reconcile=reconcile_with,
        reconcile_path=None if reconcile_with is None else "tests:lookup",
        approval="never",
        max_result_bytes=max_result_bytes,
        max_argument_bytes=65536,
        parameters=PARAMETERS,
        result_schema=result_schema,
        key_fields=("order_id",),
        sequential=False,
        sha256="sha256:test",
    )


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        operation_id="op_test",
        call_id="call_1",
        idempotency_key="idk_test",
        tenant="acme",
        subject="alice",
        deadline=time.time() + 60,
        tool="probe",
        data_dir=tmp_path,
    )


ARGS = {"order_id": "ord_1001"}


def test_ok_returns_the_value_and_its_canonical_size(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return {"order_id": arguments["order_id"], "tool": ctx.tool, "n": [1, 2]}

    result = execute(make_tool(handler), ARGS, context)
    assert result.status == "ok"
    assert result.value == {"order_id": "ord_1001", "tool": "probe", "n": [1, 2]}
    assert result.result_bytes == len(b'{"n":[1,2],"order_id":"ord_1001","tool":"probe"}')
    assert result.error is None
    assert result.duration_ms >= 0


def test_ok_value_is_a_detached_json_copy(context: ToolContext) -> None:
    kept: dict[str, Any] = {"items": (1, 2)}

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return kept

    result = execute(make_tool(handler), ARGS, context)
    kept["items"] = "changed later"
    assert result.value == {"items": [1, 2]}


def test_handler_cannot_mutate_the_callers_arguments(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        arguments["order_id"] = "ord_666"
        return None

    arguments = {"order_id": "ord_1001"}
    assert execute(make_tool(handler), arguments, context).status == "ok"
    assert arguments == {"order_id": "ord_1001"}


def test_tool_error_becomes_tool_error_with_its_message(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("order ord_1001 not found")

    result = execute(make_tool(handler), ARGS, context)
    assert (result.status, result.error, result.value) == (
        "tool_error",
        "order ord_1001 not found",
        None,
    )


def test_a_tool_errors_text_is_cut_to_the_result_cap(context: ToolContext) -> None:
    """The text goes to the model as a result would: bounded by the same cap (a 10 MiB
    message was sent whole), cut on a character boundary, saying how much it was."""

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("é" * 5000)

    result = execute(make_tool(handler, max_result_bytes=256), ARGS, context)
    assert result.status == "tool_error" and result.error is not None
    assert len(result.error.encode()) <= 256
    assert result.error.startswith("éé")
    assert result.error.endswith("… [10000 bytes, cut to the 256-byte result cap]")


def test_a_tool_error_within_the_cap_is_sent_whole(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("x" * 64)

    assert execute(make_tool(handler, max_result_bytes=64), ARGS, context).error == "x" * 64


def test_a_handler_that_gave_up_at_its_timeout_is_timed_out_not_failed(
    context: ToolContext,
) -> None:
    """HandlerTimeout: the handler cancelled its own downstream request (MCP, HTTP); the call
    is a timeout, so a side effect is reconciled as one the dispatcher stopped waiting for."""

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise HandlerTimeout("tools/call submit_refund cancelled after 0.5 s")

    tool = make_tool(handler, reconcile_with=handler)
    result = execute(tool, ARGS, context)
    assert (result.status, result.error) == (
        "timed_out",
        "tools/call submit_refund cancelled after 0.5 s",
    )
    looked_up = reconcile(tool, ARGS, context)
    assert looked_up is not None and looked_up.status == "timed_out"


def test_other_exception_becomes_failed_and_never_escapes(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise KeyError("amount_cents")

    result = execute(make_tool(handler), ARGS, context)
    assert result.status == "failed"
    assert result.error == "KeyError: 'amount_cents'"


def test_system_exit_in_a_handler_is_failed_not_a_process_exit(
    context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a BaseException is not caught: it ends the worker thread and reaches threading.excepthook
    reached_hook: list[type[BaseException] | None] = []
    hook_ran = threading.Event()

    def hook(args: Any) -> None:
        reached_hook.append(args.exc_type)
        hook_ran.set()

    monkeypatch.setattr(threading, "excepthook", hook)

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise SystemExit(3)

    result = execute(make_tool(handler), ARGS, context)
    assert hook_ran.wait(1.0)
    assert result.status == "failed"
    assert result.error is not None and "without returning" in result.error
    assert reached_hook == [SystemExit]


def test_slow_handler_times_out_at_the_tool_timeout(context: ToolContext) -> None:
    release = threading.Event()

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        release.wait(0.3)
        return "late"

    started = time.monotonic()
    result = execute(make_tool(handler, timeout_ms=50), ARGS, context)
    elapsed = time.monotonic() - started
    release.set()
    assert result.status == "timed_out"
    assert result.error == "timed out after 50 ms"
    assert result.value is None
    assert elapsed < 0.25


def test_deadline_shorter_than_the_timeout_wins(context: ToolContext) -> None:
    release = threading.Event()

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        release.wait(0.3)
        return "late"

    clock = context.deadline - 0.04
    result = execute(make_tool(handler, timeout_ms=5000), ARGS, context, now=lambda: clock)
    release.set()
    assert result.status == "timed_out"
    assert result.error == "timed out after 40 ms"


def test_deadline_already_passed_never_calls_the_handler(context: ToolContext) -> None:
    calls: list[dict[str, Any]] = []

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        calls.append(arguments)
        return "ran"

    result = execute(make_tool(handler), ARGS, context, now=lambda: context.deadline + 1)
    assert result.status == "timed_out"
    assert result.error is not None and result.error.startswith("timed out after 0 ms")
    time.sleep(0.05)
    assert calls == []


def test_non_json_result_is_failed(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return {"when": object()}

    result = execute(make_tool(handler), ARGS, context)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("result is not JSON:")


def test_nan_result_is_failed_because_it_has_no_canonical_form(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return {"ratio": float("nan")}

    assert execute(make_tool(handler), ARGS, context).status == "failed"


def test_result_over_max_bytes_is_refused_not_truncated(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return "x" * 100

    result = execute(make_tool(handler, max_result_bytes=64), ARGS, context)
    assert result.status == "result_too_large"
    assert result.error == "result is 102 bytes, over the limit of 64"
    assert result.result_bytes == 102
    assert result.value is None


def test_result_exactly_at_the_limit_is_ok(context: ToolContext) -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return "x" * 62

    assert execute(make_tool(handler, max_result_bytes=64), ARGS, context).status == "ok"


def test_result_schema_violation_is_invalid_result(context: ToolContext) -> None:
    schema = {"type": "object", "required": ["refund_id"]}

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return {"status": "submitted"}

    result = execute(make_tool(handler, result_schema=schema), ARGS, context)
    assert result.status == "invalid_result"
    assert result.error is not None and "$: 'refund_id' is a required property" in result.error
    assert result.value is None


def _noop(arguments: dict[str, Any], ctx: ToolContext) -> Any:
    return None


def test_reconcile_is_none_without_a_reconcile_handler(context: ToolContext) -> None:
    assert reconcile(make_tool(_noop), ARGS, context) is None


def test_reconcile_is_none_when_the_downstream_has_no_record(context: ToolContext) -> None:
    seen: list[str] = []

    def lookup(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append(ctx.idempotency_key)
        return None

    assert reconcile(make_tool(_noop, reconcile_with=lookup), ARGS, context) is None
    assert seen == ["idk_test"]


def test_reconcile_returns_the_downstreams_saved_result(context: ToolContext) -> None:
    def lookup(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return {"refund_id": "rf_1001_1", "status": "submitted"}

    result = reconcile(make_tool(_noop, reconcile_with=lookup), ARGS, context)
    assert result is not None and result.status == "ok"
    assert result.value == {"refund_id": "rf_1001_1", "status": "submitted"}


def test_reconcile_that_raises_or_hangs_is_failed_or_timed_out(context: ToolContext) -> None:
    def broken(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("ledger unavailable")

    failed = reconcile(make_tool(_noop, reconcile_with=broken), ARGS, context)
    assert failed is not None and failed.status == "failed"
    assert failed.error == "ToolError: ledger unavailable"

    release = threading.Event()

    def hanging(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        release.wait(0.3)
        return {"refund_id": "rf_1001_1"}

    tool = make_tool(_noop, reconcile_with=hanging, timeout_ms=30)
    timed_out = reconcile(tool, ARGS, context)
    release.set()
    assert timed_out is not None and timed_out.status == "timed_out"
