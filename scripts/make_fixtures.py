"""Generate the per-outcome fixture cassettes of the Anthropic and Gemini adapters.

    python -m scripts.make_fixtures           # (re)write tests/fixtures/{anthropic,...}
    python -m scripts.make_fixtures --check   # exit 1 if a file would change

Each fixture is one provider answer (every stop/finish reason, status and error the adapters
map) to the first request of that provider's refund transcript; a few have a second answer so
that a retried or continued turn can complete. The answers are rendered by ``wire``, from
shapes that follow the providers' SDK types and recordings (see docs/wire-formats.md); the
broken ones (an error mid-stream, a cut call) are put together from its event builders.
Nothing depends on the clock.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from toolloop_cli.transcripts.cassette import (
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
    load_cassette,
)

from . import ROOT, wire
from .wire import MODELS, Call, Text, Turn, Usage, token

TRANSCRIPTS = ROOT / "transcripts"
FIXTURES = ROOT / "tests" / "fixtures"
Answer = tuple[int, dict[str, str], str]
JSON = {"content-type": wire.JSON}
USAGE = Usage(212, 9, detailed=False)


def first_request(transcript: str) -> RecordedRequest:
    return load_cassette(TRANSCRIPTS / transcript).interactions[0].request


def fixture(transcript: str, answers: list[Answer]) -> list[Interaction]:
    request = first_request(transcript)
    return [
        Interaction.of(
            request, RecordedResponse(status, {k: [v] for k, v in h.items()}, b.encode())
        )
        for status, h, b in answers
    ]


def ok(body: Any) -> Answer:
    return 200, JSON, wire.compact(body)


def streamed(api: str, body: str) -> Answer:
    return 200, wire.headers(api, stream=True), body


# -- Anthropic ----------------------------------------------------------------------------------

TEXT = "Order ord_1001 was delivered; I need more details before refunding."
REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was declined."}


def message(stop: str, parts: list[wire.Part], **extra: Any) -> dict[str, Any]:
    """A message that stopped for ``stop``."""
    if stop == "stop_sequence":
        extra = {"stop_sequence": "###", **extra}
    usage = Usage(212, 17, detailed=False)
    msg_id = "msg_01" + token(f"fixture/{stop}/{len(parts)}", 22)
    return wire.anthropic_message(Turn(msg_id, parts, usage, finish=stop, extra=extra))


def tool_use(n: int, order: str = "ord_1001", arguments: dict[str, Any] | None = None) -> Call:
    args = {"order_id": order} if arguments is None else arguments
    return Call("get_order", args, id=f"toolu_01Fixture{n:014d}")


def anthropic_error(status: int, kind: str, msg: str, **headers: str) -> Answer:
    body = wire.anthropic_error(kind, msg, request_id="req_011CFx")
    return status, {**JSON, **headers}, wire.compact(body)


def anthropic_sse(events: list[wire.Event]) -> Answer:
    return streamed("anthropic", wire.anthropic_sse(events))


def anthropic_start() -> list[wire.Event]:
    return [wire.anthropic_start(message("x", []))]


def block(index: int, part: wire.Part, raw: str | None = None) -> list[wire.Event]:
    return wire.anthropic_block(index, wire.anthropic_content(part), raw)


def message_end(reason: str, **delta: Any) -> list[wire.Event]:
    return wire.anthropic_end(reason, 9, **delta)


def anthropic() -> dict[str, list[Answer]]:
    done = ok(message("end_turn", [Text("Done.")]))
    stop = wire.anthropic_block_stop
    spent = wire.anthropic_error(
        "rate_limit_error",
        "You have reached your specified API usage limits.",
        details={"error_code": "enforced_spend_limit_reached"},
    )
    return {
        "end_turn.yaml": [ok(message("end_turn", [Text(TEXT)]))],
        "stop_sequence.yaml": [ok(message("stop_sequence", [Text(TEXT)]))],
        "parallel_tool_use.yaml": [
            ok(
                message(
                    "tool_use", [Text("Looking both up."), tool_use(1), tool_use(2, "ord_1002")]
                )
            ),
            done,
        ],
        "max_tokens_tool_use.yaml": [
            ok(message("max_tokens", [Text("Let me"), tool_use(1, arguments={})]))
        ],
        "context_window.yaml": [ok(message("model_context_window_exceeded", [Text("I")]))],
        "refusal.yaml": [ok(message("refusal", [Text("")], stop_details=REFUSAL))],
        "pause_turn.yaml": [
            ok(message("pause_turn", [Text("Still searching the order history.")])),
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
        "http_429_spend_limit.yaml": [(429, JSON, wire.compact(spent))],
        "http_500.yaml": [anthropic_error(500, "api_error", "Internal server error"), done],
        "http_529.yaml": [anthropic_error(529, "overloaded_error", "Overloaded"), done],
        "stream_overloaded.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block(0, Text("Let me")),
                    wire.anthropic_error("overloaded_error", "Overloaded"),
                ]
            )
        ],
        "stream_max_tokens_tool_use.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block(0, tool_use(1), raw='{"order_id": "ord_10'),
                    *message_end("max_tokens"),
                ]
            )
        ],
        "stream_cut_tool_use.yaml": [anthropic_sse([*anthropic_start(), *block(0, tool_use(1))])],
        "stream_refusal.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block(0, Text("")),
                    stop(0),
                    *message_end("refusal", stop_details=REFUSAL),
                ]
            )
        ],
        "stream_tool_use.yaml": [
            anthropic_sse(
                [
                    *anthropic_start(),
                    *block(0, Text("Looking it up.")),
                    stop(0),
                    *block(1, tool_use(1)),
                    stop(1),
                    *message_end("tool_use"),
                ]
            ),
            done,
        ],
    }


# -- Gemini Interactions ------------------------------------------------------------------------


def interaction(status: str, parts: list[wire.Part], **extra: Any) -> dict[str, Any]:
    answer_id = "v1_" + token(f"fixture/{status}/{len(parts)}", 43)
    return wire.interaction(Turn(answer_id, parts, USAGE, finish=status, extra=extra))


def call_step(n: int = 1) -> Call:
    return Call("get_order", {}, id=f"fx{n:06d}")


def google_error(status: int, rpc: str, msg: str, delay: str | None = None) -> Answer:
    return status, JSON, wire.compact(wire.google_error(status, rpc, msg, delay))


def gemini_sse(events: list[wire.Event]) -> Answer:
    """A stream that breaks off: no ``[DONE]`` sentinel."""
    return streamed("gemini", wire.interactions_sse(events, done=False))


def gemini() -> dict[str, list[Answer]]:
    stream = wire.interaction(Turn("v1_fixturestream", [call_step()], USAGE))
    created = wire.interaction_created(stream)
    started = wire.step_start(0, stream["steps"][0])
    errored = {"type": "model_output", "error": {"code": 3, "message": "blocked"}}
    return {
        "completed.yaml": [ok(interaction("completed", [Text(TEXT)]))],
        "incomplete.yaml": [ok(interaction("incomplete", [Text("The order"), call_step()]))],
        "budget_exceeded.yaml": [ok(interaction("budget_exceeded", [Text("The")]))],
        "failed.yaml": [
            ok(interaction("failed", [], errors=[{"code": "internal", "message": "boom"}]))
        ],
        "cancelled.yaml": [ok(interaction("cancelled", []))],
        # a model_output step that carries an error in place of its content
        "model_output_error.yaml": [
            ok({**interaction("completed", [Text("")]), "steps": [errored]})
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
            ok(interaction("completed", [Text("Done.")])),
        ],
        "http_503.yaml": [google_error(503, "UNAVAILABLE", "The model is overloaded.")],
        "stream_error.yaml": [
            gemini_sse(
                [
                    created,
                    started,
                    wire.interaction_event(
                        "error", error={"message": "Deadline expired.", "code": "gateway_timeout"}
                    ),
                ]
            )
        ],
        "stream_cut.yaml": [
            gemini_sse([created, started, wire.arguments_delta(0, '{"order_id": "ord_')])
        ],
    }


# -- Gemini generateContent ---------------------------------------------------------------------


def candidate(finish: str, parts: list[wire.Part], **extra: Any) -> dict[str, Any]:
    turn = Turn(token(f"fixture/{finish}", 23), parts, USAGE, finish=finish, extra=extra)
    return wire.generate_response(turn, finish_after_index=True)


def chunk(parts: list[wire.Part]) -> dict[str, Any]:
    """A streamed chunk, before any finish reason."""
    return wire.generate_chunk(
        wire.generate_response(Turn(token("fixture/None", 23), parts, USAGE))
    )


def generate() -> dict[str, list[Answer]]:
    call = Call("get_order", {"order_id": "ord_1001"})
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 212, "totalTokenCount": 212},
        "modelVersion": MODELS["gemini-generate"],
        "responseId": "fixtureblocked000000000",
    }
    overloaded = wire.google_error(503, "UNAVAILABLE", "Overloaded")
    fixtures: dict[str, list[Answer]] = {
        "stop_text.yaml": [ok(candidate("STOP", [Text(TEXT)]))],
        "max_tokens.yaml": [ok(candidate("MAX_TOKENS", [Text("The order"), call]))],
        "prompt_blocked.yaml": [ok(blocked)],
        "malformed_function_call.yaml": [
            ok(candidate("MALFORMED_FUNCTION_CALL", [], finishMessage="Malformed function call"))
        ],
        "other.yaml": [ok(candidate("OTHER", []))],
        "http_400.yaml": [google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")],
        "http_429.yaml": [google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", "1s")],
        "http_503.yaml": [google_error(503, "UNAVAILABLE", "The model is overloaded.")],
        "stream_error.yaml": [
            streamed("gemini-generate", wire.generate_sse([chunk([Text("The")]), overloaded]))
        ],
        "stream_cut.yaml": [
            streamed("gemini-generate", wire.generate_sse([chunk([Text("The"), call])]))
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
        print(f"out of date (run python -m scripts.make_fixtures): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
