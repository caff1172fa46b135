"""What a recorded request says, asked of the adapter of its API family.

A replay needs to know, from a recording alone, the conversation a request carries, the task,
the model settings, the tools it declared, the results it sends back and where one
conversation ends and the next begins. Each adapter reads its own family's requests
(``engine.ports.RecordingReader``); these helpers find the reader for an ``Api`` and ask it,
answering "nothing said" for a family that has none.
"""

from __future__ import annotations

import functools
from typing import Any

from toolloop_cli.adapters import get_adapter
from toolloop_cli.adapters._reading import text_of
from toolloop_cli.engine.ports import RecordingReader
from toolloop_cli.engine.types import JSONObject, RecordedResult, ToolSpec

__all__ = [
    "Api",
    "comparable_items",
    "continues_from",
    "conversation_items",
    "declared_tools",
    "reader",
    "recorded_settings",
    "request_results",
    "task_text",
    "text_of",
]

Api = tuple[str, str]


@functools.lru_cache(maxsize=16)
def reader(api: Api) -> RecordingReader | None:
    """The recording reader of an API family (its adapter), or None when it has none."""
    adapter = get_adapter(*api)
    return adapter if isinstance(adapter, RecordingReader) else None


def conversation_items(api: Api, body: Any) -> list[JSONObject]:
    """The conversation a request carries (a string input counts as one user message)."""
    found = reader(api)
    return found.request_items(body) if found else []


def comparable_items(api: Api, body: Any) -> list[Any]:
    """The conversation a request carries, as conversations are matched (``comparable``)."""
    found = reader(api)
    return [found.comparable(item) for item in found.request_items(body)] if found else []


def continues_from(api: Api, body: Any) -> str | None:
    """The provider-side state a stateful request continues (``previous_response_id`` …)."""
    found = reader(api)
    return found.continues_from(body) if found else None


def task_text(api: Api, body: Any) -> str | None:
    """The user's words a request answers: the task a replay of it starts from."""
    found = reader(api)
    return found.task_text(body) if found else None


def declared_tools(api: Api, body: Any) -> list[ToolSpec]:
    """Every tool a request declares, as ``ToolSpec`` with its recorded declaration."""
    found = reader(api)
    return found.declared_tools(body) if found else []


def recorded_settings(api: Api, body: Any, uri: str = "") -> JSONObject:
    """``ModelSettings`` fields a request shows: model, output cap, streaming, instructions."""
    found = reader(api)
    return found.recorded_settings(body, uri) if found else {}


def request_results(api: Api, body: Any) -> list[RecordedResult]:
    """The tool results a request carries, in order."""
    found = reader(api)
    return found.request_results(body) if found else []
