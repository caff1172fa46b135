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
from dataclasses import replace
from typing import Any

from toolloop_cli.audit.canonical import CanonicalJSONError, fast_canonical_bytes
from toolloop_cli.engine.types import ExecutionStatus, ToolExecution
from toolloop_cli.tools import workers
from toolloop_cli.tools.context import Escalate, HandlerTimeout, ToolContext, ToolError
from toolloop_cli.tools.registry import Handler, ToolDef

__all__ = ["Running", "execute", "reconcile", "start"]

S = ExecutionStatus


def start(
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    *,
    now: Callable[[], float] = time.time,
    on_done: Callable[[], None] | None = None,
) -> Running:
    """Start ``tool.handler`` for one call on a worker thread; ``on_done`` is called (from
    that thread) once it has returned or raised. ``Running.finish`` gives what it did."""
    return _start(tool.handler, tool, arguments, context, now, on_done, judge=True)


def execute(
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    *,
    now: Callable[[], float] = time.time,
) -> ToolExecution:
    """Run ``tool.handler`` for one call and check what it returned."""
    return start(tool, arguments, context, now=now).finish()


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
    raw = _start(tool.reconcile, tool, arguments, context, now, None, judge=False).finish()
    if raw.status is S.TOOL_ERROR:
        return ToolExecution(S.FAILED, error=f"ToolError: {raw.error}", duration_ms=raw.duration_ms)
    if raw.status is not S.OK:
        return raw
    if raw.value is None:
        return None
    return _judge(tool, raw.value, raw.duration_ms, context.max_result_bytes)


class _Outcome:
    """What the worker thread saw; written by the worker before ``done`` is set."""

    def __init__(self, on_done: Callable[[], None] | None) -> None:
        self.done = threading.Event()
        self.on_done = on_done
        self.value: Any = None
        self.tool_error: ToolError | None = None
        self.escalate: Escalate | None = None
        self.timed_out: HandlerTimeout | None = None
        self.exception: Exception | None = None
        self.returned = False


_NOT_STARTED = "timed out after 0 ms: the operation deadline had passed, the handler was not run"


class Running:
    """A handler started on a worker thread, and the moment its time is up.

    ``finish`` waits for it no longer than that moment (``expires``, on the monotonic clock)
    and says what it did; a handler still running then is abandoned, TIMED_OUT.
    """

    def __init__(
        self,
        tool: ToolDef,
        context: ToolContext,
        outcome: _Outcome | None,
        budget: float,
        *,
        judge: bool,
    ) -> None:
        self.tool = tool
        self.context = context
        self.outcome = outcome
        self.budget = budget
        self.judge = judge
        self.started = time.monotonic()
        self.expires = self.started + max(budget, 0.0)

    def finish(self) -> ToolExecution:
        raw = self._raw()
        if raw.status is S.TOOL_ERROR:  # its text goes to the model: bounded as a result is
            limit = _limit(self.tool, self.context.max_result_bytes)
            return replace(raw, error=_cut(raw.error or "", limit))
        if raw.status is not S.OK or not self.judge:
            return raw
        return _judge(self.tool, raw.value, raw.duration_ms, self.context.max_result_bytes)

    def _raw(self) -> ToolExecution:
        outcome = self.outcome
        if outcome is None:
            return ToolExecution(S.TIMED_OUT, error=_NOT_STARTED)
        finished = outcome.done.wait(max(0.0, self.expires - time.monotonic()))
        duration_ms = (time.monotonic() - self.started) * 1000
        if not finished:
            return ToolExecution(
                S.TIMED_OUT,
                error=f"timed out after {round(self.budget * 1000)} ms",
                duration_ms=duration_ms,
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


def _limit(tool: ToolDef, max_result_bytes: int | None) -> int:
    """The tighter of the tool's own result cap and the operation's."""
    return min(tool.max_result_bytes, max_result_bytes or tool.max_result_bytes)


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` UTF-8 bytes, saying how much was left out."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    note = f"… [{len(data)} bytes, cut to the {limit}-byte result cap]"
    keep = max(0, limit - len(note.encode("utf-8")))
    return data[:keep].decode("utf-8", "ignore") + note


def _start(
    handler: Handler,
    tool: ToolDef,
    arguments: dict[str, Any],
    context: ToolContext,
    now: Callable[[], float],
    on_done: Callable[[], None] | None,
    *,
    judge: bool,
) -> Running:
    """Start ``handler`` on a worker thread, to be waited for no longer than the timeout or
    the deadline; past the deadline already, it is not started."""
    timeout_ms = min(tool.timeout_ms, context.timeout_ms or tool.timeout_ms)
    budget = min(timeout_ms / 1000, context.deadline - now())
    if budget <= 0:
        if on_done is not None:
            on_done()
        return Running(tool, context, None, 0.0, judge=judge)
    outcome = _Outcome(on_done)
    # the handler gets its own copy: it must not be able to change what was validated and hashed
    own_arguments = copy.deepcopy(arguments)
    running = Running(tool, context, outcome, budget, judge=judge)
    workers.start(lambda: _work(handler, own_arguments, context, outcome))
    return running


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
        if outcome.on_done is not None:
            outcome.on_done()


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
    limit = _limit(tool, max_result_bytes)
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
