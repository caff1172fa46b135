"""The Gemini adapters: Interactions (stateful, steps schema) and generateContent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke
from support.paths import FIXTURES
from support.providers import answers, assert_nothing_ran, requests, run_fixture, transcript

from toolloop_cli.adapters._errors import GEMINI, classify_http_error
from toolloop_cli.adapters.gemini_generate import GeminiGenerateAdapter, synthetic_call_id
from toolloop_cli.adapters.gemini_interactions import GeminiInteractionsAdapter
from toolloop_cli.engine.types import (
    HttpResponse,
    ModelSettings,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import MalformedProviderPayload

INTERACTIONS = GeminiInteractionsAdapter()
GENERATE = GeminiGenerateAdapter()
TOOL = ToolSpec(name="get_order", description="Look up", parameters={"type": "object"})


def ok(body: Any) -> HttpResponse:
    return HttpResponse(200, {"content-type": "application/json"}, json.dumps(body).encode())


def result(call_id: str, ok_: bool = True) -> ResultForModel:
    return ResultForModel(
        response_id="r", call_id=call_id, name="get_order", is_error=not ok_, content={"ok": ok_}
    )


# -- every status, finish reason and error, through the CLI ------------------------------------


@pytest.mark.parametrize(
    ("fixture", "state", "code", "retryable"),
    [
        ("gemini/completed.yaml", "COMPLETED", 0, None),
        ("gemini/incomplete.yaml", "INCOMPLETE", 12, None),
        ("gemini/budget_exceeded.yaml", "INCOMPLETE", 12, None),
        ("gemini/failed.yaml", "FAILED", 13, True),
        ("gemini/cancelled.yaml", "FAILED", 13, False),
        ("gemini/model_output_error.yaml", "FAILED", 13, False),
        ("gemini/legacy_outputs.yaml", "FAILED", 13, False),
        ("gemini/http_400.yaml", "FAILED", 13, False),
        ("gemini/http_429.yaml", "FAILED", 13, True),
        ("gemini/http_503.yaml", "FAILED", 13, True),
        ("gemini/stream_error.yaml", "FAILED", 13, True),
        ("gemini/stream_cut.yaml", "INCOMPLETE", 12, None),
        ("gemini_generate/stop_text.yaml", "COMPLETED", 0, None),
        ("gemini_generate/max_tokens.yaml", "INCOMPLETE", 12, None),
        ("gemini_generate/safety.yaml", "REFUSED", 11, None),
        ("gemini_generate/recitation.yaml", "REFUSED", 11, None),
        ("gemini_generate/prohibited_content.yaml", "REFUSED", 11, None),
        ("gemini_generate/blocklist.yaml", "REFUSED", 11, None),
        ("gemini_generate/spii.yaml", "REFUSED", 11, None),
        ("gemini_generate/language.yaml", "REFUSED", 11, None),
        ("gemini_generate/prompt_blocked.yaml", "REFUSED", 11, None),
        ("gemini_generate/malformed_function_call.yaml", "FAILED", 13, False),
        ("gemini_generate/other.yaml", "FAILED", 13, False),
        ("gemini_generate/http_400.yaml", "FAILED", 13, False),
        ("gemini_generate/http_429.yaml", "FAILED", 13, True),
        ("gemini_generate/http_503.yaml", "FAILED", 13, True),
        ("gemini_generate/stream_error.yaml", "FAILED", 13, True),
        ("gemini_generate/stream_cut.yaml", "INCOMPLETE", 12, None),
    ],
)
def test_each_status_reason_and_error_maps_to_its_state_and_runs_nothing(
    cli: Invoke, store_path: Path, fixture: str, state: str, code: int, retryable: bool | None
) -> None:
    exit_code, view = run_fixture(cli, FIXTURES / fixture, "--max-retries", "0")
    assert (exit_code, view["state"]) == (code, state), view["reason"]
    assert_nothing_ran(view, store_path)
    if retryable is not None:
        assert view["turns"][0]["error"]["retryable"] is retryable


def test_the_retired_outputs_schema_is_refused_with_a_clear_reason() -> None:
    (answer,) = answers(FIXTURES / "gemini" / "legacy_outputs.yaml")
    with pytest.raises(MalformedProviderPayload, match="retired 'outputs' schema"):
        INTERACTIONS.parse_response(answer)


def test_a_google_retry_delay_in_the_body_becomes_the_retry_after() -> None:
    (answer, _) = answers(FIXTURES / "gemini" / "http_429.yaml")
    turn = INTERACTIONS.parse_response(answer)
    assert turn.error is not None
    assert (turn.error.status, turn.error.type, turn.error.retry_after_s) == (
        429,
        "RESOURCE_EXHAUSTED",
        2.0,
    )


@pytest.mark.parametrize(
    ("status", "rpc", "retryable"),
    [(400, "INVALID_ARGUMENT", False), (403, "PERMISSION_DENIED", False), (404, "NOT_FOUND", False),
     (429, "RESOURCE_EXHAUSTED", True), (500, "INTERNAL", True), (503, "UNAVAILABLE", True)],
)  # fmt: skip
def test_error_table(status: int, rpc: str, retryable: bool) -> None:
    body = json.dumps({"error": {"code": status, "message": "m", "status": rpc}}).encode()
    assert classify_http_error(GEMINI, status, {}, body).retryable is retryable


def test_an_api_key_error_is_never_retried_whatever_the_status() -> None:
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
    body = {"error": {"code": 500, "message": "m", "status": "INTERNAL", "details": [info]}}
    assert classify_http_error(GEMINI, 500, {}, json.dumps(body).encode()).retryable is False


# -- Interactions: continuation ----------------------------------------------------------------


def test_the_first_request_is_the_task_and_later_ones_continue_the_interaction() -> None:
    settings = ModelSettings(model="gemini-3-flash-preview")
    conversation = INTERACTIONS.start("refund it", settings)
    first = INTERACTIONS.build_request(conversation, [TOOL], settings)
    assert first.url == "https://generativelanguage.googleapis.com/v1beta/interactions"
    assert first.headers["api-revision"] == "2026-05-20"
    assert first.body["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "refund it"}]}
    ]
    assert "previous_interaction_id" not in first.body
    call = {"type": "function_call", "id": "c1", "name": "get_order", "arguments": {}}
    turn = INTERACTIONS.parse_response(
        ok({"id": "v1_a", "status": "requires_action", "steps": [call]})
    )
    conversation += [*turn.output_items, *INTERACTIONS.result_items([result("c1")])]
    second = INTERACTIONS.build_request(conversation, [TOOL], settings)
    assert second.body["previous_interaction_id"] == "v1_a"
    assert second.body["input"] == [
        {"type": "function_result", "call_id": "c1", "name": "get_order",
         "result": {"ok": True}, "is_error": False},
    ]  # fmt: skip
    assert second.body["tools"] == first.body["tools"]


def test_the_recorded_refund_requests_are_rebuilt_from_the_stored_items() -> None:
    sent = requests(transcript("gemini"))
    replies = [json.loads(a.body) for a in answers(transcript("gemini"))]
    for before, after in zip(replies, sent[1:], strict=False):
        assert after["previous_interaction_id"] == before["id"]
        pending = [s["id"] for s in before["steps"] if s["type"] == "function_call"]
        assert [s["call_id"] for s in after["input"]] == pending


def test_pending_calls_exclude_answered_ones_and_text_is_only_after_the_last_input() -> None:
    steps = [
        {"type": "user_input", "content": [{"type": "text", "text": "task"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "old"}]},
        {"type": "function_call", "id": "c1", "name": "get_order", "arguments": {}},
        {"type": "function_result", "call_id": "c1", "result": "{}"},
        {"type": "model_output", "content": [{"type": "text", "text": "new"}]},
        {"type": "function_call", "id": "c2", "name": "get_order", "arguments": {"order_id": "o"}},
    ]
    turn = INTERACTIONS.parse_response(
        ok({"id": "v1_b", "status": "requires_action", "steps": steps})
    )
    assert [c.call_id for c in turn.calls] == ["c2"] and turn.text == "new"


# -- generateContent ---------------------------------------------------------------------------


def test_synthetic_call_ids_are_stable_per_answer_and_position() -> None:
    call = {"name": "get_order", "args": {"order_id": "ord_1"}}
    a = synthetic_call_id("resp_1", 0, call)
    assert a == synthetic_call_id("resp_1", 0, dict(call)) and a.startswith("gcall_")
    assert len({a, synthetic_call_id("resp_1", 1, call), synthetic_call_id("resp_2", 0, call)}) == 3


def test_function_calls_without_ids_get_synthetic_ones_never_sent_back() -> None:
    parts: list[dict[str, Any]] = [
        {"functionCall": {"name": "get_order", "args": {"order_id": "a"}}, "thoughtSignature": "s"},
        {"functionCall": {"name": "get_order", "args": {"order_id": "b"}, "id": "given"}},
    ]
    body = {"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": parts},
                                                "finishReason": "STOP"}]}  # fmt: skip
    turn = GENERATE.parse_response(ok(body))
    first, second = turn.calls
    assert first.call_id == synthetic_call_id("r1", 0, parts[0]["functionCall"])
    assert second.call_id == "given"
    assert turn.output_items == ({"role": "model", "parts": parts},)  # signature carried back
    (item,) = GENERATE.result_items([result(first.call_id), result("given", False)])
    assert item == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_order", "response": {"ok": True}}},
        {"functionResponse": {"name": "get_order", "response": {"ok": False}, "id": "given"}},
    ]}  # fmt: skip


@pytest.mark.parametrize(
    "given", ["gcall_fake_0", "gcall_", "gcall_0123456789abcdef_x", "gcall_0123456789abcdef_0_x"]
)
def test_a_provider_id_that_only_starts_like_a_synthetic_one_is_sent_back(given: str) -> None:
    """Any id starting ``gcall_`` was taken for one toolloop made, and left out of the
    ``functionResponse``: the provider's own pairing was dropped."""
    (item,) = GENERATE.result_items([result(given)])
    assert item["parts"][0]["functionResponse"]["id"] == given


def test_the_refund_follow_ups_carry_the_thought_signature_back() -> None:
    sent = requests(transcript("gemini-generate"))
    model_turn = sent[1]["contents"][1]
    assert model_turn["role"] == "model" and "thoughtSignature" in model_turn["parts"][0]
    assert sent[1]["contents"][2]["parts"][0]["functionResponse"]["name"] == "get_order"


def test_build_request_uses_the_stream_endpoint_when_streaming() -> None:
    settings = ModelSettings(model="models/gemini-2.5-flash", stream=True, max_output_tokens=99)
    request = GENERATE.build_request([], [TOOL], settings)
    assert request.url.endswith("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert request.body["tools"] == [
        {"functionDeclarations": [{"name": "get_order", "description": "Look up",
                                   "parametersJsonSchema": {"type": "object"}}]}
    ]  # fmt: skip
    assert request.body["generationConfig"] == {"maxOutputTokens": 99}
    assert "stream" not in request.body


@pytest.mark.parametrize(
    "body",
    [
        {"candidates": []},
        {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]},
                         "finishReason": "STOP"}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": "x", "args": "{}"}}]},
                         "finishReason": "STOP"}]},
        {"candidates": [{"content": {"parts": []}, "finishReason": ["STOP"]}]},
        {"candidates": [{"content": {"parts": []}, "finishReason": True}]},
        {"candidates": [{"content": {"parts": []}, "finishReason": 1.0}]},
    ],
)  # fmt: skip
def test_generate_answers_without_the_documented_shape_are_malformed(body: Any) -> None:
    with pytest.raises(MalformedProviderPayload):
        GENERATE.parse_response(ok(body))


def test_a_max_tokens_answer_with_a_call_is_truncated_and_never_proposes_it() -> None:
    (answer,) = answers(FIXTURES / "gemini_generate" / "max_tokens.yaml")
    turn = GENERATE.parse_response(answer)
    assert turn.outcome is TurnOutcome.TRUNCATED and turn.calls == ()
    assert "never executed" in (turn.detail or "")


@pytest.mark.parametrize(
    ("number", "outcome", "finish"),
    [
        (1, TurnOutcome.FINAL_TEXT, "STOP"),
        (2, TurnOutcome.TRUNCATED, "MAX_TOKENS"),
        (3, TurnOutcome.REFUSAL, "SAFETY"),
        (4, TurnOutcome.REFUSAL, "RECITATION"),
        (5, TurnOutcome.API_FAILURE, "OTHER"),
        (9, TurnOutcome.API_FAILURE, "finish reason 9"),
    ],
)
def test_a_finish_reason_sent_as_its_enum_number_is_read_by_the_name_both_apis_give_it(
    number: int, outcome: TurnOutcome, finish: str
) -> None:
    """``$alt=json;enum-encoding=int`` (Vertex AI's REST transport) numbers the enums; the
    numbers the two APIs name differently (6 and up) are unknown reasons, never guessed."""
    candidate = {"content": {"role": "model", "parts": [{"text": "Hi"}]}, "finishReason": number}
    turn = GENERATE.parse_response(ok({"candidates": [candidate], "responseId": "r1"}))
    assert (turn.outcome, turn.finish_reason) == (outcome, finish)


def test_a_prompt_blocked_for_a_numbered_reason_is_refused() -> None:
    turn = GENERATE.parse_response(ok({"promptFeedback": {"blockReason": 1}, "responseId": "r1"}))
    assert (turn.outcome, turn.finish_reason) == (
        TurnOutcome.REFUSAL,
        "prompt_blocked:block reason 1",
    )


def test_an_answer_blocked_by_model_armor_is_a_refusal_with_the_reason_given() -> None:
    said = "The response violated Responsible AI Safety settings (Hate Speech) filters."
    candidate = {"finishReason": "MODEL_ARMOR", "finishMessage": said}
    turn = GENERATE.parse_response(ok({"candidates": [candidate], "responseId": "r1"}))
    assert (turn.outcome, turn.finish_reason, turn.calls) == (
        TurnOutcome.REFUSAL,
        "MODEL_ARMOR",
        (),
    )
    assert turn.detail == f"the answer was blocked (MODEL_ARMOR): {said}"


@pytest.mark.parametrize(
    "steps",
    [
        [{"type": []}],
        [{"type": "function_result", "call_id": ["x"]}, {"type": "model_output", "content": []}],
        [{"type": "function_call", "id": [], "name": "get_order", "arguments": {}}],
    ],
)
def test_interactions_steps_of_the_wrong_type_are_malformed_not_a_crash(steps: object) -> None:
    from toolloop_cli.adapters.gemini_interactions import parse_interaction
    from toolloop_cli.errors import MalformedProviderPayload

    body = {"id": "v1_x", "status": "requires_action", "steps": steps}
    try:
        parse_interaction(body)
    except MalformedProviderPayload:
        pass
