"""What a recorded *request* says, read straight from its JSON, for each provider API family.

A replay needs to know, from a recording alone, the task it started from, the model settings,
the tools it declared and where one conversation ends and the next begins. These readers work
on the request bodies as JSON and import no adapter: they accept what other tools recorded
(OpenAI Responses ``input``, Anthropic ``messages``, Gemini Interactions ``input`` steps and
generateContent ``contents``), and return ``None`` or ``[]`` for what a request does not say.
The tool results a request carries are read by ``divergence.results_in_request``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from toolloop_cli.engine.types import JSONObject, ToolSpec

__all__ = [
    "Api",
    "continues_from",
    "conversation_items",
    "declared_tools",
    "recorded_settings",
    "task_text",
    "text_of",
]

Api = tuple[str, str]


def _family(api: Api) -> str:
    return api[1]


def conversation_items(api: Api, body: Any) -> list[Any]:
    """The conversation a request carries (a string input counts as one user message)."""
    if not isinstance(body, dict):
        return []
    key = {"messages": "messages", "generate_content": "contents"}.get(_family(api), "input")
    items = body.get(key)
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def continues_from(api: Api, body: Any) -> str | None:
    """The provider-side id a stateful request continues (``previous_response_id`` …)."""
    if not isinstance(body, dict):
        return None
    key = {"responses": "previous_response_id", "interactions": "previous_interaction_id"}
    name = key.get(_family(api))
    value = body.get(name) if name else None
    return value if isinstance(value, str) and value else None


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


def task_text(api: Api, body: Any) -> str | None:
    """The first user input of a request: the task a replay starts from."""
    for item in conversation_items(api, body):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "user_input":
            return text_of(item.get("content"))
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            return str(item["text"])
        if item.get("role") == "user":
            content = item.get("parts") if _family(api) == "generate_content" else None
            return text_of(content if content is not None else item.get("content"))
    return None


def declared_tools(api: Api, body: Any) -> list[ToolSpec]:
    """The function tools a request declares, as neutral ``ToolSpec`` (server tools skipped)."""
    if not isinstance(body, dict) or not isinstance(body.get("tools"), list):
        return []
    entries: list[Any] = body["tools"]
    if _family(api) == "generate_content":
        entries = [
            decl
            for tool in entries
            if isinstance(tool, dict)
            for decl in tool.get("functionDeclarations") or []
        ]
    specs: list[ToolSpec] = []
    for entry in entries:
        spec = _tool_spec(api, entry)
        if spec is not None:
            specs.append(spec)
    return specs


def _tool_spec(api: Api, entry: Any) -> ToolSpec | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    family = _family(api)
    if family in ("responses", "interactions") and entry.get("type") != "function":
        return None
    if family == "messages" and entry.get("type") not in (None, "custom"):
        return None
    keys = {
        "messages": ("input_schema",),
        "generate_content": ("parametersJsonSchema", "parameters"),
    }.get(family, ("parameters",))
    parameters: JSONObject = next((entry[k] for k in keys if isinstance(entry.get(k), dict)), {})
    description = entry.get("description")
    return ToolSpec(
        name=entry["name"],
        description=description if isinstance(description, str) else "",
        parameters=parameters,
    )


def recorded_settings(api: Api, body: Any, uri: str = "") -> JSONObject:
    """``ModelSettings`` fields a request shows: model, output cap, streaming, instructions."""
    if not isinstance(body, dict):
        return {}
    family = _family(api)
    settings: JSONObject = {}
    model = body.get("model")
    if family == "generate_content":
        model = urlsplit(uri).path.rsplit("/", 1)[-1].split(":", 1)[0] or None
    if isinstance(model, str):
        settings["model"] = model
    limit: Any
    if family == "messages":
        limit, instructions = body.get("max_tokens"), text_of(body.get("system"))
    elif family == "interactions":
        config = body.get("generation_config")
        limit = config.get("max_output_tokens") if isinstance(config, dict) else None
        instructions = text_of(body.get("system_instruction"))
    elif family == "generate_content":
        config = body.get("generationConfig")
        limit = config.get("maxOutputTokens") if isinstance(config, dict) else None
        system = body.get("systemInstruction")
        instructions = text_of(system.get("parts")) if isinstance(system, dict) else None
    else:
        limit, instructions = body.get("max_output_tokens"), body.get("instructions")
    if isinstance(limit, int) and not isinstance(limit, bool):
        settings["max_output_tokens"] = limit
    if isinstance(instructions, str):
        settings["instructions"] = instructions
    streamed = body.get("stream") is True or ":streamGenerateContent" in uri
    if streamed:
        settings["stream"] = True
    return settings
