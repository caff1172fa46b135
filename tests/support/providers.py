"""Helpers shared by the provider tests: recorded answers, adapters and fixture runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT, TASK
from toolloop_cli.adapters import get_adapter
from toolloop_cli.engine.ports import ModelAdapter
from toolloop_cli.engine.types import HttpResponse, ModelTurn
from toolloop_cli.transcripts import load_cassette

TRANSCRIPTS = ROOT / "transcripts"
#: --provider name → (stored provider, api family, transcript stem, model)
PROVIDERS: dict[str, tuple[str, str, str, str]] = {
    "openai": ("openai", "responses", "refund-openai", "gpt-4.1-2025-04-14"),
    "anthropic": ("anthropic", "messages", "refund-anthropic", "claude-sonnet-4-5-20250929"),
    "gemini": ("gemini", "interactions", "refund-gemini", "gemini-3-flash-preview"),
    "gemini-generate": ("gemini", "generate_content", "refund-gemini-generate", "gemini-2.5-flash"),
}
KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}


def adapter_for(option: str) -> ModelAdapter:
    provider, family, _, _ = PROVIDERS[option]
    return get_adapter(provider, family)


def transcript(option: str, stream: bool = False) -> Path:
    return TRANSCRIPTS / f"{PROVIDERS[option][2]}{'-stream' if stream else ''}.yaml"


def answers(path: Path) -> list[HttpResponse]:
    """The recorded answers of a cassette, as a transport hands them over."""
    return [
        HttpResponse(
            status=i.response.status,
            headers={k: ", ".join(v) for k, v in i.response.headers.items()},
            body=i.response.body,
        )
        for i in load_cassette(path).interactions
    ]


def requests(path: Path) -> list[Any]:
    return [json.loads(i.request.body or b"null") for i in load_cassette(path).interactions]


def chunked(response: HttpResponse, pieces: list[bytes]) -> HttpResponse:
    return HttpResponse(response.status, dict(response.headers), chunks=iter(pieces))


def parse(option: str, response: HttpResponse, pieces: list[bytes] | None = None) -> ModelTurn:
    body = response.body
    fresh = chunked(response, pieces if pieces is not None else [body])
    return adapter_for(option).parse_response(fresh)


def calls_of(turn: ModelTurn) -> list[tuple[str, str, Any]]:
    return [(c.call_id, c.name, c.arguments) for c in turn.calls]


def events_of(body: bytes) -> Iterator[int]:
    """The byte offsets just after each event's closing blank line."""
    offset = 0
    while True:
        found = [i for i in (body.find(b"\n\n", offset), body.find(b"\r\n\r\n", offset)) if i >= 0]
        if not found:
            return
        end = min(found)
        end += 4 if body[end : end + 4] == b"\r\n\r\n" else 2
        yield end
        offset = end


def run_fixture(cli: Invoke, path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(path), "--json", *extra
    )
    return result.exit_code, json_out(result)


def assert_nothing_ran(view: dict[str, Any], store_path: Path) -> None:
    """No call was executed: none recorded as run, and the payments ledger never touched."""
    assert all(c["state"] in ("NOT_EXECUTED",) for c in view["calls"]), view["calls"]
    assert view["counters"]["tool_calls"] == 0
    assert not (store_path.parent / "payments.db").exists()
