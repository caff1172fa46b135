"""The OpenAI Responses adapter: outcomes from recorded answers, strict arguments, request shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from support.paths import FIXTURES as ALL_FIXTURES

from toolloop_cli.adapters import get_adapter
from toolloop_cli.adapters._errors import OPENAI, classify_http_error, retry_after_seconds
from toolloop_cli.adapters._json import load_json_body
from toolloop_cli.adapters.openai_responses import OpenAIResponsesAdapter
from toolloop_cli.engine.ports import ModelAdapter
from toolloop_cli.engine.types import (
    HttpResponse,
    ModelSettings,
    ModelTurn,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import MalformedProviderPayload, UsageError
from toolloop_cli.strict_json import MAX_DEPTH, parse_arguments
from toolloop_cli.transcripts import load_cassette

FIXTURES = ALL_FIXTURES / "openai"
ADAPTER = OpenAIResponsesAdapter()
SETTINGS = ModelSettings(model="gpt-4.1-2025-04-14")
TOOL = ToolSpec(
    name="get_order",
    description="Look up an order by id",
    parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
)


def recorded(name: str) -> list[HttpResponse]:
    """The recorded answers of a fixture cassette, as a transport would hand them over."""
    cassette = load_cassette(FIXTURES / name)
    return [
        HttpResponse(
            status=i.response.status,
            headers={k: ", ".join(v) for k, v in i.response.headers.items()},
            body=i.response.body,
        )
        for i in cassette.interactions
    ]


def first_turn(name: str) -> ModelTurn:
    return ADAPTER.parse_response(recorded(name)[0])


def answer(body: Any, status: int = 200, **headers: str) -> HttpResponse:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpResponse(
        status=status, headers={"content-type": "application/json", **headers}, body=data
    )


def response(output: list[Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": output, **extra}


def call_item(call_id: str = "call_a", item_id: str = "fc_a", **extra: Any) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "get_order"}
    return {"arguments": '{"order_id":"ord_1"}', "status": "completed", **item, **extra}


def text_item(*texts: str) -> dict[str, Any]:
    parts = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": parts}


# -- outcomes from recorded fixtures -------------------------------------------------------


def test_tool_proposal_pairs_by_call_id_not_item_id() -> None:
    turn = first_turn("parallel.yaml")
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS
    assert turn.finish_reason == "completed"
    assert [c.name for c in turn.calls] == ["get_order", "get_order"]
    assert [json.loads(c.raw_arguments) for c in turn.calls] == [
        {"order_id": "ord_1001"},
        {"order_id": "ord_1002"},
    ]
    for call, item in zip(turn.calls, turn.output_items, strict=True):
        assert call.call_id == item["call_id"] and call.call_id.startswith("call_")
        assert call.item_id == item["id"] and item["id"].startswith("fc_")
        assert call.raw_arguments == item["arguments"]
    results = [
        ResultForModel(
            response_id=turn.response_id or "",
            call_id=c.call_id,
            name=c.name,
            is_error=False,
            content={"ok": True},
        )
        for c in reversed(turn.calls)
    ]
    items = ADAPTER.result_items(results)
    assert [i["call_id"] for i in items] == [c.call_id for c in reversed(turn.calls)]


def test_recorded_turn_fills_ids_model_and_usage() -> None:
    turn = first_turn("parallel.yaml")
    assert turn.response_id is not None and turn.response_id.startswith("resp_")
    assert turn.model == "gpt-4.1-2025-04-14"
    assert turn.usage.total_tokens == turn.usage.input_tokens + turn.usage.output_tokens > 0


def test_invalid_json_arguments_are_kept_raw_and_never_repaired() -> None:
    turn = first_turn("invalid_args.yaml")
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS
    (call,) = turn.calls
    assert call.raw_arguments == '{"order_id": "ord_1001"'
    # the text is not parsed here: the engine parses it under the tool's byte cap
    assert (call.arguments, call.argument_error) == (None, None)
    assert parse_arguments(call.raw_arguments)[1] == (
        "invalid JSON: Expecting ',' delimiter at position 23"
    )


@pytest.mark.parametrize(
    ("fixture", "name", "arguments"),
    [
        ("unknown_tool.yaml", "refund_everything", {"order_id": "ord_1001"}),
        (
            "schema_violation.yaml",
            "create_refund_draft",
            {"order_id": "ord_1001", "amount_cents": "4999", "reason": "arrived damaged"},
        ),
    ],
)
def test_adapter_passes_names_and_values_through_unjudged(
    fixture: str, name: str, arguments: dict[str, Any]
) -> None:
    turns = [ADAPTER.parse_response(r) for r in recorded(fixture)]
    assert [t.outcome for t in turns] == [TurnOutcome.TOOL_PROPOSALS, TurnOutcome.FINAL_TEXT]
    assert (turns[0].calls[0].name, json.loads(turns[0].calls[0].raw_arguments)) == (
        name,
        arguments,
    )


@pytest.mark.parametrize("fixture", ["incomplete.yaml", "incomplete_with_call.yaml"])
def test_incomplete_is_truncated_with_no_calls(fixture: str) -> None:
    turn = first_turn(fixture)
    assert turn.outcome is TurnOutcome.TRUNCATED
    assert turn.finish_reason == "max_output_tokens"
    assert turn.calls == ()
    assert turn.detail is not None and "max_output_tokens" in turn.detail


def test_refusal() -> None:
    turn = first_turn("refusal.yaml")
    assert turn.outcome is TurnOutcome.REFUSAL
    assert turn.text == "I'm sorry, but I can't help with that request."
    assert turn.calls == ()


@pytest.mark.parametrize(
    ("fixture", "status", "code", "retryable"),
    [
        ("http_400.yaml", 400, "decimal_below_min_value", False),
        ("http_429_quota.yaml", 429, "insufficient_quota", False),
        ("http_500.yaml", 500, None, True),
    ],
)
def test_http_errors_are_classified_failures(
    fixture: str, status: int, code: str | None, retryable: bool
) -> None:
    turn = first_turn(fixture)
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None
    assert (turn.error.status, turn.error.code, turn.error.retryable) == (status, code, retryable)
    assert turn.finish_reason == f"http_{status}"
    assert turn.detail is not None and str(status) in turn.detail


def test_http_400_keeps_type_and_message() -> None:
    error = first_turn("http_400.yaml").error
    assert error is not None and error.type == "invalid_request_error"
    assert error.message.startswith("Invalid 'temperature'")


def test_failed_in_body() -> None:
    turn = first_turn("failed.yaml")
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.finish_reason == "failed"
    assert turn.error is not None and (turn.error.code, turn.error.retryable) == (
        "server_error",
        True,
    )


def test_final_text_from_recording() -> None:
    turns = [ADAPTER.parse_response(r) for r in recorded("http_500.yaml")]
    assert turns[1].outcome is TurnOutcome.FINAL_TEXT
    assert turns[1].text == "I can't look up orders right now; please try again later."


# -- outcomes from hand-made bodies ---------------------------------------------------------


def test_final_text_concatenates_every_output_text_and_skips_reasoning() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    body = response([reasoning, text_item("Hello, ", "world"), text_item("!")])
    turn = ADAPTER.parse_response(answer(body))
    assert (turn.outcome, turn.text) == (TurnOutcome.FINAL_TEXT, "Hello, world!")
    assert turn.output_items[0] == reasoning  # carried forward verbatim


def test_text_beside_calls_is_kept() -> None:
    turn = ADAPTER.parse_response(answer(response([text_item("Looking."), call_item()])))
    assert (turn.outcome, turn.text, len(turn.calls)) == (TurnOutcome.TOOL_PROPOSALS, "Looking.", 1)


def test_refusal_wins_over_calls() -> None:
    refusal = {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}
    turn = ADAPTER.parse_response(answer(response([refusal, call_item()])))
    assert (turn.outcome, turn.text, turn.calls) == (TurnOutcome.REFUSAL, "No.", ())


@pytest.mark.parametrize("item_status", ["in_progress", "incomplete"])
def test_unfinished_call_in_completed_response_is_truncated(item_status: str) -> None:
    turn = ADAPTER.parse_response(answer(response([call_item(status=item_status)])))
    assert (turn.outcome, turn.calls) == (TurnOutcome.TRUNCATED, ())
    assert turn.detail is not None and "call_a" in turn.detail


def test_call_with_null_status_is_complete() -> None:
    turn = ADAPTER.parse_response(answer(response([call_item(status=None)])))
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS


def test_content_filter_is_truncated() -> None:
    body = response([], "incomplete", incomplete_details={"reason": "content_filter"})
    turn = ADAPTER.parse_response(answer(body))
    assert (turn.outcome, turn.finish_reason) == (TurnOutcome.TRUNCATED, "content_filter")
    assert turn.detail is not None and "content filter" in turn.detail


def test_a_cancelled_response_is_a_non_retryable_failure() -> None:
    turn = ADAPTER.parse_response(answer(response([call_item()], "cancelled")))
    assert (turn.outcome, turn.finish_reason, turn.calls) == (
        TurnOutcome.API_FAILURE,
        "cancelled",
        (),
    )
    assert turn.error is not None and not turn.error.retryable
    assert turn.detail is not None and "cancelled" in turn.detail


@pytest.mark.parametrize("status", ["in_progress", "queued"])
def test_a_background_response_not_finished_is_truncated_and_runs_nothing(status: str) -> None:
    """Background mode: no end yet is no error (INCOMPLETE, not FAILED), and nothing runs."""
    turn = ADAPTER.parse_response(answer(response([call_item()], status)))
    assert (turn.outcome, turn.finish_reason, turn.calls) == (TurnOutcome.TRUNCATED, status, ())
    assert turn.error is None
    assert turn.detail is not None and f"response is {status}: a background answer" in turn.detail


@pytest.mark.parametrize(
    ("code", "retryable"),
    [("server_error", True), ("rate_limit_exceeded", True), ("invalid_prompt", False)],
)
def test_failed_codes(code: str, retryable: bool) -> None:
    body = response([], "failed", error={"code": code, "message": "x"})
    error = ADAPTER.parse_response(answer(body)).error
    assert error is not None and (error.code, error.retryable) == (code, retryable)


MALFORMED: list[tuple[str, Any]] = [
    ("not json", b"<html>502</html>"),
    ("not utf-8", b'{"a": "\xff"}'),
    ("NaN", b'{"id": "resp_1", "status": "completed", "output": [], "x": NaN}'),
    ("duplicate keys", b'{"id": "r", "status": "completed", "status": "failed", "output": []}'),
    ("top-level array", []),
    ("missing status", {"id": "resp_1", "output": []}),
    ("unknown status", response([text_item("hi")], "done")),
    ("missing id", {"status": "completed", "output": [text_item("hi")]}),
    ("output not a list", response({"0": call_item()})),  # type: ignore[arg-type]
    ("output item not an object", response(["call"])),
    ("item without type", response([{"call_id": "call_a"}])),
    ("call without call_id", response([call_item(call_id="")])),
    (
        "call with item id only",
        response([{k: v for k, v in call_item().items() if k != "call_id"}]),
    ),
    ("call without name", response([call_item(name=None)])),
    ("arguments not a string", response([call_item(arguments={"order_id": "ord_1"})])),
    ("item id not a string", response([call_item(item_id=7)])),  # type: ignore[arg-type]
    ("repeated call_id", response([call_item(item_id="fc_1"), call_item(item_id="fc_2")])),
    ("message content not a list", response([{"type": "message", "content": "hi"}])),
    ("unknown message part", response([{"type": "message", "content": [{"type": "audio"}]}])),
    (
        "output_text without text",
        response([{"type": "message", "content": [{"type": "output_text"}]}]),
    ),
    ("completed with nothing", response([])),
    ("completed with only reasoning", response([{"type": "reasoning", "summary": []}])),
    ("incomplete reason not text", response([], "incomplete", incomplete_details={"reason": 3})),
]


@pytest.mark.parametrize(("case", "body"), MALFORMED, ids=[c for c, _ in MALFORMED])
def test_malformed_payload_raises(case: str, body: Any) -> None:
    with pytest.raises(MalformedProviderPayload) as info:
        ADAPTER.parse_response(answer(body))
    assert info.value.provider == "openai" and not info.value.retryable


# -- error classification --------------------------------------------------------------------


def classify(status: int, body: Any = b"", **headers: str) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return classify_http_error(OPENAI, status, headers, data)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (404, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
    ],
)
def test_status_table(status: int, retryable: bool) -> None:
    assert classify(status).retryable is retryable


def test_should_retry_header_comes_first() -> None:
    quota = {"error": {"type": "insufficient_quota", "code": "insufficient_quota"}}
    assert classify(400, **{"x-should-retry": "true"}).retryable is True
    assert classify(503, **{"x-should-retry": "false"}).retryable is False
    assert classify(429, quota, **{"x-should-retry": "true"}).retryable is True
    assert classify(429, quota).retryable is False
    assert classify(429, {"error": {"type": "tokens", "code": "rate_limit_exceeded"}}).retryable


def test_non_json_error_body_keeps_status_and_text() -> None:
    turn = ADAPTER.parse_response(answer(b"<html>Bad gateway</html>", status=502))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None and (turn.error.status, turn.error.retryable) == (502, True)
    assert "Bad gateway" in turn.error.message


def test_retry_after_forms() -> None:
    now = datetime(2026, 4, 12, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "1.5", "retry-after-ms": "250"}) == 0.25
    date = "Sun, 12 Apr 2026 12:00:30 GMT"
    assert retry_after_seconds({"retry-after": date}, now=now) == 30.0
    assert retry_after_seconds({"retry-after": "Sun, 12 Apr 2026 11:00:00 GMT"}, now=now) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "nan"}) is None
    assert retry_after_seconds({}) is None
    assert classify(429, **{"retry-after": "3"}).retry_after_s == 3.0


# -- strict arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": NaN}', "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": -Infinity}', "-Infinity"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": {"b": 1, "b": 1}}', "duplicate key 'b'"),
        ("[1, 2]", "an array"),
        ("null", "null"),
        ('"text"', "a string"),
        ("12", "a number"),
        ("", "invalid JSON"),
        ('{"a": 1,}', "invalid JSON"),
        ("{'a': 1}", "invalid JSON"),
        ('{"a": "\\ud800"}', "surrogate"),
        ('{"a": 1} trailing', "invalid JSON"),
        ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "nesting"),
        ("[" * 100_000 + "]" * 100_000, "nesting"),
    ],
)
def test_parse_arguments_refuses(text: str, fragment: str) -> None:
    value, reason = parse_arguments(text)
    assert value is None
    assert reason is not None and fragment in reason


def test_parse_arguments_accepts_objects_exactly() -> None:
    assert parse_arguments('{"order_id": "ord_1", "n": 1.5, "l": [true, null]}') == (
        {"order_id": "ord_1", "n": 1.5, "l": [True, None]},
        None,
    )
    assert parse_arguments(" {} ") == ({}, None)


def test_load_json_body_raises_malformed() -> None:
    assert load_json_body(b'{"a": [1]}', "openai") == {"a": [1]}
    for bad in (b"{", b"\xff", b'{"a": Infinity}'):
        with pytest.raises(MalformedProviderPayload):
            load_json_body(bad, "openai")


# -- requests and results -------------------------------------------------------------------


def test_start_is_one_user_message() -> None:
    assert ADAPTER.start("do it", SETTINGS) == [{"role": "user", "content": "do it"}]


def test_build_request_shape() -> None:
    conversation = ADAPTER.start("task", SETTINGS)
    request = ADAPTER.build_request(conversation, [TOOL], SETTINGS)
    assert (request.method, request.url) == ("POST", "https://api.openai.com/v1/responses")
    assert request.headers == {"content-type": "application/json"}
    assert request.body == {
        "model": "gpt-4.1-2025-04-14",
        "input": [{"role": "user", "content": "task"}],
        "tools": [
            {
                "type": "function",
                "name": "get_order",
                "description": "Look up an order by id",
                "parameters": TOOL.parameters,
                "strict": False,
            }
        ],
    }


def test_build_request_optional_fields() -> None:
    full = ModelSettings(model="m", instructions="Be brief.", max_output_tokens=64, stream=True)
    adapter = OpenAIResponsesAdapter(base_url="http://127.0.0.1:8080/v1/")
    request = adapter.build_request([], [], full)
    assert request.url == "http://127.0.0.1:8080/v1/responses"
    assert request.body == {
        "model": "m",
        "input": [],
        "instructions": "Be brief.",
        "max_output_tokens": 64,
        "stream": True,
    }


def test_build_request_never_carries_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-secret")
    request = ADAPTER.build_request(ADAPTER.start("task", SETTINGS), [TOOL], SETTINGS)
    text = request.model_dump_json().lower()
    for secret in ("sk-test-secret-value", "org-secret", "authorization", "bearer", "api-key"):
        assert secret not in text


def test_result_items_shape_and_order() -> None:
    results = [
        ResultForModel(
            response_id="resp_1",
            call_id=f"call_{n}",
            name="get_order",
            is_error=n == 2,
            content={"z": n, "a": "é", "ok": n != 2},
        )
        for n in (2, 1)
    ]
    assert ADAPTER.result_items(results) == [
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": '{"a":"é","ok":false,"z":2}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": '{"a":"é","ok":true,"z":1}',
        },
    ]


def test_get_adapter_table() -> None:
    adapter: ModelAdapter = get_adapter("openai", "responses")
    assert (adapter.provider, adapter.api_family, adapter.revision) == (
        "openai",
        "responses",
        "openai-responses/1",
    )
    local = get_adapter("openai", "responses", base_url="http://localhost:9/v1")
    assert local.build_request([], [], SETTINGS).url == "http://localhost:9/v1/responses"
    with pytest.raises(UsageError, match="no adapter for openai/chat"):
        get_adapter("openai", "chat")
    with pytest.raises(UsageError):
        get_adapter("os", "system")


# -- streamed answers ----------------------------------------------------------------------


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def streamed(data: bytes, chunk: int = 7) -> HttpResponse:
    pieces = iter([data[i : i + chunk] for i in range(0, len(data), chunk)])
    return HttpResponse(200, {"content-type": "text/event-stream; charset=utf-8"}, chunks=pieces)


STREAM_START: list[dict[str, Any]] = [
    {"type": "response.created", "response": response([], "in_progress")},
    {"type": "response.output_item.added", "output_index": 0, "item": call_item(arguments="")},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_a", "delta": '{"order'},
]


def test_stream_is_parsed_from_its_terminal_event() -> None:
    done = {"type": "response.completed", "response": response([call_item()])}
    turn = ADAPTER.parse_response(streamed(sse(*STREAM_START, done) + b"data: [DONE]\n\n"))
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS
    assert json.loads(turn.calls[0].raw_arguments) == {"order_id": "ord_1"}


def test_stream_cut_before_terminal_event_is_truncated() -> None:
    turn = ADAPTER.parse_response(streamed(sse(*STREAM_START)))
    assert (turn.outcome, turn.finish_reason, turn.calls) == (
        TurnOutcome.TRUNCATED,
        "stream_incomplete",
        (),
    )


def test_stream_cut_mid_event_is_truncated_but_a_bad_whole_event_is_malformed() -> None:
    done = sse({"type": "response.completed", "response": response([call_item()])})
    cut = ADAPTER.parse_response(streamed(sse(*STREAM_START) + done[:-40]))
    assert (cut.outcome, cut.calls) == (TurnOutcome.TRUNCATED, ())
    unterminated = ADAPTER.parse_response(streamed(sse(*STREAM_START) + done.rstrip(b"\n")))
    assert unterminated.outcome is TurnOutcome.TOOL_PROPOSALS
    with pytest.raises(MalformedProviderPayload):
        ADAPTER.parse_response(streamed(b"data: {not json}\n\n" + done))


def test_stream_error_event_is_a_failure() -> None:
    error = {"type": "error", "code": "server_error", "message": "boom", "param": None}
    turn = ADAPTER.parse_response(streamed(sse(*STREAM_START, error)))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None and (turn.error.code, turn.error.retryable) == (
        "server_error",
        True,
    )


def test_stream_over_the_byte_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolloop_cli.adapters._answer.MAX_BODY_BYTES", 64)
    with pytest.raises(MalformedProviderPayload, match="larger than 64 bytes"):
        ADAPTER.parse_response(streamed(sse(*STREAM_START)))


# -- properties ----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid seven times out of eight, any JSON value otherwise: reaches the deep branches."""
    return st.sampled_from(range(8)).flatmap(lambda n: valid if n else JSON_VALUES)


STATUS = st.sampled_from(["completed", "incomplete", "failed", "queued", "cancelled", "x"])
PART = st.fixed_dictionaries(
    {"type": mostly(st.sampled_from(["output_text", "refusal"]))},
    optional={"text": mostly(st.text(max_size=5)), "refusal": mostly(st.text(max_size=5))},
)
ITEM = st.fixed_dictionaries(
    {
        "type": mostly(st.sampled_from(["function_call", "message", "reasoning"])),
        "call_id": mostly(st.sampled_from(["call_1", "call_2"])),
        "name": mostly(st.just("get_order")),
        "arguments": mostly(st.sampled_from(['{"a": 1}', '{"a": ', "[]"])),
        "content": mostly(st.lists(PART, max_size=2)),
    },
    optional={"id": mostly(st.just("fc_1")), "status": mostly(STATUS | st.none())},
)
RESPONSES = st.fixed_dictionaries(
    {
        "id": mostly(st.just("resp_1")),
        "status": mostly(STATUS),
        "output": mostly(st.lists(ITEM, max_size=3)),
    },
    optional={
        "usage": mostly(st.fixed_dictionaries({"input_tokens": JSON_VALUES})),
        "model": JSON_VALUES,
        "error": mostly(st.fixed_dictionaries({"code": JSON_VALUES, "message": JSON_VALUES})),
        "incomplete_details": mostly(st.fixed_dictionaries({"reason": JSON_VALUES})),
    },
)


def _turn_or_malformed(body: bytes, status: int = 200) -> None:
    try:
        turn = ADAPTER.parse_response(HttpResponse(status, {}, body))
    except MalformedProviderPayload:
        return
    assert isinstance(turn, ModelTurn)
    if turn.outcome is not TurnOutcome.TOOL_PROPOSALS:
        assert turn.calls == ()


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_json_body_gives_a_turn_or_malformed(value: Any) -> None:
    _turn_or_malformed(json.dumps(value).encode())


@settings(max_examples=500, deadline=None)
@given(RESPONSES)
def test_response_shaped_bodies_give_a_turn_or_malformed(value: Any) -> None:
    _turn_or_malformed(json.dumps(value).encode())


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=400, max_value=599), st.binary(max_size=200))
def test_any_error_answer_is_a_failure(status: int, body: bytes) -> None:
    turn = ADAPTER.parse_response(HttpResponse(status, {}, body))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None and turn.error.status == status
