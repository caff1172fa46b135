"""Generate the refund transcripts of every provider from the OpenAI recording.

    python -m scripts.make_transcripts           # (re)write transcripts/refund-*.yaml
    python -m scripts.make_transcripts --check   # exit 1 if a file would change

``transcripts/refund-openai.yaml`` is the recorded conversation: the same task, tool calls,
arguments and texts are replayed here in each provider's own wire shape (Anthropic Messages,
Gemini Interactions, Gemini generateContent), streamed and not, rendered by ``wire``. Each file
is produced by running the real flow (adapter, engine, registry, handlers, approval) against a
scripted provider, so its requests are exactly what the adapters build and its results are what
the handlers returned. Ids are derived from fixed seeds and nothing depends on the clock: the
output is the same on every run.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store
from toolloop_cli.transcripts.cassette import (
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
    load_cassette,
)

from . import ROOT, wire
from .wire import MODELS, Call, Text, Usage, token

TRANSCRIPTS = ROOT / "transcripts"
REGISTRY = ROOT / "registries" / "refunds.yaml"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."
AUTH = {"openai": "authorization", "anthropic": "x-api-key", "gemini": "x-goog-api-key"}


@dataclass(frozen=True)
class Said:
    """One model answer of the refund conversation, as the OpenAI recording holds it."""

    text: str | None
    calls: list[tuple[str, dict[str, Any]]]
    usage: Usage


@functools.cache
def openai_answers() -> list[dict[str, Any]]:
    cassette = load_cassette(TRANSCRIPTS / "refund-openai.yaml")
    return [json.loads(i.response.body) for i in cassette.interactions]


@functools.cache
def script() -> list[Said]:
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
        tokens = Usage(usage["input_tokens"], usage["output_tokens"])
        turns.append(Said("".join(texts) or None, calls, tokens))
    return turns


def signature(seed: str) -> str:
    """A deterministic Gemini thought signature."""
    raw = b"".join(hashlib.sha512(f"{seed}/{i}".encode()).digest() for i in range(2))
    return base64.b64encode(raw).decode()


def parts(said: Said, call_id: Callable[[int], str] = lambda k: "") -> list[wire.Part]:
    """The answer's text, then its calls, the k-th with id ``call_id(k)``."""
    text: list[wire.Part] = [Text(said.text)] if said.text else []
    calls = [Call(name, args, id=call_id(k)) for k, (name, args) in enumerate(said.calls)]
    return [*text, *calls]


Answer = Callable[[int, bool], tuple[str, dict[str, str]]]


def openai_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    answer = openai_answers()[n]
    body = wire.openai_stream(answer) if stream else wire.compact(answer)
    return body, wire.headers("openai", stream)


def anthropic_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    said = script()[n]
    turn = wire.Turn(
        "msg_01" + token(f"anthropic/{n}", 22),
        parts(said, lambda k: "toolu_01" + token(f"anthropic/{n}/{k}", 22)),
        said.usage,
    )
    message = wire.anthropic_message(turn)
    body = wire.anthropic_stream(message) if stream else wire.compact(message)
    request_id = "req_011C" + token(f"anthropic-request/{n}", 20)
    return body, wire.headers("anthropic", stream, request_id)


def gemini_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    said = script()[n]
    lower = "abcdefghijklmnopqrstuvwxyz0123456789"
    turn = wire.Turn(
        "v1_" + token(f"gemini-interaction/{n}", 43),
        parts(said, lambda k: token(f"gemini/{n}/{k}", 8, lower)),
        said.usage,
        created=datetime(2026, 12, 1, 10, 0, 10, tzinfo=UTC) + timedelta(seconds=n),
        signature=signature(f"gemini/{n}"),
    )
    answer = wire.interaction(turn)
    body = wire.interactions_stream(answer) if stream else wire.compact(answer)
    return body, wire.headers("gemini", stream)


def generate_answer(n: int, stream: bool) -> tuple[str, dict[str, str]]:
    said = script()[n]
    turn = wire.Turn(
        token(f"gemini-generate/{n}", 23),
        parts(said),
        said.usage,
        signature=signature(f"gemini-generate/{n}"),
    )
    answer = wire.generate_response(turn)
    body = wire.generate_stream(answer) if stream else wire.compact(answer)
    return body, wire.headers("gemini-generate", stream)


# -- running the flow ---------------------------------------------------------------------------

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
        print(f"out of date (run python -m scripts.make_transcripts): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
