"""Scripted model answers for ``gen_branches.py``, rendered in each provider's wire shape.

A branch scripts what the model says in neutral terms (call a tool, say something, get cut
mid-call); a ``Provider`` renders each answer as that API's response object, with ids, times
and token counts derived from the branch and turn, so the output is the same on every run.
Shapes follow the shipped real-shape recordings (``transcripts/refund-*.yaml``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import HttpRequest, HttpResponse

START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Item:
    """One thing the model does in an answer."""

    kind: str  # "call" | "say" | "cut" (a call cut by the output-token limit)
    name: str = ""
    arguments: dict[str, Any] | None = None
    text: str = ""


def call(name: str, arguments: dict[str, Any]) -> Item:
    return Item("call", name, arguments)


def say(text: str) -> Item:
    return Item("say", text=text)


def cut_call(name: str, partial: dict[str, Any]) -> Item:
    """A call cut by the output-token limit; ``partial`` is what got out before the cut."""
    return Item("cut", name, partial)


@dataclass
class Ids:
    """Deterministic ids for one answer of one branch."""

    seed: str
    turn: int
    count: int = 0

    def make(self, prefix: str, length: int) -> str:
        self.count += 1
        digest = hashlib.sha256(f"{self.seed}/{self.turn}/{self.count}".encode()).hexdigest()
        return prefix + digest[:length]

    def when(self) -> datetime:
        return START + timedelta(seconds=self.turn)


Render = Callable[[HttpRequest, list[Item], Ids], tuple[dict[str, Any], dict[str, str]]]


@dataclass(frozen=True)
class Provider:
    name: str  # as given to --provider
    model: str
    render: Render


class Scripted:
    """A ``Transport`` answering each request with the branch's next rendered answer."""

    name = "scripted"

    def __init__(self, provider: Provider, seed: str, turns: list[list[Item]]) -> None:
        self.provider, self.seed, self.turns = provider, seed, turns
        self.sent = 0

    def send(self, request: HttpRequest) -> HttpResponse:
        if self.sent >= len(self.turns):
            raise RuntimeError(f"{self.seed}: the engine asked for an unscripted turn")
        ids = Ids(self.seed, self.sent)
        body, headers = self.provider.render(request, self.turns[self.sent], ids)
        self.sent += 1
        return HttpResponse(status=200, headers=headers, body=json.dumps(body).encode())


def _tokens(request: HttpRequest, items: list[Item]) -> tuple[int, int]:
    sent = len(canonical_bytes(request.body)) // 8
    out = 12 + sum(len(json.dumps([i.name, i.arguments, i.text])) // 16 for i in items)
    return sent, out


def _cut(items: list[Item]) -> bool:
    return any(item.kind == "cut" for item in items)


def openai(
    request: HttpRequest, items: list[Item], ids: Ids
) -> tuple[dict[str, Any], dict[str, str]]:
    output: list[dict[str, Any]] = []
    for item in items:
        if item.kind == "say":
            content = [
                {"annotations": [], "logprobs": [], "text": item.text, "type": "output_text"}
            ]
            output.append(
                {
                    "content": content,
                    "id": ids.make("msg_", 48),
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                }
            )
        else:
            text = json.dumps(item.arguments, separators=(",", ":"))
            if item.kind == "cut":
                text = text[: len(text) // 2]  # the JSON text stops mid-way
            output.append(
                {
                    "arguments": text,
                    "call_id": ids.make("call_", 24),
                    "id": ids.make("fc_", 48),
                    "name": item.name,
                    "status": "incomplete" if item.kind == "cut" else "completed",
                    "type": "function_call",
                }
            )
    sent, out = _tokens(request, items)
    body = {
        "id": ids.make("resp_", 48),
        "object": "response",
        "created_at": int(ids.when().timestamp()),
        "status": "incomplete" if _cut(items) else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if _cut(items) else None,
        "instructions": request.body.get("instructions"),
        "max_output_tokens": request.body.get("max_output_tokens"),
        "model": OPENAI.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": request.body.get("tools", []),
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": sent,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sent + out,
        },
        "metadata": {},
    }
    headers = {
        "content-type": "application/json",
        "openai-version": "2020-10-01",
        "x-request-id": ids.make("req_", 32),
    }
    return body, headers


def anthropic(
    request: HttpRequest, items: list[Item], ids: Ids
) -> tuple[dict[str, Any], dict[str, str]]:
    content: list[dict[str, Any]] = []
    for item in items:
        if item.kind == "say":
            content.append({"type": "text", "text": item.text})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": ids.make("toolu_01", 22),
                    "name": item.name,
                    "input": item.arguments,
                }
            )
    calls = any(item.kind == "call" for item in items)
    stop = "max_tokens" if _cut(items) else "tool_use" if calls else "end_turn"
    sent, out = _tokens(request, items)
    body = {
        "id": ids.make("msg_01", 22),
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": sent,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": out,
            "service_tier": "standard",
        },
    }
    return body, {"content-type": "application/json", "request-id": ids.make("req_011C", 20)}


def gemini(
    request: HttpRequest, items: list[Item], ids: Ids
) -> tuple[dict[str, Any], dict[str, str]]:
    signature = base64.b64encode(hashlib.sha256(ids.make("", 16).encode()).digest() * 4)
    steps: list[dict[str, Any]] = [{"type": "thought", "signature": signature.decode()}]
    for item in items:
        if item.kind == "say":
            steps.append({"type": "model_output", "content": [{"type": "text", "text": item.text}]})
        else:
            steps.append(
                {
                    "type": "function_call",
                    "id": ids.make("", 8),
                    "name": item.name,
                    "arguments": item.arguments,
                }
            )
    calls = any(item.kind == "call" for item in items)
    status = "incomplete" if _cut(items) else "requires_action" if calls else "completed"
    sent, out = _tokens(request, items)
    moment = ids.when().strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "id": ids.make("v1_", 44),
        "object": "interaction",
        "model": GEMINI.model,
        "status": status,
        "created": moment,
        "updated": moment,
        "steps": steps,
        "usage": {
            "total_input_tokens": sent,
            "total_output_tokens": out,
            "total_thought_tokens": 0,
            "total_tokens": sent + out,
        },
    }
    return body, {"content-type": "application/json; charset=UTF-8"}


OPENAI = Provider("openai", "gpt-4.1-2025-04-14", openai)
ANTHROPIC = Provider("anthropic", "claude-sonnet-4-5-20250929", anthropic)
GEMINI = Provider("gemini", "gemini-3-flash-preview", gemini)
PROVIDERS = (OPENAI, ANTHROPIC, GEMINI)
