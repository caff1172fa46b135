"""Helpers the adapters' recording readers share (``engine.ports.RecordingReader``).

They read request bodies other tools recorded, so they are lenient by design: anything of an
unexpected type is "not said", never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from toolloop_cli.engine.types import JSONObject, RecordedResult, ToolSpec

__all__ = [
    "callable_name",
    "loose",
    "objects",
    "only_text",
    "parsed",
    "result",
    "settings_said",
    "spec",
    "text_of",
    "uncallable_name",
]

#: A name no function can have (providers allow ``[A-Za-z0-9_.:-]``): a declared tool that is
#: not called by name (a server tool such as ``web_search``) is keyed under it, so no call
#: ever finds it.
_UNCALLABLE = "#"


def objects(value: Any) -> list[JSONObject]:
    """The objects of a list (a request's items, a message's parts); anything else is none."""
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def settings_said(model: Any, limit: Any, instructions: Any, stream: bool) -> JSONObject:
    """The ``ModelSettings`` fields a recorded request shows: each only when of its type."""
    settings: JSONObject = {}
    if isinstance(model, str):
        settings["model"] = model
    if isinstance(limit, int) and not isinstance(limit, bool):
        settings["max_output_tokens"] = limit
    if isinstance(instructions, str):
        settings["instructions"] = instructions
    if stream:
        settings["stream"] = True
    return settings


def text_of(content: Any) -> str | None:
    """Plain text of a message content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(texts) if texts else None
    return None


def only_text(content: Any) -> str | None:
    """The text of a content that is text only; None when it holds anything else (an image
    beside the text is part of the result, not to be flattened away)."""
    if isinstance(content, str):
        return content
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(part, dict)
            and isinstance(part.get("text"), str)
            and part.get("type", "text") in ("text", "input_text", "output_text")
            for part in content
        )
    ):
        return "".join(part["text"] for part in content)
    return None


def parsed(value: Any) -> Any:
    """JSON text as the JSON it encodes; anything else as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def result(call_id: Any, value: Any, is_error: Any = None, name: Any = None) -> RecordedResult:
    return RecordedResult(
        call_id if isinstance(call_id, str) and call_id else None,
        parsed(value),
        is_error if isinstance(is_error, bool) else None,
        name if isinstance(name, str) and name else None,
    )


def loose(value: Any, dropped: Iterable[str] = ()) -> Any:
    """``value`` with null fields and the ``dropped`` keys removed at every depth."""
    drop = frozenset(dropped)

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items() if v is not None and k not in drop}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value)


def spec(
    name: str,
    description: Any,
    parameters: Any,
    provider: str,
    declaration: JSONObject,
) -> ToolSpec:
    """A recorded declaration as a ``ToolSpec``: null or absent descriptions are ``""``."""
    return ToolSpec(
        name=name,
        description=description if isinstance(description, str) else "",
        parameters=parameters if isinstance(parameters, dict) else {},
        provider=provider,
        declaration=declaration,
    )


def callable_name(entry: Any) -> str | None:
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and name else None


def uncallable_name(kind: str, index: int, taken: set[str]) -> str:
    """The key of a declaration that no call names: ``#web_search``, ``#web_search#2``…"""
    name = f"{_UNCALLABLE}{kind}"
    return name if name not in taken else f"{name}{_UNCALLABLE}{index}"
