"""The benchmark workload: T model turns of C calls each to ``read_item``, then a final text turn.

Every call has its own key, so no guard (repeats, cycles) fires and every handler runs. The
answers come in two provider shapes: OpenAI Responses and Anthropic Messages (whose stateless
history makes every request carry the whole conversation). ``write_cassette`` writes them as a
vcrpy cassette; the recorded requests carry only the model (a request body of a 2,000-turn run
is megabytes, and the replay transport serves answers in order whatever was sent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REGISTRY = HERE / "registry.yaml"
TASK = "Read every item the plan names, then say done."
TOOL = "read_item"
FINAL_TEXT = "All items read."

URIS = {
    "openai": "https://api.openai.com/v1/responses",
    "anthropic": "https://api.anthropic.com/v1/messages",
}
MODELS = {"openai": "gpt-bench", "anthropic": "claude-bench"}


def key(turn: int, n: int) -> str:
    return f"k_{turn}_{n}"


def call_id(turn: int, n: int) -> str:
    return f"call_{turn}_{n}"


def openai_answer(turn: int, calls: int) -> dict[str, Any]:
    """One Responses API answer: ``calls`` function calls, or (``calls == 0``) the final text."""
    usage = {"input_tokens": 100 + turn, "output_tokens": 20, "total_tokens": 120 + turn}
    output: list[dict[str, Any]]
    if calls:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{turn}_{n}",
                "call_id": call_id(turn, n),
                "name": TOOL,
                "arguments": json.dumps({"key": key(turn, n)}),
                "status": "completed",
            }
            for n in range(calls)
        ]
    else:
        output = [
            {
                "type": "message",
                "id": f"msg_{turn}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": FINAL_TEXT, "annotations": []}],
            }
        ]
    return {
        "id": f"resp_{turn}",
        "object": "response",
        "status": "completed",
        "model": MODELS["openai"],
        "output": output,
        "usage": usage,
    }


def anthropic_answer(turn: int, calls: int) -> dict[str, Any]:
    """One Messages API answer: ``calls`` tool_use blocks, or (``calls == 0``) the final text."""
    content: list[dict[str, Any]]
    if calls:
        content = [
            {
                "type": "tool_use",
                "id": call_id(turn, n),
                "name": TOOL,
                "input": {"key": key(turn, n)},
            }
            for n in range(calls)
        ]
    else:
        content = [{"type": "text", "text": FINAL_TEXT}]
    return {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "model": MODELS["anthropic"],
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + turn, "output_tokens": 20},
    }


def answers(api: str, turns: int, calls: int) -> list[bytes]:
    """The T tool turns and the final text turn, as the JSON bodies a provider would send."""
    make = openai_answer if api == "openai" else anthropic_answer
    bodies = [make(t, calls) for t in range(turns)] + [make(turns, 0)]
    return [json.dumps(body).encode("utf-8") for body in bodies]


def write_cassette(api: str, turns: int, calls: int, path: Path) -> Path:
    """The workload as a vcrpy cassette the replay transport serves."""
    from toolloop_cli.transcripts.cassette import (
        Interaction,
        RecordedRequest,
        RecordedResponse,
        dump_cassette,
    )

    request_body = json.dumps({"model": MODELS[api]}).encode("utf-8")
    headers = {"content-type": ["application/json"]}
    interactions = [
        Interaction.of(
            RecordedRequest("POST", URIS[api], headers, request_body),
            RecordedResponse(200, headers, body),
        )
        for body in answers(api, turns, calls)
    ]
    dump_cassette(interactions, path)
    return path


def guard_overrides(turns: int, calls: int) -> dict[str, Any]:
    """Loop guards raised so the whole workload fits (and nothing else changes)."""
    return {"max_turns": turns + 5, "max_tool_calls": turns * calls + 5}
