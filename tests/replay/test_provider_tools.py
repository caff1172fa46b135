"""Provider-defined client tools: Anthropic's memory tool, OpenAI's client-executed tool search.

They are declared by type, not by a JSON Schema, and the client executes them. A registry
allowlists one with ``provider_tool`` (handler, risk and approval policy as for any tool);
the adapter declares it in the provider's own shape, only to that provider; a replay
without a registry recognises it from the recorded request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from recordings import (
    ANTHROPIC,
    JSON,
    OPENAI,
    SSE,
    an_message,
    an_result,
    an_text,
    an_use,
    calls,
    exchange,
    oa_call,
    oa_output,
    oa_response,
    oa_stream,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out
from typer.testing import CliRunner

from toolloop_cli.adapters import get_adapter
from toolloop_cli.cli import app
from toolloop_cli.engine.types import ModelSettings
from toolloop_cli.tools.registry import check_registry, load_registry

MEMORY = {"name": "memory", "type": "memory_20250818"}
VIEW = {"command": "view", "path": "/memories"}


def memory_recording(tmp_path: Path, declared: list[dict[str, Any]] | None = None) -> Path:
    """pydantic-ai's memory-tool round trip, against ``/v1/messages?beta=true``."""
    tools = [MEMORY] if declared is None else declared
    user = {"role": "user", "content": [{"type": "text", "text": "Where do I live?"}]}
    said = [an_text("I'll check my memory."), an_use("toolu_01YC", "memory", VIEW)]
    result = an_result("toolu_01YC", "The user lives in Mexico City.")
    second = [user, {"role": "assistant", "content": said}, {"role": "user", "content": [result]}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "tools": tools}
    uri = f"{ANTHROPIC}?beta=true"
    return write(
        tmp_path,
        [
            exchange(uri, {**body, "messages": [user]}, an_message("msg_1", said, "tool_use")),
            exchange(
                uri,
                {**body, "messages": second},
                an_message("msg_2", [an_text("You live in Mexico City.")], "end_turn"),
            ),
        ],
    )


def test_a_recorded_provider_tool_is_recognised_without_a_registry(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, memory_recording(tmp_path))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("memory", "SUCCEEDED", "The user lives in Mexico City.")]


def test_a_provider_tool_the_request_did_not_declare_is_an_unknown_tool(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, memory_recording(tmp_path, declared=[]))
    assert [(c["name"], c["state"]) for c in out["calls"]] == [("memory", "INVALID")]
    assert out["calls"][0]["result"]["error"]["code"] == "unknown_tool"
    assert code == 17  # the recording's client ran it; toolloop refused it


# -- in a registry --------------------------------------------------------------------------------

HANDLERS = """
def memory(arguments, context):
    return "The user lives in Mexico City."
"""


def registry(tmp_path: Path, approval: str = "never", **memory: Any) -> Path:
    (tmp_path / "memory_tools.py").write_text(HANDLERS)
    doc = {
        "registry": "assistant",
        "revision": "1",
        "policy": {"revision": "p1", "approvers": ["ops-lead"]},
        "tools": {
            "memory": {
                "provider_tool": {"provider": "anthropic", "type": "memory_20250818"},
                "schema_version": "memory-v1",
                "risk": "write",
                "approval": approval,
                "handler": "memory_tools:memory",
                **memory,
            }
        },
    }
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_provider_tool_in_a_registry_passes_registry_check(tmp_path: Path) -> None:
    path = registry(tmp_path)
    result = CliRunner().invoke(app, ["registry", "check", str(path)])
    assert result.exit_code == 0, result.output
    (spec,) = load_registry(path).tool_specs()
    assert (spec.provider, spec.declaration) == ("anthropic", MEMORY)


@pytest.mark.parametrize(
    ("provider_tool", "where", "message"),
    [
        (
            {"provider": "acme", "type": "x_20250101"},
            "provider",
            "must be one of anthropic, openai",
        ),
        ({"provider": "anthropic", "type": "memory"}, "type", "versioned Anthropic tool type"),
        ({"provider": "anthropic", "type": "memory_20250818", "name": "m"}, "name", "leave it out"),
        ({"provider": "openai", "type": "tool_search"}, "", "name it so"),
        ("memory_20250818", "", "must be a mapping"),
    ],
    ids=["provider", "type", "name", "openai-name", "not-a-mapping"],
)
def test_a_bad_provider_tool_is_a_registry_problem_with_its_path(
    tmp_path: Path, provider_tool: Any, where: str, message: str
) -> None:
    path = registry(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["tools"]["memory"]["provider_tool"] = provider_tool
    path.write_text(yaml.safe_dump(doc))
    problems = check_registry(path)
    expected = "tools.memory.provider_tool" + (f".{where}" if where else "")
    assert any(p == expected and message in m for p, m in problems), problems


def test_the_adapter_declares_a_provider_tool_in_its_own_shape_and_only_to_its_provider(
    tmp_path: Path,
) -> None:
    specs = load_registry(registry(tmp_path)).tool_specs()
    settings = ModelSettings(model="m")
    conversation = [{"role": "user", "content": "hi"}]
    anthropic = get_adapter("anthropic", "messages").build_request(conversation, specs, settings)
    openai = get_adapter("openai", "responses").build_request(conversation, specs, settings)
    assert anthropic.body["tools"] == [MEMORY]
    assert "tools" not in openai.body


def test_a_registry_s_provider_tool_answers_a_recorded_call(cli: Invoke, tmp_path: Path) -> None:
    path = memory_recording(tmp_path)
    result = cli("replay", str(path), "--registry", str(registry(tmp_path)), "--json")
    out = json_out(result)
    assert (result.exit_code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("memory", "SUCCEEDED", "The user lives in Mexico City.")]


def test_a_provider_tool_needs_approval_when_its_policy_says_so(
    cli: Invoke, tmp_path: Path
) -> None:
    path = memory_recording(tmp_path)
    result = cli("replay", str(path), "--registry", str(registry(tmp_path, "always")), "--json")
    out = json_out(result)
    assert (result.exit_code, out["state"]) == (10, "WAITING_APPROVAL")
    assert [(a["tool"], a["status"]) for a in out["approvals"]] == [("memory", "PENDING")]
    approved = cli(
        "replay", str(path), "--registry", str(registry(tmp_path, "always")),
        "--approve-as", "ops-lead", "--json",
    )  # fmt: skip
    assert (approved.exit_code, json_out(approved)["state"]) == (0, "COMPLETED")


def test_a_registry_without_the_provider_tool_refuses_its_call(cli: Invoke, tmp_path: Path) -> None:
    (tmp_path / "other.py").write_text("def noop(arguments, context):\n    return None\n")
    doc = {
        "registry": "r",
        "revision": "1",
        "policy": {"revision": "p1", "approvers": []},
        "tools": {
            "noop": {
                "schema_version": "v1",
                "risk": "read",
                "handler": "other:noop",
                "parameters": {"type": "object"},
            }
        },
    }
    reg = tmp_path / "r.yaml"
    reg.write_text(yaml.safe_dump(doc))
    out = json_out(cli("replay", str(memory_recording(tmp_path)), "--registry", str(reg), "--json"))
    assert [(c["name"], c["state"]) for c in out["calls"]] == [("memory", "INVALID")]
    assert out["calls"][0]["result"]["error"]["code"] == "unknown_tool"


def test_another_provider_s_tool_is_unknown_to_an_openai_run(cli: Invoke, tmp_path: Path) -> None:
    """A registry's Anthropic memory tool does not exist for OpenAI: not declared there, and
    an OpenAI model calling ``memory`` calls an unknown tool."""
    user = {"role": "user", "content": "Where do I live?"}
    call = oa_call("call_m", "memory", VIEW)
    path = write(
        tmp_path,
        [
            exchange(OPENAI, {"model": "gpt-5", "input": [user]}, oa_response("resp_1", [call])),
            exchange(
                OPENAI,
                {"model": "gpt-5", "input": [user, call, oa_output("call_m", "no")]},
                oa_response("resp_2", [oa_text("I do not know.")]),
            ),
        ],
    )
    out = json_out(cli("replay", str(path), "--registry", str(registry(tmp_path)), "--json"))
    assert [(c["name"], c["state"]) for c in out["calls"]] == [("memory", "INVALID")]
    assert out["calls"][0]["result"]["error"]["code"] == "unknown_tool"


# -- OpenAI's client-executed tool search ---------------------------------------------------------

SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "There are additional tools; search for them.",
    "parameters": {
        "type": "object",
        "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
        "required": ["queries"],
        "additionalProperties": False,
    },
}
RATE = {
    "type": "function",
    "name": "get_exchange_rate",
    "defer_loading": True,
    "description": "The exchange rate between two currencies",
    "parameters": {
        "type": "object",
        "properties": {"base": {"type": "string"}, "quote": {"type": "string"}},
        "required": ["base", "quote"],
        "additionalProperties": False,
    },
    "strict": True,
}


def tool_search_recording(tmp_path: Path, stream: bool) -> Path:
    search = {
        "type": "tool_search_call",
        "id": "tsc_0b49",
        "call_id": "call_dAz2",
        "execution": "client",
        "status": "completed",
        "arguments": {"queries": ["exchange rate USD EUR"]},
    }
    found = {
        "type": "tool_search_output",
        "call_id": "call_dAz2",
        "execution": "client",
        "status": "completed",
        "tools": [RATE],
    }
    rate = oa_call("call_rate", "get_exchange_rate", {"base": "USD", "quote": "EUR"})
    user = {"role": "user", "content": "How many euros is a dollar?"}
    inputs = [
        [user],
        [user, search, found],
        [user, search, found, rate, oa_output("call_rate", "0.92")],
    ]
    answers = [
        oa_response("resp_1", [search]),
        oa_response("resp_2", [rate]),
        oa_response("resp_3", [oa_text("A dollar is 0.92 euros.")]),
    ]
    body = {"model": "gpt-5.4", "tools": [SEARCH, RATE], "stream": stream}
    return write(
        tmp_path,
        [
            exchange(
                OPENAI,
                {**body, "input": items},
                oa_stream(answer) if stream else answer,
                content_type=SSE if stream else JSON,
            )
            for items, answer in zip(inputs, answers, strict=True)
        ],
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_openai_client_tool_search_is_a_call_answered_by_its_output_item(
    cli: Invoke, tmp_path: Path, stream: bool
) -> None:
    code, out = replay(cli, tool_search_recording(tmp_path, stream))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("tool_search", "SUCCEEDED", [RATE]),
        ("get_exchange_rate", "SUCCEEDED", 0.92),
    ]
    assert out["calls"][0]["arguments"] == {"queries": ["exchange rate USD EUR"]}


def test_a_server_executed_tool_search_is_carried_never_taken_for_a_call_or_a_result(
    cli: Invoke, tmp_path: Path
) -> None:
    """OpenAI's own (server) tool search: its call and output items are the model's output,
    echoed back in the next request, and not a result the client sent."""
    server_call = {
        "type": "tool_search_call",
        "id": "tsc_0ab0",
        "call_id": None,
        "execution": "server",
        "status": "completed",
        "arguments": {"paths": ["get_exchange_rate"]},
    }
    server_out = {
        "type": "tool_search_output",
        "id": "tso_0ab0",
        "call_id": None,
        "execution": "server",
        "status": "completed",
        "tools": [RATE],
    }
    rate = oa_call("call_S3", "get_exchange_rate", {"base": "USD", "quote": "EUR"})
    user = {"role": "user", "content": "USD to EUR?"}
    echoed = [server_call, server_out, {**rate, "namespace": "get_exchange_rate"}]
    body = {"model": "gpt-5.4", "tools": [{"type": "tool_search"}, RATE]}
    path = write(
        tmp_path,
        [
            exchange(
                OPENAI,
                {**body, "input": [user]},
                oa_response("r1", [server_call, server_out, rate]),
            ),
            exchange(
                OPENAI,
                {**body, "input": [user, *echoed, oa_output("call_S3", "1 USD = 0.92 EUR")]},
                oa_response("r2", [oa_text("0.92.")]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("get_exchange_rate", "SUCCEEDED", "1 USD = 0.92 EUR")]
