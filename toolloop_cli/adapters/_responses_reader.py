"""What a recorded OpenAI Responses request says (``engine.ports.RecordingReader``).

Tools are declared in ``tools`` and, for tools loaded later in a conversation, in
``additional_tools`` input items; a client-executed tool search (``{"type": "tool_search",
"execution": "client"}``) is called as the tool ``tool_search`` and answered by a
``tool_search_output`` item whose ``tools`` are its result. A custom (free-text) tool
(``{"type": "custom", "name": …}``) takes the arguments ``{"input": <text>}`` and is answered
by a ``custom_tool_call_output`` item. A request continues provider state through
``previous_response_id`` or a ``conversation``.
"""

from __future__ import annotations

from typing import Any

from toolloop_cli.engine.types import TEXT_INPUT, JSONObject, RecordedResult, ToolSpec

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

__all__ = ["CUSTOM", "TOOL_SEARCH", "ResponsesReader", "client_tool_search"]

#: The name a client-executed tool search is called by (its items carry no name).
TOOL_SEARCH = "tool_search"
#: The declaration type of a custom tool, whose calls carry free text, not JSON arguments.
CUSTOM = "custom"
_PROVIDER = "openai"
#: fields a client may add, drop or change when it echoes an output item back as input
_ECHO_FIELDS = ("status", "namespace")


def client_tool_search(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and entry.get("type") == TOOL_SEARCH
        and entry.get("execution") == "client"
    )


class ResponsesReader:
    """The recording reader half of the OpenAI Responses adapter."""

    def request_items(self, body: Any) -> list[JSONObject]:
        items = body.get("input") if isinstance(body, dict) else None
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return objects(items)

    def continues_from(self, body: Any) -> str | None:
        if not isinstance(body, dict):
            return None
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous:
            return previous
        conversation = body.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        if isinstance(conversation, str) and conversation:
            return f"conversation:{conversation}"
        return None

    def task_text(self, body: Any) -> str | None:
        for item in reversed(self.request_items(body)):
            if item.get("role") == "user" and item.get("type", "message") == "message":
                text = text_of(item.get("content"))
                if text is not None:
                    return text
        return None

    def declared_tools(self, body: Any) -> list[ToolSpec]:
        entries: list[Any] = []
        if isinstance(body, dict) and isinstance(body.get("tools"), list):
            entries += body["tools"]
        for item in self.request_items(body):
            if item.get("type") == "additional_tools" and isinstance(item.get("tools"), list):
                entries += item["tools"]
        specs: list[ToolSpec] = []
        taken: set[str] = set()
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                continue
            kind, name = entry["type"], callable_name(entry)
            if kind == "function" and name:
                parameters = entry.get("parameters")
            elif client_tool_search(entry):
                name, parameters = TOOL_SEARCH, entry.get("parameters") or {"type": "object"}
            elif kind == CUSTOM and name:
                parameters = TEXT_INPUT
            else:  # server-executed tools: declared again as recorded, never called by name
                name, parameters = uncallable_name(kind, index, taken), {}
            if name in taken:
                continue
            taken.add(name)
            specs.append(spec(name, entry.get("description"), parameters, _PROVIDER, entry))
        return specs

    def recorded_settings(self, body: Any, uri: str) -> JSONObject:
        if not isinstance(body, dict):
            return {}
        limit, stream = body.get("max_output_tokens"), body.get("stream") is True
        return settings_said(body.get("model"), limit, body.get("instructions"), stream)

    def request_results(self, body: Any) -> list[RecordedResult]:
        found: list[RecordedResult] = []
        for item in self.request_items(body):
            match item.get("type"):
                case "function_call_output" | "custom_tool_call_output":
                    output = item.get("output")
                    text = only_text(output) if isinstance(output, list) else None
                    found.append(result(item.get("call_id"), output if text is None else text))
                case "tool_search_output" if item.get("execution") == "client":
                    # a server-executed search's output is the model's own item, echoed back
                    found.append(result(item.get("call_id"), item.get("tools"), name=TOOL_SEARCH))
                case _:
                    pass
        return found

    def comparable(self, item: Any) -> Any:
        if isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in _ECHO_FIELDS}
        return loose(item)
