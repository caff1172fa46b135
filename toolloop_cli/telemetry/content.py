"""The opt-in content attributes (``--otel-content``), in the GenAI conventions' JSON shapes.

Messages are toolloop's neutral view of the conversation, rebuilt from the store: the task,
each answer's text and tool calls, and the result envelope each call sent back. Provider-only
items (reasoning, signatures, interaction ids) are not part of it. Shapes follow the input and
output messages JSON schemas of semantic conventions v1.41.0 (``gen-ai-input-messages.json``,
``gen-ai-output-messages.json``), serialised to JSON strings as the conventions ask for spans.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolloop_cli.engine.records import CallRecord, TurnRecord
from toolloop_cli.engine.types import TurnOutcome

__all__ = ["as_json", "call_arguments", "call_result", "input_messages", "output_messages"]

#: The conventions' finish reasons (``FinishReason``) for toolloop's turn outcomes.
FINISH = {
    TurnOutcome.FINAL_TEXT: "stop",
    TurnOutcome.TOOL_PROPOSALS: "tool_call",
    TurnOutcome.TRUNCATED: "length",
    TurnOutcome.REFUSAL: "content_filter",
    TurnOutcome.API_FAILURE: "error",
}


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def call_arguments(call: CallRecord) -> Any:
    """The arguments as proposed: the parsed object, or the raw text when it did not parse."""
    return call.arguments if call.arguments is not None else call.raw_arguments


def call_result(call: CallRecord) -> Any | None:
    """The handler's value of a successful call (the conventions: only when it succeeded)."""
    envelope = call.model_result
    if isinstance(envelope, dict) and envelope.get("ok") is True:
        return envelope.get("result")
    return None


def _tool_call(call: CallRecord) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call.call_id,
        "name": call.name,
        "arguments": call_arguments(call),
    }


def _answer_parts(turn: TurnRecord, calls: Sequence[CallRecord]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"type": "text", "content": turn.text})
    parts.extend(_tool_call(c) for c in calls)
    return parts


def input_messages(
    task: str, turns: Sequence[TurnRecord], calls_by_turn: dict[int, list[CallRecord]]
) -> dict[int, str]:
    """Turn index -> the history sent with it (JSON): the task, then earlier answers and results.

    Each message is serialised once and the histories are joined from those pieces, so the
    cost is the size of what is exported, not that times the number of turns.
    """
    pieces = [as_json({"role": "user", "parts": [{"type": "text", "content": task}]})]
    histories: dict[int, str] = {}
    for turn in sorted(turns, key=lambda t: t.idx):
        histories[turn.idx] = "[" + ",".join(pieces) + "]"
        if turn.outcome is TurnOutcome.API_FAILURE:
            continue  # an error answer adds nothing to the conversation
        calls = calls_by_turn.get(turn.idx, [])
        parts = _answer_parts(turn, calls)
        if parts:
            pieces.append(as_json({"role": "assistant", "parts": parts}))
        results = [
            {"type": "tool_call_response", "id": c.call_id, "response": c.model_result}
            for c in calls
            if c.model_result is not None
        ]
        if results:
            pieces.append(as_json({"role": "tool", "parts": results}))
    return histories


def output_messages(turn: TurnRecord, calls: Sequence[CallRecord]) -> list[dict[str, Any]]:
    """What the model answered in ``turn`` (nothing for an error answer)."""
    if turn.outcome is TurnOutcome.API_FAILURE:
        return []
    return [
        {
            "role": "assistant",
            "parts": _answer_parts(turn, calls),
            "finish_reason": FINISH[turn.outcome],
        }
    ]
