"""Generate the per-outcome fixture cassettes of the Anthropic and Gemini adapters.

    .venv/bin/python scripts/make_fixtures.py           # (re)write tests/fixtures/{anthropic,...}
    .venv/bin/python scripts/make_fixtures.py --check   # exit 1 if a file would change

Each fixture is one provider answer (every stop/finish reason, status and error the adapters
map) to the first request of that provider's refund transcript; a few have a second answer so
that a retried or continued turn can complete. Shapes follow the providers' SDK types and
recordings (see /work/shared/wire-formats.md); nothing depends on the clock.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_transcripts as mt

from toolloop_cli.transcripts.cassette import (
    Interaction,
    RecordedResponse,
    dump_cassette,
    load_cassette,
)

FIXTURES = mt.ROOT / "tests" / "fixtures"
Answer = tuple[int, dict[str, str], str]
JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream; charset=utf-8"}


def first_request(transcript: str) -> Any:
    return load_cassette(mt.TRANSCRIPTS / transcript).interactions[0].request


def fixture(transcript: str, answers: list[Answer]) -> list[Interaction]:
    request = first_request(transcript)
    return [
        Interaction.of(
            request, RecordedResponse(status, {k: [v] for k, v in h.items()}, b.encode())
        )
        for status, h, b in answers
    ]


def ok(body: Any) -> Answer:
    return 200, JSON, mt.compact(body)


# -- Anthropic ----------------------------------------------------------------------------------

TEXT = "Order ord_1001 was delivered; I need more details before refunding."


def message(stop: str, content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "msg_01" + mt.token(f"fixture/{stop}/{len(content)}", 22),
        "type": "message",
        "role": "assistant",
        "model": mt.MODELS["anthropic"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": "###" if stop == "stop_sequence" else None,
        "usage": {"input_tokens": 212, "output_tokens": 17},
        **extra,
    }


def text(value: str = TEXT) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(n: int, order: str = "ord_1001", **changes: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": f"toolu_01Fixture{n:014d}", "name": "get_order"}
    return {**block, "input": {"order_id": order}, **changes}


def anthropic_error(status: int, kind: str, msg: str, **headers: str) -> Answer:
    body = {"type": "error", "error": {"type": kind, "message": msg}, "request_id": "req_011CFx"}
    return status, {**JSON, **headers}, mt.compact(body)


def anthropic_sse(events: list[dict[str, Any]]) -> Answer:
    return 200, SSE, mt.sse([(e["type"], e) for e in events])


def anthropic_start(stop: str = "x") -> list[dict[str, Any]]:
    shell = {**message(stop, []), "stop_reason": None, "stop_sequence": None}
    return [{"type": "message_start", "message": shell}]


def block_events(index: int, block: dict[str, Any], raw: str | None = None) -> list[dict[str, Any]]:
    opened = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": index, "content_block": opened}
    ]
    if block["type"] == "tool_use":
        for part in mt.pieces(raw if raw is not None else mt.compact(block["input"])):
            delta = {"type": "input_json_delta", "partial_json": part}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
    else:
        delta = {"type": "text_delta", "text": block["text"]}
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
    return events


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_end(reason: str, **delta: Any) -> list[dict[str, Any]]:
    body = {"stop_reason": reason, "stop_sequence": None, **delta}
    return [
        {"type": "message_delta", "delta": body, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]


REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was declined."}


def anthropic() -> dict[str, list[Answer]]:
    done = ok(message("end_turn", [text("Done.")]))
    return {
        "end_turn.yaml": [ok(message("end_turn", [text()]))],
        "stop_sequence.yaml": [ok(message("stop_sequence", [text()]))],
        "parallel_tool_use.yaml": [
            ok(
                message(
                    "tool_use", [text("Looking both up."), tool_use(1), tool_use(2, "ord_1002")]
                )
            ),
            done,
        ],
        "max_tokens_tool_use.yaml": [
            ok(message("max_tokens", [text("Let me"), tool_use(1, input={})]))
        ],
        "context_window.yaml": [ok(message("model_context_window_exceeded", [text("I")]))],
        "refusal.yaml": [ok(message("refusal", [text("")], stop_details=REFUSAL))],
        "pause_turn.yaml": [
            ok(message("pause_turn", [text("Still searching the order history.")])),
            done,
        ],
        "http_400.yaml": [anthropic_error(400, "invalid_request_error", "max_tokens: too large")],
        "http_401.yaml": [anthropic_error(401, "authentication_error", "invalid x-api-key")],
        "http_403.yaml": [anthropic_error(403, "permission_error", "no access to this model")],
        "http_404.yaml": [anthropic_error(404, "not_found_error", "model: claude-nope")],
        "http_413.yaml": [anthropic_error(413, "request_too_large", "Request exceeds size")],
        "http_429.yaml": [
            anthropic_error(429, "rate_limit_error", "rate limit", **{"retry-after": "1"}),
            done,
        ],
        "http_429_spend_limit.yaml": [
            (
                429,
                JSON,
                mt.compact(
                    {
                        "type": "error",
                        "error": {
                            "type": "rate_limit_error",
                            "message": "You have reached your specified API usage limits.",
                            "details": {"error_code": "enforced_spend_limit_reached"},
                        },
                    }
                ),
            )
        ],
        "http_500.yaml": [anthropic_error(500, "api_error", "Internal server error"), done],
        "http_529.yaml": [anthropic_error(529, "overloaded_error", "Overloaded"), done],
        "stream_overloaded.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block_events(0, text("Let me")),
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ]
            )
        ],
        "stream_max_tokens_tool_use.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block_events(0, tool_use(1), raw='{"order_id": "ord_10'),
                    *message_end("max_tokens"),
                ]
            )
        ],
        "stream_cut_tool_use.yaml": [
            anthropic_sse([*anthropic_start(), *block_events(0, tool_use(1))])
        ],
        "stream_refusal.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block_events(0, text("")),
                    stop(0),
                    *message_end("refusal", stop_details=REFUSAL),
                ]
            )
        ],
        "stream_tool_use.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block_events(0, text("Looking it up.")),
                    stop(0),
                    *block_events(1, tool_use(1)),
                    stop(1),
                    *message_end("tool_use"),
                ]
            ),
            done,
        ],
    }


# -- Gemini Interactions ------------------------------------------------------------------------


def interaction(status: str, steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "v1_" + mt.token(f"fixture/{status}/{len(steps)}", 43),
        "object": "interaction",
        "model": mt.MODELS["gemini"],
        "status": status,
        "steps": steps,
        "usage": {"total_input_tokens": 212, "total_output_tokens": 9, "total_tokens": 221},
        **extra,
    }


def output(value: str = TEXT) -> dict[str, Any]:
    return {"type": "model_output", "content": [{"type": "text", "text": value}]}


def call_step(n: int = 1) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fx{n:06d}", "name": "get_order", "arguments": {}}


def google_error(status: int, rpc: str, msg: str, delay: str | None = None) -> Answer:
    error: dict[str, Any] = {"code": status, "message": msg, "status": rpc}
    if delay is not None:
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
        error["details"] = [retry]
    return status, JSON, mt.compact({"error": error})


def gemini_sse(events: list[dict[str, Any]], done: bool = True) -> Answer:
    body = mt.sse([(e["event_type"], e) for e in events])
    return (
        200,
        {"content-type": "text/event-stream"},
        body + ("event: done\ndata: [DONE]\n\n" if done else ""),
    )


def gemini() -> dict[str, list[Answer]]:
    shell = {"id": "v1_fixturestream", "object": "interaction", "model": mt.MODELS["gemini"]}
    created = {
        "event_type": "interaction.created",
        "interaction": {**shell, "status": "in_progress"},
    }
    started = {"event_type": "step.start", "index": 0, "step": {**call_step(), "arguments": {}}}
    partial = {"type": "arguments_delta", "arguments": '{"order_id": "ord_'}
    return {
        "completed.yaml": [ok(interaction("completed", [output()]))],
        "incomplete.yaml": [ok(interaction("incomplete", [output("The order"), call_step()]))],
        "budget_exceeded.yaml": [ok(interaction("budget_exceeded", [output("The")]))],
        "failed.yaml": [
            ok(interaction("failed", [], errors=[{"code": "internal", "message": "boom"}]))
        ],
        "cancelled.yaml": [ok(interaction("cancelled", []))],
        "model_output_error.yaml": [
            ok(
                interaction(
                    "completed",
                    [{"type": "model_output", "error": {"code": 3, "message": "blocked"}}],
                )
            )
        ],
        "legacy_outputs.yaml": [
            ok(
                {
                    "id": "v1_legacy",
                    "status": "completed",
                    "role": "model",
                    "outputs": [{"type": "text", "text": TEXT}],
                }
            )
        ],
        "http_400.yaml": [
            google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
        ],
        "http_429.yaml": [
            google_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted.", "2s"),
            ok(interaction("completed", [output("Done.")])),
        ],
        "http_503.yaml": [google_error(503, "UNAVAILABLE", "The model is overloaded.")],
        "stream_error.yaml": [
            gemini_sse(
                [
                    created,
                    started,
                    {
                        "event_type": "error",
                        "error": {"message": "Deadline expired.", "code": "gateway_timeout"},
                    },
                ],
                done=False,
            )
        ],
        "stream_cut.yaml": [
            gemini_sse(
                [created, started, {"event_type": "step.delta", "index": 0, "delta": partial}],
                done=False,
            )
        ],
    }


# -- Gemini generateContent ---------------------------------------------------------------------


def candidate(finish: str | None, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0, **extra}
    if finish is not None:
        body["finishReason"] = finish
    return {
        "candidates": [body],
        "usageMetadata": {
            "promptTokenCount": 212,
            "candidatesTokenCount": 9,
            "totalTokenCount": 221,
        },
        "modelVersion": mt.MODELS["gemini-generate"],
        "responseId": mt.token(f"fixture/{finish}", 23),
    }


def generate() -> dict[str, list[Answer]]:
    call = {"functionCall": {"name": "get_order", "args": {"order_id": "ord_1001"}}}
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 212, "totalTokenCount": 212},
        "modelVersion": mt.MODELS["gemini-generate"],
        "responseId": "fixtureblocked000000000",
    }
    fixtures: dict[str, list[Answer]] = {
        "stop_text.yaml": [ok(candidate("STOP", [{"text": TEXT}]))],
        "max_tokens.yaml": [ok(candidate("MAX_TOKENS", [{"text": "The order"}, call]))],
        "prompt_blocked.yaml": [ok(blocked)],
        "malformed_function_call.yaml": [
            ok(candidate("MALFORMED_FUNCTION_CALL", [], finishMessage="Malformed function call"))
        ],
        "other.yaml": [ok(candidate("OTHER", []))],
        "http_400.yaml": [google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")],
        "http_429.yaml": [google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", "1s")],
        "http_503.yaml": [google_error(503, "UNAVAILABLE", "The model is overloaded.")],
        "stream_error.yaml": [
            (
                200,
                {"content-type": "text/event-stream"},
                mt.sse(
                    [
                        (None, candidate(None, [{"text": "The"}])),
                        (
                            None,
                            {
                                "error": {
                                    "code": 503,
                                    "message": "Overloaded",
                                    "status": "UNAVAILABLE",
                                }
                            },
                        ),
                    ],
                    end="\r\n\r\n",
                ),
            )
        ],
        "stream_cut.yaml": [
            (
                200,
                {"content-type": "text/event-stream"},
                mt.sse([(None, candidate(None, [{"text": "The"}, call]))], end="\r\n\r\n"),
            )
        ],
    }
    for reason in ("SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "LANGUAGE"):
        fixtures[f"{reason.lower()}.yaml"] = [ok(candidate(reason, []))]
    return fixtures


GROUPS = {
    "anthropic": ("refund-anthropic.yaml", "refund-anthropic-stream.yaml", anthropic),
    "gemini": ("refund-gemini.yaml", "refund-gemini-stream.yaml", gemini),
    "gemini_generate": (
        "refund-gemini-generate.yaml",
        "refund-gemini-generate-stream.yaml",
        generate,
    ),
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder, (plain, streamed, build) in GROUPS.items():
            for name, answers in build().items():
                transcript = streamed if name.startswith("stream_") else plain
                out = Path(tmp) / folder / name
                dump_cassette(fixture(transcript, answers), out)
                target = FIXTURES / folder / name
                if check:
                    if not target.exists() or target.read_bytes() != out.read_bytes():
                        stale.append(f"{folder}/{name}")
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(out.read_bytes())
    if stale:
        print(f"out of date (run scripts/make_fixtures.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
