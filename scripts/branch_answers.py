"""Scripted model answers for ``gen_branches``, rendered in each provider's wire shape.

A branch scripts what the model says in neutral terms (call a tool, say something, get cut
mid-call); a ``Provider`` turns each answer into a ``wire.Turn`` with ids, times and token
counts derived from the branch and turn, and ``wire`` renders it as that API's response object,
so the output is the same on every run.
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

from . import wire
from .wire import MODELS, Call, Text, Turn, Usage

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


Answer = tuple[dict[str, Any], dict[str, str]]
Render = Callable[[HttpRequest, list[Item], Ids], Answer]


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


def _usage(request: HttpRequest, items: list[Item]) -> Usage:
    sent = len(canonical_bytes(request.body)) // 8
    out = 12 + sum(len(json.dumps([i.name, i.arguments, i.text])) // 16 for i in items)
    return Usage(sent, out)


def _call(item: Item, call_id: str, item_id: str = "") -> Call:
    return Call(
        item.name, item.arguments or {}, id=call_id, item_id=item_id, cut=item.kind == "cut"
    )


def openai(request: HttpRequest, items: list[Item], ids: Ids) -> Answer:
    parts: list[wire.Part] = []
    for item in items:
        if item.kind == "say":
            parts.append(Text(item.text, id=ids.make("msg_", 48)))
        else:
            call_id = ids.make("call_", 24)
            parts.append(_call(item, call_id, item_id=ids.make("fc_", 48)))
    usage = _usage(request, items)
    turn = Turn(ids.make("resp_", 48), parts, usage, created=ids.when())
    body = wire.openai_response(turn, request.body)
    headers = wire.headers("openai", request_id=ids.make("req_", 32))
    return body, {**headers, "openai-version": "2020-10-01"}


def anthropic(request: HttpRequest, items: list[Item], ids: Ids) -> Answer:
    parts = [
        Text(item.text) if item.kind == "say" else _call(item, ids.make("toolu_01", 22))
        for item in items
    ]
    usage = _usage(request, items)
    body = wire.anthropic_message(Turn(ids.make("msg_01", 22), parts, usage))
    return body, wire.headers("anthropic", request_id=ids.make("req_011C", 20))


def gemini(request: HttpRequest, items: list[Item], ids: Ids) -> Answer:
    signature = base64.b64encode(hashlib.sha256(ids.make("", 16).encode()).digest() * 4)
    parts = [
        Text(item.text) if item.kind == "say" else _call(item, ids.make("", 8)) for item in items
    ]
    usage = _usage(request, items)
    turn = Turn(ids.make("v1_", 44), parts, usage, created=ids.when(), signature=signature.decode())
    return wire.interaction(turn), wire.headers("gemini")


OPENAI = Provider("openai", MODELS["openai"], openai)
ANTHROPIC = Provider("anthropic", MODELS["anthropic"], anthropic)
GEMINI = Provider("gemini", MODELS["gemini"], gemini)
PROVIDERS = (OPENAI, ANTHROPIC, GEMINI)
