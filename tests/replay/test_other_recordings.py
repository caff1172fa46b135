"""Recordings made by other tools replay as recorded, streamed and not, for every provider.

Each test writes a cassette the way another client records a tool loop against the
provider's API (its own request shapes, the provider's JSON and event-stream answers) and
replays it with ``toolloop replay CASSETTE --results recorded --json``: exit 0, no
divergence, the calls and results the recording holds, and the end state it reached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recordings import (
    ANTHROPIC,
    INTERACTIONS,
    JSON,
    OPENAI,
    SSE,
    an_message,
    an_result,
    an_stream,
    an_text,
    an_use,
    calls,
    exchange,
    generate_uri,
    gg_call,
    gg_response,
    gg_stream,
    gi_answer,
    gi_stream,
    oa_call,
    oa_output,
    oa_response,
    oa_stream,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK as REFUND_TASK

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TASK = "What is the weather in Paris and in Rome?"
EXPECTED = [
    ("get_weather", "SUCCEEDED", {"city": "Paris", "temp_c": 21}),
    ("get_weather", "SUCCEEDED", {"city": "Rome", "temp_c": 25}),
]
PARIS, ROME = EXPECTED[0][2], EXPECTED[1][2]
ROOT_TRANSCRIPT = REFUND_OPENAI


def openai_loop(stream: bool) -> list[dict[str, Any]]:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": WEATHER,
            "strict": True,
        }
    ]
    first = [{"role": "user", "content": [{"type": "input_text", "text": TASK}]}]
    calls_out = [
        oa_call("call_p", "get_weather", {"city": "Paris"}),
        oa_call("call_r", "get_weather", {"city": "Rome"}),
    ]
    answers = [
        oa_response("resp_1", calls_out),
        oa_response("resp_2", [oa_text("21 °C in Paris, 25 °C in Rome.")]),
    ]
    second = [*first, *calls_out, oa_output("call_p", PARIS), oa_output("call_r", ROME)]
    bodies = [
        {"model": "gpt-4.1", "input": items, "tools": tools, "stream": stream}
        for items in (first, second)
    ]
    return [
        exchange(
            OPENAI,
            body,
            oa_stream(answer) if stream else answer,
            content_type=SSE if stream else JSON,
        )
        for body, answer in zip(bodies, answers, strict=True)
    ]


def anthropic_loop(stream: bool) -> list[dict[str, Any]]:
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
    first = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    uses = [
        an_text("Let me look both up."),
        an_use("toolu_p", "get_weather", {"city": "Paris"}),
        an_use("toolu_r", "get_weather", {"city": "Rome"}),
    ]
    answers = [
        an_message("msg_1", uses, "tool_use"),
        an_message("msg_2", [an_text("21 °C in Paris, 25 °C in Rome.")], "end_turn"),
    ]
    results = [an_result("toolu_p", compact_json(PARIS)), an_result("toolu_r", compact_json(ROME))]
    second = [*first, {"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    bodies = [
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "messages": m,
            "tools": tools,
            "stream": stream,
        }
        for m in (first, second)
    ]
    return [
        exchange(
            ANTHROPIC,
            body,
            an_stream(answer) if stream else answer,
            content_type=SSE if stream else JSON,
        )
        for body, answer in zip(bodies, answers, strict=True)
    ]


def generate_loop(stream: bool) -> list[dict[str, Any]]:
    tools = [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather in a city",
                    "parametersJsonSchema": WEATHER,
                }
            ]
        }
    ]
    first = [{"role": "user", "parts": [{"text": TASK}]}]
    parts = [gg_call("get_weather", {"city": "Paris"}), gg_call("get_weather", {"city": "Rome"})]
    parts[0]["thoughtSignature"] = "CiQBcsjafQ+/sig=="
    answers = [
        gg_response("r1", parts),
        gg_response("r2", [{"text": "21 °C in Paris, 25 °C in Rome."}]),
    ]
    responses = [
        {"functionResponse": {"name": "get_weather", "response": PARIS}},
        {"functionResponse": {"name": "get_weather", "response": ROME}},
    ]
    second = [*first, {"role": "model", "parts": parts}, {"role": "user", "parts": responses}]
    uri = generate_uri(stream="sse" if stream else None)
    return [
        exchange(
            uri,
            {"contents": contents, "tools": tools},
            gg_stream(answer) if stream else answer,
            content_type="text/event-stream" if stream else "application/json; charset=UTF-8",
        )
        for contents, answer in zip((first, second), answers, strict=True)
    ]


def interactions_loop(stream: bool) -> list[dict[str, Any]]:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": WEATHER,
        }
    ]
    steps = [
        {
            "type": "function_call",
            "id": "fc_p",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
        },
        {
            "type": "function_call",
            "id": "fc_r",
            "name": "get_weather",
            "arguments": {"city": "Rome"},
        },
    ]
    text = [{"type": "model_output", "content": [{"type": "text", "text": "21 °C and 25 °C."}]}]
    answers = [gi_answer("int_1", steps, "requires_action"), gi_answer("int_2", text, "completed")]
    first: dict[str, Any] = {
        "model": "gemini-3-flash-preview",
        "input": [{"type": "user_input", "content": [{"type": "text", "text": TASK}]}],
        "tools": tools,
    }
    results = [
        {"type": "function_result", "call_id": "fc_p", "name": "get_weather", "result": PARIS},
        {"type": "function_result", "call_id": "fc_r", "name": "get_weather", "result": ROME},
    ]
    second = {
        "model": first["model"],
        "previous_interaction_id": "int_1",
        "input": results,
        "tools": tools,
    }
    if stream:
        first, second = {**first, "stream": True}, {**second, "stream": True}
    return [
        exchange(
            INTERACTIONS,
            body,
            gi_stream(answer) if stream else answer,
            content_type="text/event-stream" if stream else "application/json; charset=UTF-8",
        )
        for body, answer in zip((first, second), answers, strict=True)
    ]


def compact_json(value: Any) -> str:
    import json

    return json.dumps(value)


LOOPS = {
    "openai": openai_loop,
    "anthropic": anthropic_loop,
    "gemini-generate": generate_loop,
    "gemini-interactions": interactions_loop,
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", sorted(LOOPS))
def test_a_tool_loop_replays_as_recorded_streamed_or_not(
    cli: Invoke, tmp_path: Path, provider: str, stream: bool
) -> None:
    code, out = replay(cli, write(tmp_path, LOOPS[provider](stream)))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == EXPECTED
    assert out["final_text"]


def test_interactions_results_inside_a_user_input_step_are_the_recorded_results(
    cli: Invoke, tmp_path: Path
) -> None:
    """rig sends its results inside a ``user_input`` step, and the API answers them: they
    were not seen, so the replay answered "the recording has no result" (exit 17)."""
    loop = interactions_loop(False)
    body = json.loads(loop[1]["request"]["body"])
    body["input"] = [{"type": "user_input", "content": body["input"]}]
    loop[1]["request"]["body"] = json.dumps(body)
    code, out = replay(cli, write(tmp_path, loop))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == EXPECTED


# -- recorded retries -----------------------------------------------------------------------------

#: provider → (status, error body, headers) of an answer a client retries
RETRYABLE = {
    "openai": (
        429,
        {
            "error": {
                "message": "Rate limit reached",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        },
        {"retry-after": "20"},
    ),
    "anthropic": (
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        {},
    ),
    "gemini-generate": (
        503,
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
        {},
    ),
    "gemini-interactions": (
        429,
        {"error": {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED"}},
        {},
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", sorted(LOOPS))
def test_a_request_the_client_retried_replays_as_a_retry(
    cli: Invoke, tmp_path: Path, provider: str, stream: bool
) -> None:
    """The same request answered twice, a retryable error then the answer: one operation."""
    loop = LOOPS[provider](stream)
    status, error, headers = RETRYABLE[provider]
    failed = exchange(loop[1]["request"]["uri"], None, error, status=status, extra_headers=headers)
    failed["request"] = loop[1]["request"]  # the second request, sent twice
    code, out = replay(cli, write(tmp_path, [loop[0], failed, *loop[1:]]))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert len(out["operations"]) == 1
    assert [t["outcome"] for t in out["turns"]] == ["TOOL_PROPOSALS", "API_FAILURE", "FINAL_TEXT"]
    assert calls(out) == EXPECTED


@pytest.mark.parametrize("provider", sorted(LOOPS))
def test_a_retryable_failure_the_client_gave_up_on_ends_the_run_failed_as_recorded(
    cli: Invoke, tmp_path: Path, provider: str
) -> None:
    """The recording ends on a 429 (or 529…) its client never sent again: the replay sends
    no request the recording never had, and the run ends FAILED on the recorded error."""
    loop = LOOPS[provider](False)
    status, error, headers = RETRYABLE[provider]
    failed = exchange(loop[1]["request"]["uri"], None, error, status=status, extra_headers=headers)
    failed["request"] = loop[1]["request"]
    code, out = replay(cli, write(tmp_path, [loop[0], failed]))
    assert (code, out["state"], out["divergences"]) == (13, "FAILED", [])
    assert "the recording ends here: its client did not send the request again" in out["reason"]
    assert [t["outcome"] for t in out["turns"]] == ["TOOL_PROPOSALS", "API_FAILURE"]
    assert out["counters"]["retries"] == 0


def test_a_corrected_resend_after_a_refused_request_is_a_run_of_its_own(
    cli: Invoke, tmp_path: Path
) -> None:
    """After a 400 (not retryable) the client fixed its tools and sent again: that request
    starts a new operation from the history it carries, instead of being taken for a retry."""
    loop = openai_loop(False)
    refused = {
        "error": {
            "message": "Invalid schema for function 'get_weather'.",
            "type": "invalid_request_error",
            "code": "invalid_function_parameters",
        }
    }
    bad = exchange(OPENAI, None, refused, status=400)
    bad["request"] = loop[1]["request"]
    code, out = replay(cli, write(tmp_path, [loop[0], bad, loop[1]]))
    assert out["divergences"] == []
    assert [(op["interactions"], op["state"]) for op in out["operations"]] == [
        ([0, 1], "FAILED"),
        ([2], "COMPLETED"),
    ]
    assert code == 13  # the first operation ended on the recorded refusal, as recorded


# -- where the request went, and how the answer came ---------------------------------------------


@pytest.mark.parametrize(
    "uri",
    ["https://api.deepseek.com/responses", "https://gateway.example/proxy/openai/responses"],
    ids=["no-v1", "gateway"],
)
def test_a_responses_endpoint_without_v1_is_recognised(
    cli: Invoke, tmp_path: Path, uri: str
) -> None:
    loop = openai_loop(True)
    for interaction in loop:
        interaction["request"]["uri"] = uri
    code, out = replay(cli, write(tmp_path, loop))
    assert (code, out["state"], out["divergences"], out["provider"]) == (
        0,
        "COMPLETED",
        [],
        "openai",
    )
    assert calls(out) == EXPECTED


@pytest.mark.parametrize("provider", sorted(LOOPS))
def test_an_event_stream_recorded_without_headers_is_read_as_a_stream(
    cli: Invoke, tmp_path: Path, provider: str
) -> None:
    loop = LOOPS[provider](True)
    for interaction in loop:
        interaction["response"]["headers"] = {}
    code, out = replay(cli, write(tmp_path, loop))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == EXPECTED


def test_stream_generate_content_without_alt_sse_is_a_json_array_of_chunks(
    cli: Invoke, tmp_path: Path
) -> None:
    """``:streamGenerateContent`` without ``?alt=sse`` answers with a JSON array of chunks."""
    from recordings import gg_chunks

    loop = generate_loop(False)
    for interaction in loop:
        answer = json.loads(interaction["response"]["body"]["string"])
        interaction["request"]["uri"] = generate_uri(stream="json")
        interaction["response"]["body"]["string"] = (
            "[" + ",\r\n".join(json.dumps(chunk) for chunk in gg_chunks(answer)) + "]"
        )
    code, out = replay(cli, write(tmp_path, loop))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == EXPECTED
    assert out["final_text"] == "21 °C in Paris, 25 °C in Rome."


def test_a_background_answer_is_the_last_poll_of_it(cli: Invoke, tmp_path: Path) -> None:
    """OpenAI background mode: each POST is answered ``queued``; GET polls return it later."""
    loop = openai_loop(False)
    interactions: list[dict[str, Any]] = []
    for index, interaction in enumerate(loop):
        body = json.loads(interaction["request"]["body"])
        interaction["request"]["body"] = json.dumps({**body, "background": True})
        answer = json.loads(interaction["response"]["body"]["string"])
        queued = {**answer, "status": "queued", "output": [], "background": True}
        running = {**queued, "status": "in_progress"}
        interactions.append(exchange(OPENAI, None, queued))
        interactions[-1]["request"] = interaction["request"]
        poll = f"{OPENAI}/{answer['id']}?stream=false"
        polls = [running, answer] if index else [answer]
        interactions += [exchange(poll, None, reply, method="GET") for reply in polls]
    code, out = replay(cli, write(tmp_path, interactions))
    assert (code, out["state"], out["divergences"], out["skipped"]) == (0, "COMPLETED", [], [])
    assert out["operations"][0]["interactions"] == [0, 1, 2, 3, 4]
    assert calls(out) == EXPECTED


def test_toolloop_replays_its_own_recording_made_against_a_base_url_without_v1(
    cli: Invoke, tmp_path: Path
) -> None:
    """OPENAI_BASE_URL=https://host (no /v1, as DeepSeek and gateways are set up): toolloop
    sends to /responses, records that URI, and replays its own recording of it."""
    from toolloop_cli.transcripts import server

    record = tmp_path / "recorded.yaml"
    with server.start(ROOT_TRANSCRIPT) as handle:
        env = {"OPENAI_BASE_URL": handle.url, "OPENAI_API_KEY": "test-key"}
        paused = cli(
            "run", REFUND_TASK, "--registry", str(REGISTRY), "--provider", "openai",
            "--model", "gpt-4.1-2025-04-14", "--record", str(record), "--json", env=env,
        )  # fmt: skip
        assert paused.exit_code == 10, paused.output
        (approval,) = json_out(paused)["approvals"]
        done = cli("approve", approval["approval_id"], "--as", "ops-lead", "--resume", env=env)
        assert done.exit_code == 0, done.output
        paths = {entry["path"] for entry in handle.provider.received}
    assert paths == {"/responses"}
    replayed = cli("replay", str(record), "--strict-requests", "--json")
    out = json_out(replayed)
    assert (replayed.exit_code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
