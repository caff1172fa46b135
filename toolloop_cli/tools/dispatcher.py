"""Run one registered handler under its timeout and the operation's deadline, and judge the result.

The dispatcher is handed a ``ToolDef``, never a name from the model, so there is nothing to look
up. Whatever a handler does (return, raise, hang, return something that is not JSON or is too
large) comes back as the engine's ``ToolExecution``; no handler exception escapes.

A handler that overruns is abandoned in its worker thread (``workers``), not killed: Python
cannot stop a thread. Its side effect may still happen, which is why side-effecting tools carry
an idempotency key and a ``reconcile`` handler that can ask the downstream what happened.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolloop_cli.audit.canonical import CanonicalJSONError, fast_canonical_bytes
from toolloop_cli.engine.types import ExecutionStatus, ToolExecution
from toolloop_cli.tools import workers
from toolloop_cli.tools.context import Escalate, HandlerTimeout, ToolContext, ToolError
from toolloop_cli.tools.registry import Handler, ToolDef

__all__ = ["execute", "reconcile"]

S = ExecutionStatus


def execute(
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    *,
    now: Callable[[], float] = time.time,
) -> ToolExecution:
    """Run ``tool.handler`` for one call and check what it returned."""
    raw = _run(tool.handler, tool, arguments, context, now)
    if raw.status is not S.OK:
        return raw
    return _judge(tool, raw.value, raw.duration_ms, context.max_result_bytes)


def reconcile(
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    *,
    now: Callable[[], float] = time.time,
) -> ToolExecution | None:
    """Ask the downstream what became of ``context.idempotency_key``.

    ``None`` when the tool cannot be reconciled or the downstream has no record of the intent;
    otherwise ``ok`` with the downstream's saved result, or why the question went unanswered.
    A ``ToolError`` here is a failed lookup, not a business answer, so it becomes ``failed``.
    """
    if tool.reconcile is None:
        return None
    raw = _run(tool.reconcile, tool, arguments, context, now)
    if raw.status is S.TOOL_ERROR:
        return ToolExecution(S.FAILED, error=f"ToolError: {raw.error}", duration_ms=raw.duration_ms)
    if raw.status is not S.OK:
        return raw
    if raw.value is None:
        return None
    return _judge(tool, raw.value, raw.duration_ms, context.max_result_bytes)


class _Outcome:
    """What the worker thread saw; written by the worker before ``done`` is set."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.tool_error: ToolError | None = None
        self.escalate: Escalate | None = None
        self.timed_out: HandlerTimeout | None = None
        self.exception: Exception | None = None
        self.returned = False


def _run(
    handler: Handler,
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    now: Callable[[], float],
) -> ToolExecution:
    """Call ``handler`` on a worker thread; wait no longer than the timeout or the deadline."""
    timeout_ms = min(tool.timeout_ms, context.timeout_ms or tool.timeout_ms)
    budget = min(timeout_ms / 1000, context.deadline - now())
    if budget <= 0:
        error = "timed out after 0 ms: the operation deadline had passed, the handler was not run"
        return ToolExecution(S.TIMED_OUT, error=error)
    outcome = _Outcome()
    # the handler gets its own copy: it must not be able to change what was validated and hashed
    own_arguments = copy.deepcopy(arguments)
    started = time.monotonic()
    workers.start(lambda: _work(handler, own_arguments, context, outcome))
    finished = outcome.done.wait(budget)
    duration_ms = (time.monotonic() - started) * 1000
    if not finished:
        return ToolExecution(
            S.TIMED_OUT, error=f"timed out after {round(budget * 1000)} ms", duration_ms=duration_ms
        )
    if outcome.timed_out is not None:
        return ToolExecution(S.TIMED_OUT, error=str(outcome.timed_out), duration_ms=duration_ms)
    if outcome.tool_error is not None:
        return ToolExecution(
            S.TOOL_ERROR, error=outcome.tool_error.message, duration_ms=duration_ms
        )
    if outcome.escalate is not None:
        return ToolExecution(S.ESCALATE, error=outcome.escalate.reason, duration_ms=duration_ms)
    if outcome.exception is not None:
        error = f"{type(outcome.exception).__name__}: {outcome.exception}"
        return ToolExecution(S.FAILED, error=error, duration_ms=duration_ms)
    if not outcome.returned:
        error = "the handler stopped without returning (a BaseException such as SystemExit)"
        return ToolExecution(S.FAILED, error=error, duration_ms=duration_ms)
    return ToolExecution(S.OK, value=outcome.value, duration_ms=duration_ms)


def _work(
    handler: Handler, arguments: dict[str, Any], context: ToolContext, outcome: _Outcome
) -> None:
    try:
        value = handler(arguments, context)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        outcome.value = value
        outcome.returned = True
    except ToolError as exc:
        outcome.tool_error = exc
    except Escalate as exc:
        outcome.escalate = exc
    except HandlerTimeout as exc:
        outcome.timed_out = exc
    except Exception as exc:
        outcome.exception = exc
    finally:
        outcome.done.set()


async def _awaited(value: Awaitable[Any]) -> Any:
    """An async handler runs to completion on its own event loop, in its worker thread."""
    return await value


def _judge(
    tool: ToolDef, value: Any, duration_ms: float, max_result_bytes: int | None = None
) -> ToolExecution:
    """A returned value is only ``ok`` if it is JSON, within the size cap and of the result schema.

    The value handed on is the canonical JSON read back: a detached, plain-JSON copy that is
    exactly what gets hashed, so a handler that later mutates its own object changes nothing.
    """
    try:
        data = fast_canonical_bytes(value)
    except CanonicalJSONError as exc:
        return ToolExecution(S.FAILED, error=f"result is not JSON: {exc}", duration_ms=duration_ms)
    size = len(data)
    limit = min(tool.max_result_bytes, max_result_bytes or tool.max_result_bytes)
    if size > limit:
        error = f"result is {size} bytes, over the limit of {limit}"
        return ToolExecution(
            S.RESULT_TOO_LARGE, error=error, result_bytes=size, duration_ms=duration_ms
        )
    plain = json.loads(data)
    violations = tool.result_violations(plain)
    if violations:
        error = "result does not match result_schema: " + "; ".join(violations)
        return ToolExecution(
            S.INVALID_RESULT, error=error, result_bytes=size, duration_ms=duration_ms
        )
    return ToolExecution(S.OK, value=plain, result_bytes=size, duration_ms=duration_ms)
