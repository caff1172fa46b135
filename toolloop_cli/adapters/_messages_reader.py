"""What a recorded Anthropic Messages request says (``engine.ports.RecordingReader``).

Custom tools are ``{name, description, input_schema}``; tools declared by ``type``
(``memory_20250818``, ``bash_20250124``, ``web_search_20250305``…) are provider-defined and
keep their declaration as recorded. Any of them may be called by its ``name`` in a
``tool_use`` block: a server tool never is (its calls are ``server_tool_use`` blocks), so a
``tool_use`` naming a typed tool is one the client executes. A ``tool_result`` whose content
holds anything but text (an image, a document, a ``tool_reference``) keeps all its parts.
A ``tool_use`` echoed without the ``caller: {"type": "direct"}`` its answer carried is the
same block.
"""

from __future__ import annotations

from typing import Any

from toolloop_cli.engine.types import JSONObject, RecordedResult, ToolSpec

from ._reading import (
    callable_name,
    loose,
    objects,
    only_text,
    result,
    settings_said,
    spec,
    text_of,
    uncallable_name,
)

__all__ = ["MessagesReader"]

_PROVIDER = "anthropic"
#: a prompt-cache marker may be added, nulled or moved by a client between two requests
_CACHE_MARKER = ("cache_control",)


class MessagesReader:
    """The recording reader half of the Anthropic Messages adapter."""

    def request_items(self, body: Any) -> list[JSONObject]:
        return objects(body.get("messages") if isinstance(body, dict) else None)

    def continues_from(self, body: Any) -> str | None:
        return None

    def task_text(self, body: Any) -> str | None:
        for item in reversed(self.request_items(body)):
            if item.get("role") == "user":
                text = text_of(item.get("content"))
                if text is not None:
                    return text
        return None

    def declared_tools(self, body: Any) -> list[ToolSpec]:
        entries = body.get("tools") if isinstance(body, dict) else None
        specs: list[ToolSpec] = []
        taken: set[str] = set()
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(entry, dict):
                continue
            name, kind = callable_name(entry), entry.get("type")
            if kind in (None, "custom"):
                if not name:
                    continue
                parameters = entry.get("input_schema")
            else:  # provider-defined: the provider fixes its input schema
                name = name or uncallable_name(str(kind), index, taken)
                parameters = entry.get("input_schema") or {"type": "object"}
            if name in taken:
                continue
            taken.add(name)
            specs.append(spec(name, entry.get("description"), parameters, _PROVIDER, entry))
        return specs

    def recorded_settings(self, body: Any, uri: str) -> JSONObject:
        if not isinstance(body, dict):
            return {}
        instructions = text_of(body.get("system"))
        stream = body.get("stream") is True
        return settings_said(body.get("model"), body.get("max_tokens"), instructions, stream)

    def request_results(self, body: Any) -> list[RecordedResult]:
        found: list[RecordedResult] = []
        for item in self.request_items(body):
            content = item.get("content")
            if item.get("role") != "user" or not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "tool_result":
                    continue
                value = block.get("content", "")
                text = only_text(value)
                flag = block.get("is_error", False)
                found.append(
                    result(block.get("tool_use_id"), value if text is None else text, flag)
                )
        return found

    def comparable(self, item: Any) -> Any:
        return loose(_without_direct_caller(item), _CACHE_MARKER)


#: blocks whose ``caller`` says who called the tool; ``direct`` (the model) is the default
_CALLED = frozenset({"tool_use", "server_tool_use"})
_DIRECT = {"type": "direct"}


def _without_direct_caller(item: Any) -> Any:
    """A message whose tool calls name no ``caller`` when it is the default, ``direct``:
    answers carry it, and a client echoing them may leave it out. Any other caller (a code
    execution tool that called it) is part of the block and stays."""
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list):
        return item
    blocks = [
        {k: v for k, v in block.items() if k != "caller"}
        if isinstance(block, dict)
        and block.get("type") in _CALLED
        and block.get("caller") == _DIRECT
        else block
        for block in content
    ]
    return {**item, "content": blocks}
