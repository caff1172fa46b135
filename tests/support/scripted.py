"""Helpers to run operations against the scripted model (no provider, no cassette)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from support.paths import FIXTURES
from toolloop_cli.adapters.scripted import Answer, ScriptedTransport
from toolloop_cli.engine.loop import StepResult
from toolloop_cli.service import operations
from toolloop_cli.store import Store

GUARDS = FIXTURES / "registries" / "guards.yaml"


def call(name: str, arguments: Any = None, call_id: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "arguments": {} if arguments is None else arguments}
    if call_id:
        spec["id"] = call_id
    return spec


def turn(*calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"calls": list(calls), **extra}


def final(text: str = "done", **extra: Any) -> dict[str, Any]:
    return {"text": text, **extra}


def answer(response_id: str, *calls: dict[str, Any]) -> dict[str, Any]:
    return {"id": response_id, "calls": list(calls)}


def repeated_answer() -> list[dict[str, Any]]:
    """The review's samerid.yaml: a second answer with the first one's response and call id."""
    return [
        answer("resp_SAME", call("echo", {"n": 1}, "call_X")),
        answer("resp_SAME", call("echo", {"n": 2}, "call_X")),
        final("done"),
    ]


def reuse_script() -> list[dict[str, Any]]:
    """The review's reuse.yaml: the irreversible call takes the id of a 1-cent draft."""
    return [
        answer(
            "resp_t0",
            call("create_refund_draft", {"order_id": "ord_1001", "amount_cents": 1}, "call_X"),
        ),
        answer(
            "resp_t1",
            call("create_refund_draft", {"order_id": "ord_1001", "amount_cents": 4999}, "call_Y"),
        ),
        answer(
            "resp_t2",
            call("submit_refund", {"order_id": "ord_1001", "amount_cents": 4999}, "call_X"),
        ),
        final("done"),
    ]


def run_script(
    store: Store, answers: Sequence[Answer], registry: Path = GUARDS, **overrides: Any
) -> tuple[StepResult, ScriptedTransport]:
    clock = overrides.pop("clock", None)
    transport = ScriptedTransport(answers)
    options = operations.RunOptions(
        task="scripted task",
        registry=registry,
        provider="scripted",
        model="scripted-model",
        guard_overrides=overrides,
    )
    result = operations.start(store, options, transport=transport, clock=clock)
    return result, transport


def handler_log(store: Store) -> list[dict[str, Any]]:
    path = store.data_dir / "handler-log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
