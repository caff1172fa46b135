"""Anthropic Messages streams shaped as the API documents them, beyond the bundled recordings.

A text block may start with ``"citations": null`` (the SDK's ``TextBlock.citations`` is
optional) before ``citations_delta`` events add to it; and a classifier may stop a message
with ``stop_reason: "refusal"`` while a ``tool_use`` block is still open. The first is read
as a text with its citations, the second as the refusal it is (nothing runs either way),
not as a stream cut short.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.providers import parse

from toolloop_cli.engine.types import HttpResponse, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload


def sse(*events: dict[str, Any]) -> HttpResponse:
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    return HttpResponse(200, {"content-type": "text/event-stream"}, body=body)


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    },
}


def ended(stop_reason: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


CITATION = {
    "type": "web_search_result_location",
    "url": "https://example.com/paris",
    "title": "Paris weather",
    "encrypted_index": "Eo8B",
    "cited_text": "Sunny",
}


def test_a_text_block_started_with_null_citations_takes_the_streamed_citations() -> None:
    turn = parse(
        "anthropic",
        sse(
            START,
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": "", "citations": None},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "citations_delta", "citation": CITATION},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Sunny."},
            },
            {"type": "content_block_stop", "index": 0},
            *ended("end_turn"),
        ),
    )
    assert (turn.outcome, turn.text) == (TurnOutcome.FINAL_TEXT, "Sunny.")
    (block,) = [item for item in turn.output_items if item.get("role") == "assistant"][0]["content"]
    assert block["citations"] == [CITATION]


def open_tool_use(partial_json: str, stop_reason: str) -> HttpResponse:
    """A stream whose ``tool_use`` block is never closed before the message stops."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": partial_json}
    return sse(
        START,
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        *ended(stop_reason),
    )


def test_a_refusal_that_stops_a_tool_use_block_midway_is_a_refusal() -> None:
    turn = parse("anthropic", open_tool_use('{"order_id": "ord_', "refusal"))
    assert turn.outcome is TurnOutcome.REFUSAL
    assert turn.finish_reason == "refusal"
    assert not turn.calls


def test_an_open_tool_use_at_an_ordinary_end_is_still_a_stream_cut_short() -> None:
    turn = parse("anthropic", open_tool_use('{"order_id": "ord_1"}', "tool_use"))
    assert turn.outcome is TurnOutcome.TRUNCATED
    assert "never closed" in (turn.detail or "")
    assert not turn.calls


@pytest.mark.parametrize(
    ("block", "delta"),
    [
        (
            {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}},
            {"type": "thinking_delta", "thinking": '{"order_id": "ord_1"}'},
        ),
        (
            {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}},
            {"type": "text_delta", "text": '{"order_id": "ord_1"}'},
        ),
        ({"type": "text", "text": ""}, {"type": "input_json_delta", "partial_json": '{"a": 1}'}),
        ({"type": "thinking", "thinking": ""}, {"type": "text_delta", "text": "shown"}),
    ],
)
def test_a_delta_of_another_block_type_is_a_broken_stream_and_no_call(
    block: dict[str, Any], delta: dict[str, Any]
) -> None:
    """A thinking or text fragment on a tool_use block became the call's input, and the call
    ran; an input_json_delta on a text block became the final text."""
    stream = sse(
        START,
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        *ended("tool_use" if block["type"] == "tool_use" else "end_turn"),
    )
    with pytest.raises(MalformedProviderPayload) as refused:
        parse("anthropic", stream)
    assert f"'{delta['type']}' delta for block 0 of type '{block['type']}'" in str(refused.value)
