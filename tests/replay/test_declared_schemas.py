"""Declared tools as providers accept them: Gemini's own schema types, empty descriptions.

A recorded declaration in Gemini's schema dialect (``type: STRING``, ``nullable``) is turned
into JSON Schema, so the replay validates calls against it instead of checking nothing; and
a description may be empty, null or absent, in a recording and in a registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from recordings import (
    OPENAI,
    calls,
    exchange,
    generate_uri,
    gg_call,
    gg_response,
    oa_call,
    oa_output,
    oa_response,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out

from toolloop_cli.tools.registry import check_registry, load_registry
from toolloop_cli.tools.validation import schema_problem

GEMINI_SCHEMA = {
    "type": "OBJECT",
    "properties": {
        "city": {"type": "STRING", "description": "A city"},
        "days": {"type": "INTEGER", "format": "int32", "nullable": True},
        "unit": {"type": "STRING", "format": "enum", "enum": ["C", "F"]},
        "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
    },
    "required": ["city"],
    "propertyOrdering": ["city", "days", "unit", "tags"],
}


def test_gemini_schema_types_become_json_schema() -> None:
    from toolloop_cli.adapters._gemini_schema import json_schema

    assert schema_problem(GEMINI_SCHEMA) is not None  # not JSON Schema as recorded
    converted = json_schema(GEMINI_SCHEMA)
    assert converted == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "A city"},
            "days": {"type": ["integer", "null"], "format": "int32"},
            "unit": {"type": "string", "enum": ["C", "F"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["city"],
    }
    assert schema_problem(converted) is None
    already = {"type": "object", "properties": {"a": {"type": ["string", "null"]}}}
    assert json_schema(already) == already


def test_calls_are_validated_against_a_gemini_dialect_declaration(
    cli: Invoke, tmp_path: Path
) -> None:
    tools = [{"functionDeclarations": [{"name": "forecast", "parameters": GEMINI_SCHEMA}]}]
    user = {"role": "user", "parts": [{"text": "Forecast for Paris?"}]}
    good = gg_call("forecast", {"city": "Paris", "days": None, "unit": "C"})
    bad = gg_call("forecast", {"city": 7})
    invalid = {
        "ok": False,
        "error": {
            "code": "invalid_arguments",
            "message": "arguments do not match the schema: $.city: 7 is not of type 'string'",
        },
    }
    history = [user, {"role": "model", "parts": [good]}]
    reply1 = {
        "role": "user",
        "parts": [{"functionResponse": {"name": "forecast", "response": {"t": 20}}}],
    }
    reply2 = {
        "role": "user",
        "parts": [{"functionResponse": {"name": "forecast", "response": invalid}}],
    }
    second = [*history, reply1]
    third = [*second, {"role": "model", "parts": [bad]}, reply2]
    path = write(
        tmp_path,
        [
            exchange(
                generate_uri(), {"contents": [user], "tools": tools}, gg_response("r1", [good])
            ),
            exchange(
                generate_uri(), {"contents": second, "tools": tools}, gg_response("r2", [bad])
            ),
            exchange(
                generate_uri(),
                {"contents": third, "tools": tools},
                gg_response("r3", [{"text": "20 °C."}]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [(c["name"], c["state"]) for c in out["calls"]] == [
        ("forecast", "SUCCEEDED"),
        ("forecast", "INVALID"),
    ]


@pytest.mark.parametrize("description", ["", None, "absent"], ids=["empty", "null", "absent"])
def test_a_recorded_tool_without_a_description_replays(
    cli: Invoke, tmp_path: Path, description: Any
) -> None:
    tool: dict[str, Any] = {"type": "function", "name": "ping", "parameters": {"type": "object"}}
    if description != "absent":
        tool["description"] = description
    user = {"role": "user", "content": "Ping."}
    call = oa_call("call_1", "ping", {})
    path = write(
        tmp_path,
        [
            exchange(
                OPENAI,
                {"model": "gpt-5", "input": [user], "tools": [tool]},
                oa_response("r1", [call]),
            ),
            exchange(
                OPENAI,
                {
                    "model": "gpt-5",
                    "input": [user, call, oa_output("call_1", "pong")],
                    "tools": [tool],
                },
                oa_response("r2", [oa_text("Pong.")]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("ping", "SUCCEEDED", "pong")]


@pytest.mark.parametrize("description", ["", None, "absent"], ids=["empty", "null", "absent"])
def test_a_registry_tool_may_have_an_empty_or_no_description(
    tmp_path: Path, description: Any
) -> None:
    (tmp_path / "pings.py").write_text("def ping(arguments, context):\n    return 'pong'\n")
    tool: dict[str, Any] = {
        "schema_version": "v1",
        "risk": "read",
        "handler": "pings:ping",
        "parameters": {"type": "object"},
    }
    if description != "absent":
        tool["description"] = description
    doc = {
        "registry": "r",
        "revision": "1",
        "policy": {"revision": "p", "approvers": []},
        "tools": {"ping": tool},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert check_registry(path) == []
    (spec,) = load_registry(path).tool_specs()
    assert spec.description == ""


def test_a_registry_s_empty_description_matches_a_recording_s(cli: Invoke, tmp_path: Path) -> None:
    (tmp_path / "pings.py").write_text("def ping(arguments, context):\n    return 'pong'\n")
    doc = {
        "registry": "r",
        "revision": "1",
        "policy": {"revision": "p", "approvers": []},
        "tools": {
            "ping": {
                "schema_version": "v1",
                "risk": "read",
                "handler": "pings:ping",
                "parameters": {"type": "object"},
            }
        },
    }
    registry = tmp_path / "r.yaml"
    registry.write_text(yaml.safe_dump(doc))
    tool = {"type": "function", "name": "ping", "description": "", "parameters": {"type": "object"}}
    user = {"role": "user", "content": "Ping."}
    call = oa_call("call_1", "ping", {})
    path = write(
        tmp_path,
        [
            exchange(
                OPENAI,
                {"model": "gpt-5", "input": [user], "tools": [tool]},
                oa_response("r1", [call]),
            ),
            exchange(
                OPENAI,
                {
                    "model": "gpt-5",
                    "input": [user, call, oa_output("call_1", "pong")],
                    "tools": [tool],
                },
                oa_response("r2", [oa_text("Pong.")]),
            ),
        ],
    )
    result = cli("replay", str(path), "--registry", str(registry), "--json")
    out = json_out(result)
    assert (result.exit_code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
