"""What recorded Gemini requests say (``engine.ports.RecordingReader``), for both families.

generateContent: the API reads its JSON with either field spelling (``functionResponse`` and
``function_response``, ``parametersJsonSchema`` and ``parameters_json_schema``…) and takes
``tools``, ``contents`` and ``parts`` as a list or a single object; so do these readers. A
declaration's ``parameters`` in Gemini's own schema dialect (``type: STRING``) is turned into
JSON Schema for validation (``_gemini_schema``); the declaration itself is kept as recorded.
Answers are camelCase, and a thought signature may come back re-encoded in base64url:
``comparable`` folds both, so a request that echoes an answer still matches it.

Interactions: ``input`` steps; provider state is continued by ``previous_interaction_id``.
"""

from __future__ import annotations

import re
from typing import Any

from toolloop_cli.engine.types import JSONObject, RecordedResult, ToolSpec

from ._gemini_schema import json_schema
from ._reading import (
    callable_name,
    loose,
    objects,
    result,
    settings_said,
    spec,
    text_of,
    uncallable_name,
)

__all__ = ["GenerateReader", "InteractionsReader", "field"]

_PROVIDER = "gemini"
_SNAKE = r"_([a-z0-9])"
#: values that are the user's own data: their keys are never respelled
_OPAQUE = frozenset({"args", "response", "parameters", "parametersJsonSchema", "result"})
_SIGNATURES = frozenset({"thoughtSignature", "signature"})
_B64URL = str.maketrans("-_", "+/")


def _camel(key: str) -> str:
    return re.sub(_SNAKE, lambda m: m.group(1).upper(), key)


def field(mapping: Any, name: str) -> Any:
    """``mapping[name]`` under its camelCase or snake_case spelling (``name`` is camelCase)."""
    if not isinstance(mapping, dict):
        return None
    if name in mapping:
        return mapping[name]
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
    return mapping.get(snake)


def _respelled(value: Any) -> Any:
    """Keys camelCased, nulls dropped and signatures in standard base64, recursively."""
    if isinstance(value, list):
        return [_respelled(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        name = _camel(key)
        if name in _OPAQUE:
            out[name] = loose(item)
        elif name in _SIGNATURES and isinstance(item, str):
            out[name] = item.translate(_B64URL).rstrip("=")
        else:
            out[name] = _respelled(item)
    return out


def _listed(value: Any) -> Any:
    """A repeated field as a list: the API also takes one object where a list is due
    (``"contents": {…}``, ``"parts": {…}``), as it does for ``tools``."""
    return [value] if isinstance(value, dict) else value


class GenerateReader:
    """The recording reader half of the generateContent adapter."""

    def request_items(self, body: Any) -> list[JSONObject]:
        contents = objects(_listed(body.get("contents") if isinstance(body, dict) else None))
        return [
            {**item, "parts": [item["parts"]]} if isinstance(item.get("parts"), dict) else item
            for item in contents
        ]

    def continues_from(self, body: Any) -> str | None:
        return None

    def task_text(self, body: Any) -> str | None:
        for item in reversed(self.request_items(body)):
            if item.get("role", "user") == "user":
                text = text_of(item.get("parts"))
                if text is not None:
                    return text
        return None

    def declared_tools(self, body: Any) -> list[ToolSpec]:
        tools = body.get("tools") if isinstance(body, dict) else None
        entries = [tools] if isinstance(tools, dict) else tools if isinstance(tools, list) else []
        specs: list[ToolSpec] = []
        taken: set[str] = set()
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                continue
            declarations = field(entry, "functionDeclarations")
            for decl in declarations if isinstance(declarations, list) else []:
                name = callable_name(decl)
                if name is None or name in taken:
                    continue
                taken.add(name)
                schema: Any = next(
                    (
                        field(decl, key)
                        for key in ("parametersJsonSchema", "parameters")
                        if isinstance(field(decl, key), dict)
                    ),
                    {},
                )
                specs.append(
                    spec(name, decl.get("description"), json_schema(schema), _PROVIDER, decl)
                )
            rest = {k: v for k, v in entry.items() if _camel(k) != "functionDeclarations"}
            if rest:  # googleSearch, codeExecution…: declared again as recorded
                name = uncallable_name(_camel(next(iter(rest))), index, taken)
                taken.add(name)
                specs.append(spec(name, None, {}, _PROVIDER, rest))
        return specs

    def recorded_settings(self, body: Any, uri: str) -> JSONObject:
        if not isinstance(body, dict):
            return {}
        path = uri.split("?", 1)[0]
        model = path.rsplit("/", 1)[-1].split(":", 1)[0] or None
        limit = field(field(body, "generationConfig"), "maxOutputTokens")
        system = field(body, "systemInstruction")
        instructions = text_of(_listed(system.get("parts")) if isinstance(system, dict) else system)
        return settings_said(model, limit, instructions, ":streamGenerateContent" in path)

    def request_results(self, body: Any) -> list[RecordedResult]:
        found: list[RecordedResult] = []
        for item in self.request_items(body):
            parts = item.get("parts")
            for part in parts if isinstance(parts, list) else []:
                response = field(part, "functionResponse")
                if isinstance(response, dict):
                    found.append(
                        result(
                            response.get("id"), response.get("response"), None, response.get("name")
                        )
                    )
        return found

    def comparable(self, item: Any) -> Any:
        return _respelled(item)


class InteractionsReader:
    """The recording reader half of the Interactions adapter."""

    def request_items(self, body: Any) -> list[JSONObject]:
        items = body.get("input") if isinstance(body, dict) else None
        if isinstance(items, str):
            return [{"type": "user_input", "content": [{"type": "text", "text": items}]}]
        return objects(items)

    def continues_from(self, body: Any) -> str | None:
        previous = body.get("previous_interaction_id") if isinstance(body, dict) else None
        return previous if isinstance(previous, str) and previous else None

    def task_text(self, body: Any) -> str | None:
        for item in reversed(self.request_items(body)):
            if item.get("type") == "user_input" or item.get("role") == "user":
                text = text_of(item.get("content"))
                if text is not None:
                    return text
            if item.get("type") == "text" and isinstance(item.get("text"), str):
                return str(item["text"])
        return None

    def declared_tools(self, body: Any) -> list[ToolSpec]:
        entries = body.get("tools") if isinstance(body, dict) else None
        specs: list[ToolSpec] = []
        taken: set[str] = set()
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(entry, dict):
                continue
            name = callable_name(entry)
            kind = str(entry.get("type"))
            if kind != "function" or name is None:
                name = uncallable_name(kind, index, taken)
            if name in taken:
                continue
            taken.add(name)
            parameters = entry.get("parameters") if kind == "function" else {}
            specs.append(spec(name, entry.get("description"), parameters, _PROVIDER, entry))
        return specs

    def recorded_settings(self, body: Any, uri: str) -> JSONObject:
        if not isinstance(body, dict):
            return {}
        config = body.get("generation_config")
        limit = config.get("max_output_tokens") if isinstance(config, dict) else None
        instructions = text_of(body.get("system_instruction"))
        stream = body.get("stream") is True
        return settings_said(body.get("model"), limit, instructions, stream)

    def request_results(self, body: Any) -> list[RecordedResult]:
        """The ``function_result`` steps, whether on their own or inside a ``user_input``
        step's content (rig sends them so, and the API answers it)."""
        found: list[JSONObject] = []
        for item in self.request_items(body):
            if item.get("type") == "function_result":
                found.append(item)
            elif item.get("type") == "user_input" and isinstance(item.get("content"), list):
                found += [c for c in objects(item["content"]) if c.get("type") == "function_result"]
        return [
            result(item.get("call_id"), item.get("result"), item.get("is_error"), item.get("name"))
            for item in found
        ]

    def comparable(self, item: Any) -> Any:
        return loose(item)
