"""Loop guards as pure checks: each returns why the operation must stop, or None.

The engine calls them before the side effect they protect (a model request, a tool run) and
persists the counters they read in the same transaction as the state change, so the total
over any number of resumes never exceeds a limit. A message names the budget, its limit and
the value reached, for the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from toolloop_cli.audit.canonical import sha256_of

from .clock import parse_iso
from .records import Counters, Guards, OperationRecord


def before_model_request(op: OperationRecord, now: datetime) -> str | None:
    """The budgets that a model request would spend: deadline, turns, tokens, cost."""
    guards, counters = op.guards, op.counters
    late = past_deadline(op, now)
    if late is not None:
        return late
    if counters.turns >= guards.max_turns:
        return f"budget max_turns: limit {guards.max_turns} reached ({counters.turns} turns)"
    return token_budget(guards, counters)


def past_deadline(op: OperationRecord, now: datetime) -> str | None:
    """The total deadline, checked before every step that could spend time or effects."""
    if now >= parse_iso(op.deadline_at):
        return f"budget deadline_s: limit {op.guards.deadline_s:g} s reached at {op.deadline_at}"
    return None


def token_budget(guards: Guards, counters: Counters) -> str | None:
    """Token and cost budgets, checked before each request (usage is only known after it)."""
    checks: tuple[tuple[str, float | None, float], ...] = (
        ("max_input_tokens", guards.max_input_tokens, counters.input_tokens),
        ("max_output_tokens", guards.max_output_tokens, counters.output_tokens),
        ("max_total_tokens", guards.max_total_tokens, counters.total_tokens),
        ("max_cost_usd", guards.max_cost_usd, counters.cost_usd),
    )
    for name, limit, value in checks:
        if limit is not None and value >= limit:
            return f"budget {name}: limit {limit:g} reached ({value:g} used)"
    return None


def tool_call_budget(
    guards: Guards, counters: Counters, tool: str, allowed: dict[str, int]
) -> str | None:
    """Would running one more call of ``tool`` (after ``allowed`` this turn) pass a limit?"""
    total = counters.tool_calls + sum(allowed.values())
    if total >= guards.max_tool_calls:
        return (
            f"budget max_tool_calls: limit {guards.max_tool_calls} reached "
            f"({total} calls run or allowed)"
        )
    limit = guards.max_calls_per_tool.get(tool)
    if limit is not None:
        used = counters.tool_calls_by_tool.get(tool, 0) + allowed.get(tool, 0)
        if used >= limit:
            return f"budget max_calls_per_tool.{tool}: limit {limit} reached ({used} calls)"
    return None


def intent_digest(tool: str, arguments_sha256: str) -> str:
    """One intent: a tool and its canonical arguments (key order, whitespace do not matter)."""
    return sha256_of({"tool": tool, "arguments": arguments_sha256})


def turn_signature(intents: Sequence[str]) -> str:
    """The set of intents a turn proposed, order-free."""
    return sha256_of(sorted(intents))


def repeated_too_often(earlier: int, guards: Guards) -> bool:
    """The Nth identical proposal (``earlier`` = N-1 before it) stops the operation."""
    return earlier + 1 >= guards.no_progress_after


def cycle(recent: Sequence[str], current: str) -> bool:
    """An A,B,A,B alternation of whole turns (A != B) across the last four turns."""
    last = [*recent[-3:], current]
    return len(last) == 4 and last[0] == last[2] and last[1] == last[3] and last[0] != last[1]


def remember_turn(recent: Sequence[str], current: str) -> list[str]:
    """The bounded window of turn signatures kept in the counters."""
    return [*recent, current][-3:]
