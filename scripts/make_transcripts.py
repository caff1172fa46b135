"""Generate the refund transcripts of every provider from the OpenAI recording.

    .venv/bin/python scripts/make_transcripts.py           # (re)write transcripts/refund-*.yaml
    .venv/bin/python scripts/make_transcripts.py --check   # exit 1 if a file would change

``transcripts/refund-openai.yaml`` is the recorded conversation: the same task, tool calls,
arguments and texts are replayed here in each provider's own wire shape (Anthropic Messages,
Gemini Interactions, Gemini generateContent), streamed and not. Each file is produced by running
the real flow (adapter, engine, registry, handlers, approval) against a scripted provider, so
its requests are exactly what the adapters build and its results are what the handlers
returned. Ids are derived from fixed seeds and nothing depends on the clock: the output is the
same on every run.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toolloop_cli.audit.canonical import canonical_bytes  # noqa: E402
from toolloop_cli.engine.types import HttpRequest, HttpResponse  # noqa: E402
from toolloop_cli.service import approvals, operations  # noqa: E402
from toolloop_cli.store import open_store  # noqa: E402
from toolloop_cli.transcripts.cassette import (  # noqa: E402
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
    load_cassette,
)

TRANSCRIPTS = ROOT / "transcripts"
REGISTRY = ROOT / "registries" / "refunds.yaml"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."
MODELS = {
    "openai": "gpt-4.1-2025-04-14",
    "anthropic": "claude-sonnet-4-5-20250929",
    "gemini": "gemini-3-flash-preview",
    "gemini-generate": "gemini-2.5-flash",
}
AUTH = {"openai": "authorization", "anthropic": "x-api-key", "gemini": "x-goog-api-key"}


@dataclass(frozen=True)
class Turn:
    """One model answer of the refund conversation, provider-neutral."""

    text: str | None
    calls: list[tuple[str, dict[str, Any]]]
    tokens_in: int
    tokens_out: int


@functools.cache
def openai_answers() -> list[dict[str, Any]]:
    cassette = load_cassette(TRANSCRIPTS / "refund-openai.yaml")
    return [json.loads(i.response.body) for i in cassette.interactions]


@functools.cache
def script() -> list[Turn]:
    """The refund conversation as the OpenAI recording holds it."""
    turns = []
    for answer in openai_answers():
        texts = [
            part["text"]
            for item in answer["output"]
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        ]
        calls = [
            (item["name"], json.loads(item["arguments"]))
            for item in answer["output"]
            if item["type"] == "function_call"
        ]
        usage = answer["usage"]
        turns.append(
            Turn("".join(texts) or None, calls, usage["input_tokens"], usage["output_tokens"])
        )
    return turns


def token(seed: str, size: int, alphabet: str = "") -> str:
    """A deterministic id body of ``size`` characters."""
    digest = b"".join(hashlib.sha256(f"{seed}/{i}".encode()).digest() for i in range(4))
    chars = alphabet or "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(chars[b % len(chars)] for b in digest[:size])


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pieces(text: str, n: int = 3) -> list[str]:
    """``text`` in ``n`` fragments, as a provider streams it."""
    step = max(1, -(-len(text) // n))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def sse(events: list[tuple[str | None, dict[str, Any]]], end: str = "\n\n") -> str:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {compact(data)}{end}")
    return "".join(out)


# -- OpenAI Responses ---------------------------------------------------------------------------


def openai_stream(answer: dict[str, Any]) -> str:
    seq = iter(range(1_000_000))
    events: list[tuple[str | None, dict[str, Any]]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    shell = {**answer, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=shell)
    emit("response.in_progress", response=shell)
    for index, item in enumerate(answer["output"]):
        if item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for delta in pieces(item["arguments"]):
                emit(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=delta,
                    obfuscation=token(delta, 6),
                )
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "content": [], "status": "in_progress"},
            )
            for part_index, part in enumerate(item["content"]):
                where = {"item_id": item["id"], "output_index": index, "content_index": part_index}
                emit("response.content_part.added", **where, part={**part, "text": ""})
                for delta in pieces(part["text"], 2):
                    emit("response.output_text.delta", **where, delta=delta, logprobs=[])
                emit("response.output_text.done", **where, text=part["text"], logprobs=[])
                emit("response.content_part.done", **where, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=answer)
    return sse(events)


def openai_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    answer = openai_answers()[n]
    if stream:
        return openai_stream(answer), {"content-type": "text/event-stream; charset=utf-8"}
    return compact(answer), {"content-type": "application/json"}


# -- Anthropic Messages -------------------------------------------------------------------------


def anthropic_message(n: int, turn: Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for k, (name, args) in enumerate(turn.calls):
        call_id = "toolu_01" + token(f"anthropic/{n}/{k}", 22)
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return {
        "id": "msg_01" + token(f"anthropic/{n}", 22),
        "type": "message",
        "role": "assistant",
        "model": MODELS["anthropic"],
        "content": content,
        "stop_reason": "tool_use" if turn.calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.tokens_in,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": turn.tokens_out,
            "service_tier": "standard",
        },
    }


def anthropic_stream(message: dict[str, Any]) -> str:
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"]}}
    start["usage"]["output_tokens"] = 1
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        opened = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
        )
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": t} for t in pieces(block["text"], 2)]
        else:
            raw = compact(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in pieces(raw)]
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    text = sse(events)
    # real streams pad some JSON lines with spaces before the newline
    return text.replace(
        '"type":"content_block_stop","index":0}', '"type":"content_block_stop","index":0}       '
    )


def anthropic_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    message = anthropic_message(n, script()[n])
    headers = {"request-id": "req_011C" + token(f"anthropic-request/{n}", 20)}
    if stream:
        return anthropic_stream(message), {
            **headers,
            "content-type": "text/event-stream; charset=utf-8",
        }
    return compact(message), {**headers, "content-type": "application/json"}


# -- Gemini Interactions ------------------------------------------------------------------------


def signature(seed: str) -> str:
    raw = b"".join(hashlib.sha512(f"{seed}/{i}".encode()).digest() for i in range(2))
    return base64.b64encode(raw).decode()


def interaction(n: int, turn: Turn) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"type": "thought", "signature": signature(f"gemini/{n}")}]
    if turn.text:
        steps.append({"type": "model_output", "content": [{"type": "text", "text": turn.text}]})
    for k, (name, args) in enumerate(turn.calls):
        call_id = token(f"gemini/{n}/{k}", 8, "abcdefghijklmnopqrstuvwxyz0123456789")
        steps.append({"type": "function_call", "id": call_id, "name": name, "arguments": args})
    stamp = f"2026-12-01T10:00:{10 + n:02d}Z"
    return {
        "id": "v1_" + token(f"gemini-interaction/{n}", 43),
        "object": "interaction",
        "model": MODELS["gemini"],
        "status": "requires_action" if turn.calls else "completed",
        "created": stamp,
        "updated": stamp,
        "steps": steps,
        "usage": {
            "total_input_tokens": turn.tokens_in,
            "total_output_tokens": turn.tokens_out,
            "total_thought_tokens": 0,
            "total_tokens": turn.tokens_in + turn.tokens_out,
        },
    }


def interactions_stream(answer: dict[str, Any]) -> str:
    events: list[tuple[str | None, dict[str, Any]]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"event_type": kind, **data}))

    shell = {k: answer[k] for k in ("id", "object", "model")}
    emit("interaction.created", interaction={**shell, "status": "in_progress"})
    emit("interaction.status_update", interaction_id=answer["id"], status="in_progress")
    for index, step in enumerate(answer["steps"]):
        if step["type"] == "thought":
            emit("step.start", index=index, step={"type": "thought"})
            delta = {"type": "thought_signature", "signature": step["signature"]}
            emit("step.delta", index=index, delta=delta)
        elif step["type"] == "model_output":
            emit("step.start", index=index, step={"type": "model_output", "content": []})
            for text in pieces(step["content"][0]["text"], 2):
                emit("step.delta", index=index, delta={"type": "text", "text": text})
        else:
            emit("step.start", index=index, step={**step, "arguments": {}})
            for part in pieces(compact(step["arguments"])):
                emit(
                    "step.delta", index=index, delta={"type": "arguments_delta", "arguments": part}
                )
        emit("step.stop", index=index)
    done = {**shell, "status": answer["status"], "usage": answer["usage"]}
    emit("interaction.completed", interaction=done)
    return sse(events) + "event: done\ndata: [DONE]\n\n"


def gemini_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    answer = interaction(n, script()[n])
    if stream:
        return interactions_stream(answer), {"content-type": "text/event-stream"}
    return compact(answer), {"content-type": "application/json; charset=UTF-8"}


# -- Gemini generateContent ---------------------------------------------------------------------


def generate_response(n: int, turn: Turn) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"text": turn.text})
    for k, (name, args) in enumerate(turn.calls):
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        if k == 0:
            part["thoughtSignature"] = signature(f"gemini-generate/{n}")
        parts.append(part)
    return {
        "candidates": [
            {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": turn.tokens_in,
            "candidatesTokenCount": turn.tokens_out,
            "totalTokenCount": turn.tokens_in + turn.tokens_out,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": turn.tokens_in}],
        },
        "modelVersion": MODELS["gemini-generate"],
        "responseId": token(f"gemini-generate/{n}", 23),
    }


def generate_stream(answer: dict[str, Any]) -> str:
    candidate = answer["candidates"][0]
    chunks: list[list[dict[str, Any]]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part:
            chunks.extend([{"text": t}] for t in pieces(part["text"], 2))
        else:
            chunks.append([part])
    frames = []
    for parts in chunks:
        frame = {
            **answer,
            "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
        }
        frames.append((None, frame))
    last = {
        "content": {"parts": [{"text": ""}], "role": "model"},
        "finishReason": "STOP",
        "index": 0,
    }
    frames.append((None, {**answer, "candidates": [last]}))
    return sse(frames, end="\r\n\r\n")


def generate_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    answer = generate_response(n, script()[n])
    if stream:
        return generate_stream(answer), {"content-type": "text/event-stream"}
    return compact(answer), {"content-type": "application/json; charset=UTF-8"}


# -- running the flow ---------------------------------------------------------------------------

Answer = Callable[[int, bool], tuple[str, dict[str, str]]]
ANSWERS: dict[str, Answer] = {
    "openai": openai_answer,
    "anthropic": anthropic_answer,
    "gemini": gemini_answer,
    "gemini-generate": generate_answer,
}
AUTH_OF = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "gemini-generate": "gemini",
}


class Recorder:
    """A ``Transport`` that answers from the script and keeps every exchange."""

    name = "httpx"

    def __init__(self, option: str, stream: bool) -> None:
        self.option = option
        self.stream = stream
        self.interactions: list[Interaction] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        n = len(self.interactions)
        body = canonical_bytes(request.body)
        headers = {
            "accept": "*/*",
            "accept-encoding": "gzip, deflate",
            "connection": "keep-alive",
            "content-length": str(len(body)),
            "host": urlsplit(request.url).netloc,
            "user-agent": "toolloop/0.1.0",
            AUTH[AUTH_OF[self.option]]: "<scrubbed>",
            **request.headers,
        }
        text, response_headers = ANSWERS[self.option](n, self.stream)
        recorded = Interaction.of(
            RecordedRequest("POST", request.url, {k: [v] for k, v in headers.items()}, body),
            RecordedResponse(200, {k: [v] for k, v in response_headers.items()}, text.encode()),
        )
        self.interactions.append(recorded)
        return HttpResponse(200, response_headers, text.encode())


def record(option: str, stream: bool) -> list[Interaction]:
    """Run the refund flow against the scripted provider, approving the refund."""
    for info in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GEMINI_BASE_URL"):
        os.environ.pop(info, None)
    recorder = Recorder(option, stream)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "store.db")
        options = operations.RunOptions(
            task=TASK, registry=REGISTRY, provider=option, model=MODELS[option], stream=stream
        )
        paused = operations.start(store, options, transport=recorder)
        op_id = paused.operation.operation_id
        (approval,) = store.pending_approvals()
        approvals.approve(store, approval.approval_id, "ops-lead")
        done = operations.resume(store, op_id, transport=recorder)
        if done.operation.state.value != "COMPLETED":
            raise SystemExit(f"{option}: the refund flow ended {done.operation.state.value}")
    return recorder.interactions


TARGETS: dict[str, tuple[str, bool]] = {
    "refund-anthropic.yaml": ("anthropic", False),
    "refund-gemini.yaml": ("gemini", False),
    "refund-gemini-generate.yaml": ("gemini-generate", False),
    "refund-openai-stream.yaml": ("openai", True),
    "refund-anthropic-stream.yaml": ("anthropic", True),
    "refund-gemini-stream.yaml": ("gemini", True),
    "refund-gemini-generate-stream.yaml": ("gemini-generate", True),
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (option, stream) in TARGETS.items():
            out = Path(tmp) / name
            dump_cassette(record(option, stream), out)
            target = TRANSCRIPTS / name
            if check:
                if not target.exists() or target.read_bytes() != out.read_bytes():
                    stale.append(name)
            else:
                target.write_bytes(out.read_bytes())
                print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(f"out of date (run scripts/make_transcripts.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
