"""Anthropic context compaction: a ``compaction`` block, streamed as ``compaction_delta``s, a
``compaction`` stop reason that pauses the turn, and the compaction's own tokens reported
apart in ``usage.iterations``.

The block is carried back to the model exactly as the JSON answer would hold it (summary text
assembled from its deltas, the latest opaque ``encrypted_content``); the pause is continued
like ``pause_turn``; the compaction's tokens count against the budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recordings import ANTHROPIC, JSON, SSE, an_message, an_text, exchange, replay, sse, write
from support.cli import Invoke

from toolloop_cli.adapters.anthropic_messages import AnthropicMessagesAdapter
from toolloop_cli.engine.types import HttpResponse, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

ADAPTER = AnthropicMessagesAdapter()
SUMMARY: dict[str, Any] = {
    "type": "compaction",
    "content": "The user asked for the weather in Paris; it is 21 °C.",
    "encrypted_content": "EqQBCkYIBxgC-final",
}


def json_answer(message: dict[str, Any]) -> HttpResponse:
    return HttpResponse(200, {"content-type": JSON}, json.dumps(message).encode())


def stream_answer(events: list[dict[str, Any]]) -> HttpResponse:
    return HttpResponse(200, {"content-type": SSE}, sse([(e["type"], e) for e in events]).encode())


def compaction_events(
    message: dict[str, Any], deltas: list[dict[str, Any]], start: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """A streamed message whose block 0 is a compaction sent as ``deltas``; block 1 is text."""
    shell = {**message, "content": [], "stop_reason": None}
    text = message["content"][1]["text"]
    return [
        {"type": "message_start", "message": shell},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": start or {"type": "compaction", "content": None},
        },
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": message["usage"],
        },
        {"type": "message_stop"},
    ]


def test_a_streamed_compaction_is_carried_back_as_the_json_answer_holds_it() -> None:
    message = an_message("msg_1", [SUMMARY, an_text("Hello.")], "end_turn")
    deltas: list[dict[str, Any]] = [
        {"type": "compaction_delta", "content": SUMMARY["content"][:20], "encrypted_content": "x"},
        {"type": "compaction_delta", "content": SUMMARY["content"][20:], "encrypted_content": None},
        {"type": "compaction_delta", "content": None, "encrypted_content": "EqQBCkYIBxgC-final"},
    ]
    streamed = ADAPTER.parse_response(stream_answer(compaction_events(message, deltas)))
    whole = ADAPTER.parse_response(json_answer(message))
    assert streamed.output_items == whole.output_items
    assert streamed.output_items[0]["content"][0] == SUMMARY
    assert (streamed.outcome, streamed.text) == (TurnOutcome.FINAL_TEXT, "Hello.")


def test_a_compaction_that_streamed_no_summary_keeps_the_null_it_started_with() -> None:
    failed = {"type": "compaction", "content": None, "encrypted_content": None}
    message = an_message("msg_1", [failed, an_text("Hello.")], "end_turn")
    turn = ADAPTER.parse_response(stream_answer(compaction_events(message, [], start=failed)))
    assert turn.output_items[0]["content"][0] == failed


@pytest.mark.parametrize(
    ("start", "delta", "says"),
    [
        (None, {"type": "compaction_delta", "content": 7}, "not a string"),
        (None, {"type": "compaction_delta", "encrypted_content": ["x"]}, "not a string"),
        ({"type": "text", "text": ""}, {"type": "compaction_delta", "content": "x"}, "'text'"),
    ],
)
def test_a_compaction_delta_that_is_not_text_for_a_compaction_block_is_malformed(
    start: dict[str, Any] | None, delta: dict[str, Any], says: str
) -> None:
    message = an_message("msg_1", [SUMMARY, an_text("Hello.")], "end_turn")
    with pytest.raises(MalformedProviderPayload, match=says):
        ADAPTER.parse_response(stream_answer(compaction_events(message, [delta], start=start)))


def iterations(compaction_in: int, compaction_out: int) -> dict[str, Any]:
    return {
        "input_tokens": 181,
        "output_tokens": 8,
        "iterations": [
            {"type": "compaction", "input_tokens": compaction_in, "output_tokens": compaction_out},
            {"type": "message", "input_tokens": 181, "output_tokens": 8},
        ],
    }


def test_the_compaction_iteration_counts_against_the_token_budget() -> None:
    message = {**an_message("msg_1", [SUMMARY, an_text("Hi")], "end_turn")}
    message["usage"] = iterations(100, 83)
    usage = ADAPTER.parse_response(json_answer(message)).usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (281, 91, 372)
    streamed = compaction_events(message, [{**SUMMARY, "type": "compaction_delta"}])
    assert ADAPTER.parse_response(stream_answer(streamed)).usage == usage


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": 1, "iterations": "compaction"},
        {"input_tokens": 1, "iterations": [3]},
        {"input_tokens": 1, "iterations": [{"type": "compaction", "input_tokens": -5}]},
    ],
)
def test_iterations_that_are_not_token_counts_are_malformed(bad: dict[str, Any]) -> None:
    message = {**an_message("msg_1", [an_text("Hi")], "end_turn"), "usage": bad}
    with pytest.raises(MalformedProviderPayload, match="iterations|input_tokens"):
        ADAPTER.parse_response(json_answer(message))


def test_a_compaction_pause_is_continued_by_sending_the_compaction_back(
    cli: Invoke, tmp_path: Path
) -> None:
    first = [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
    paused = {**an_message("msg_1", [SUMMARY], "compaction"), "usage": iterations(100, 83)}
    second = [*first, {"role": "assistant", "content": [SUMMARY]}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": False}
    path = write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**body, "messages": first}, paused),
            exchange(
                ANTHROPIC,
                {**body, "messages": second},
                an_message("msg_2", [an_text("Hello!")], "end_turn"),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["final_text"]) == (0, "COMPLETED", "Hello!")
    assert out["divergences"] == []
    assert [t["finish_reason"] for t in out["turns"]] == ["compaction", "end_turn"]
    # the pause's compaction iteration (100 in, 83 out) and both messages (181/8, 40/12)
    assert (out["counters"]["input_tokens"], out["counters"]["output_tokens"]) == (321, 103)
