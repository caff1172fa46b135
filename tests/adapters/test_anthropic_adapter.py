"""The Anthropic Messages adapter: every stop reason and error, results, request shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke, json_out
from support.paths import FIXTURES, REGISTRY, TASK
from support.providers import answers, assert_nothing_ran, requests, run_fixture, transcript

from toolloop_cli.adapters._errors import ANTHROPIC, classify_http_error
from toolloop_cli.adapters.anthropic_messages import AnthropicMessagesAdapter
from toolloop_cli.engine.types import (
    HttpResponse,
    ModelSettings,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import AdapterError, MalformedProviderPayload
from toolloop_cli.transcripts import server

ANTHROPIC_FIXTURES = FIXTURES / "anthropic"
ADAPTER = AnthropicMessagesAdapter()
SETTINGS = ModelSettings(model="claude-sonnet-4-5-20250929")


def message(stop: str, *content: dict[str, Any], **extra: Any) -> HttpResponse:
    body = {"id": "msg_1", "type": "message", "content": list(content), "stop_reason": stop}
    return HttpResponse(
        200, {"content-type": "application/json"}, json.dumps({**body, **extra}).encode()
    )


def tool_use(call_id: str = "toolu_1", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "get_order", "input": arguments}


# -- every stop reason and error, through the CLI ----------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "state", "code", "retryable"),
    [
        ("end_turn.yaml", "COMPLETED", 0, None),
        ("stop_sequence.yaml", "COMPLETED", 0, None),
        ("max_tokens_tool_use.yaml", "INCOMPLETE", 12, None),
        ("context_window.yaml", "INCOMPLETE", 12, None),
        ("refusal.yaml", "REFUSED", 11, None),
        ("http_400.yaml", "FAILED", 13, False),
        ("http_401.yaml", "FAILED", 13, False),
        ("http_403.yaml", "FAILED", 13, False),
        ("http_404.yaml", "FAILED", 13, False),
        ("http_413.yaml", "FAILED", 13, False),
        ("http_429.yaml", "FAILED", 13, True),
        ("http_429_spend_limit.yaml", "FAILED", 13, False),
        ("http_500.yaml", "FAILED", 13, True),
        ("http_529.yaml", "FAILED", 13, True),
        ("stream_overloaded.yaml", "FAILED", 13, True),
        ("stream_max_tokens_tool_use.yaml", "INCOMPLETE", 12, None),
        ("stream_cut_tool_use.yaml", "INCOMPLETE", 12, None),
        ("stream_refusal.yaml", "REFUSED", 11, None),
    ],
)
def test_each_stop_reason_and_error_maps_to_its_state_and_runs_nothing(
    cli: Invoke, store_path: Path, fixture: str, state: str, code: int, retryable: bool | None
) -> None:
    exit_code, view = run_fixture(cli, ANTHROPIC_FIXTURES / fixture, "--max-retries", "0")
    assert (exit_code, view["state"]) == (code, state), view["reason"]
    assert_nothing_ran(view, store_path)
    (turn,) = view["turns"]
    if retryable is not None:
        assert turn["error"]["retryable"] is retryable
    if state == "INCOMPLETE" and "tool_use" in fixture:
        assert "never executed" in view["reason"]


def test_parallel_tool_use_blocks_each_run_and_complete(cli: Invoke) -> None:
    exit_code, view = run_fixture(cli, ANTHROPIC_FIXTURES / "parallel_tool_use.yaml")
    assert (exit_code, view["state"]) == (0, "COMPLETED")
    assert [(c["call_id"], c["state"]) for c in view["calls"]] == [
        ("toolu_01Fixture00000000000001", "SUCCEEDED"),
        ("toolu_01Fixture00000000000002", "SUCCEEDED"),
    ]


def test_a_refusal_keeps_the_stop_details_for_the_operator() -> None:
    (answer,) = answers(ANTHROPIC_FIXTURES / "refusal.yaml")
    turn = ADAPTER.parse_response(answer)
    assert turn.outcome is TurnOutcome.REFUSAL and turn.finish_reason == "refusal"
    assert "category cyber" in (turn.detail or "") and turn.calls == ()


def test_max_tokens_with_a_tool_use_block_is_truncated_and_never_proposes_it() -> None:
    turn = ADAPTER.parse_response(message("max_tokens", {"type": "text", "text": "I"}, tool_use()))
    assert turn.outcome is TurnOutcome.TRUNCATED and turn.calls == ()
    assert "toolu_1 (get_order) was cut" in (turn.detail or "")


def test_pause_turn_sends_the_assistant_content_back_and_continues(
    cli: Invoke, tmp_path: Path
) -> None:
    path = ANTHROPIC_FIXTURES / "pause_turn.yaml"
    first = json.loads(answers(path)[0].body)
    with server.start(path) as served:
        env = {"ANTHROPIC_BASE_URL": served.url, "ANTHROPIC_API_KEY": "test-key"}
        result = cli(
            "run", TASK, "--registry", str(REGISTRY), "--provider", "anthropic",
            "--model", "claude-sonnet-4-5-20250929", "--json", env=env,
        )  # fmt: skip
        sent = [entry["body"] for entry in served.provider.received]
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (0, "COMPLETED")
    assert [t["finish_reason"] for t in view["turns"]] == ["pause_turn", "end_turn"]
    assert sent[1]["messages"][-1] == {"role": "assistant", "content": first["content"]}
    assert sent[1]["messages"][:-1] == sent[0]["messages"]


# -- parsing -----------------------------------------------------------------------------------


def test_tool_use_input_objects_become_strict_calls_paired_by_block_id() -> None:
    turn = ADAPTER.parse_response(message("tool_use", tool_use("toolu_a", order_id="ord_1")))
    (call,) = turn.calls
    assert (call.call_id, call.name, call.arguments) == (
        "toolu_a",
        "get_order",
        {"order_id": "ord_1"},
    )
    assert json.loads(call.raw_arguments) == {"order_id": "ord_1"}


def test_thinking_blocks_are_carried_back_unchanged_with_their_signature() -> None:
    thinking = {"type": "thinking", "thinking": "Check the order.", "signature": "EqQBCkYIBxgCKkB"}
    turn = ADAPTER.parse_response(message("tool_use", thinking, tool_use()))
    assert turn.output_items == ({"role": "assistant", "content": [thinking, tool_use()]},)


@pytest.mark.parametrize(
    "body",
    [
        {"id": "msg_1", "type": "message", "content": [], "stop_reason": "sleepy"},
        {"id": "msg_1", "type": "message", "content": [], "stop_reason": None},
        {"id": "msg_1", "type": "message", "content": [], "stop_reason": "tool_use"},
        {"id": "msg_1", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": "{}"}],
         "stop_reason": "tool_use"},
        {"type": "message", "content": [], "stop_reason": "end_turn"},
    ],
)  # fmt: skip
def test_answers_without_the_documented_shape_are_malformed(body: dict[str, Any]) -> None:
    with pytest.raises(MalformedProviderPayload):
        ADAPTER.parse_response(HttpResponse(200, {}, json.dumps(body).encode()))


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, "invalid_request_error", False),
        (401, "authentication_error", False),
        (402, "billing_error", False),
        (403, "permission_error", False),
        (404, "not_found_error", False),
        (413, "request_too_large", False),
        (429, "rate_limit_error", True),
        (500, "api_error", True),
        (504, "timeout_error", True),
        (529, "overloaded_error", True),
    ],
)
def test_error_table(status: int, kind: str, retryable: bool) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": "m"}}).encode()
    error = classify_http_error(ANTHROPIC, status, {}, body)
    assert (error.status, error.type, error.retryable, error.message) == (
        status,
        kind,
        retryable,
        "m",
    )


# -- requests and results ----------------------------------------------------------------------


def test_build_request_shape() -> None:
    tool = ToolSpec(name="get_order", description="Look up", parameters={"type": "object"})
    request = ADAPTER.build_request([{"role": "user", "content": "hi"}], [tool], SETTINGS)
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.body == {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"name": "get_order", "description": "Look up", "input_schema": {"type": "object"}}
        ],
    }
    full = ModelSettings(model="m", max_output_tokens=64, stream=True, instructions="Be brief.")
    body = ADAPTER.build_request([], [], full).body
    assert (body["max_tokens"], body["stream"], body["system"]) == (64, True, "Be brief.")


def test_results_are_one_user_message_of_tool_results_in_order() -> None:
    results = [
        ResultForModel(
            response_id="m",
            call_id=c,
            name="get_order",
            is_error=c == "b",
            content={"ok": c != "b"},
        )
        for c in ("b", "a")
    ]
    (item,) = ADAPTER.result_items(results)
    assert item["role"] == "user"
    assert item["content"] == [
        {"type": "tool_result", "tool_use_id": "b", "content": '{"ok":false}', "is_error": True},
        {"type": "tool_result", "tool_use_id": "a", "content": '{"ok":true}', "is_error": False},
    ]
    assert ADAPTER.result_items([]) == []


def test_consecutive_assistant_messages_are_one_turn_answered_by_the_next_message() -> None:
    """The API combines consecutive messages of one role: each call of one answer written as
    its own assistant message is answered by the one user message after them."""
    one = {"role": "assistant", "content": [tool_use("toolu_a")]}
    two = {"role": "assistant", "content": [tool_use("toolu_b")]}
    results = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "{}"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "{}"},
    ]}  # fmt: skip
    user = {"role": "user", "content": "x"}
    request = ADAPTER.build_request([user, one, two, results], [], SETTINGS)
    assert [m["role"] for m in request.body["messages"]] == [
        "user",
        "assistant",
        "assistant",
        "user",
    ]
    half = {**results, "content": results["content"][:1]}
    with pytest.raises(AdapterError) as raised:
        ADAPTER.build_request([user, one, two, half], [], SETTINGS)
    assert (
        "messages[3] must open with one tool_result for each tool_use of messages[1..2]"
        " (toolu_a, toolu_b); the tool_results it opens with answer: toolu_a"
    ) in str(raised.value)


def test_a_conversation_that_breaks_tool_result_pairing_is_never_sent() -> None:
    assistant = {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]}
    late = {"role": "user", "content": [
        {"type": "text", "text": "here"},
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "{}"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "{}"},
    ]}  # fmt: skip
    with pytest.raises(AdapterError, match="must open with one tool_result") as raised:
        ADAPTER.build_request([{"role": "user", "content": "x"}, assistant, late], [], SETTINGS)
    # counted from 0 (as the API's own "messages.2" is), and what it found said
    assert "messages[2] must open with one tool_result for each tool_use of messages[1]" in str(
        raised.value
    )
    assert str(raised.value).endswith("the tool_results it opens with answer: none")


def test_each_refund_follow_up_answers_every_tool_use_first() -> None:
    bodies = [json.loads(a.body) for a in answers(transcript("anthropic"))]
    sent = requests(transcript("anthropic"))
    for answer, follow_up in zip(bodies, sent[1:], strict=False):
        wanted = [b["id"] for b in answer["content"] if b["type"] == "tool_use"]
        blocks = follow_up["messages"][-1]["content"]
        assert [b["tool_use_id"] for b in blocks[: len(wanted)]] == wanted
        assert all(b["type"] == "tool_result" for b in blocks[: len(wanted)])
