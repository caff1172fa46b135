"""OpenAI custom (free-text) tools: a ``custom_tool_call`` carries text, not JSON arguments.

A recording whose model called a custom tool (Codex's ``apply_patch`` is one) replays: the
call is made with the arguments ``{"input": <its text>}`` (what its declaration is checked
as), its recorded ``custom_tool_call_output`` is the result, the next request answers it in
that item, and ``verify`` rebuilds the requests the same way. Streamed, the input's pieces
are the call's text, as a function's argument pieces are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from recordings import JSON, OPENAI, SSE, exchange, oa_response, oa_stream, oa_text, replay, write
from support.cli import Invoke, json_out

from toolloop_cli.adapters.openai_responses import OpenAIResponsesAdapter
from toolloop_cli.engine.types import (
    TEXT_INPUT,
    HttpResponse,
    ModelSettings,
    ResultForModel,
    TurnOutcome,
)
from toolloop_cli.errors import MalformedProviderPayload
from toolloop_cli.tools.registry import check_registry, load_registry

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch"
TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch to the working tree",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /(.|\\n)+/"},
}
TASK = "Create hello.txt saying hello."


def custom_call(text: str = PATCH, call_id: str = "call_patch") -> dict[str, Any]:
    return {
        "type": "custom_tool_call",
        "id": f"ctc_{call_id}",
        "call_id": call_id,
        "name": "apply_patch",
        "input": text,
        "status": "completed",
    }


def patch_loop(stream: bool) -> list[dict[str, Any]]:
    first = [{"role": "user", "content": [{"type": "input_text", "text": TASK}]}]
    answers = [
        oa_response("resp_1", [custom_call()]),
        oa_response("resp_2", [oa_text("Created hello.txt.")]),
    ]
    output = {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Done!"}
    second = [*first, custom_call(), output]
    return [
        exchange(
            OPENAI,
            {"model": "gpt-5", "input": items, "tools": [TOOL], "stream": stream},
            oa_stream(answer) if stream else answer,
            content_type=SSE if stream else JSON,
        )
        for items, answer in zip((first, second), answers, strict=True)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_recorded_custom_tool_call_replays_with_its_text_as_the_input(
    cli: Invoke, tmp_path: Path, stream: bool
) -> None:
    code, out = replay(cli, write(tmp_path, patch_loop(stream)))
    assert (code, out["state"], out["final_text"]) == (0, "COMPLETED", "Created hello.txt.")
    assert out["divergences"] == []
    (call,) = out["calls"]
    assert (call["name"], call["state"], call["arguments"]) == (
        "apply_patch",
        "SUCCEEDED",
        {"input": PATCH},
    )
    assert call["result"]["result"] == "Done!"
    verified = cli("verify", "--json")
    assert verified.exit_code == 0, verified.stdout


def test_the_result_of_a_custom_tool_call_goes_back_in_its_own_item() -> None:
    result = ResultForModel(
        response_id="resp_1",
        call_id="call_patch",
        name="apply_patch",
        is_error=False,
        content={"ok": True, "result": "Done!"},
        provider_type="custom",
    )
    assert OpenAIResponsesAdapter().result_items([result]) == [
        {
            "type": "custom_tool_call_output",
            "call_id": "call_patch",
            "output": '{"ok":true,"result":"Done!"}',
        }
    ]


def answer(body: str, content_type: str = JSON) -> HttpResponse:
    return HttpResponse(200, {"content-type": content_type}, body.encode())


def test_a_custom_tool_call_is_a_call_whose_input_text_is_never_parsed_as_json() -> None:
    text = "not { json"
    turn = OpenAIResponsesAdapter().parse_response(
        answer(json.dumps(oa_response("resp_1", [custom_call(text)])))
    )
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS
    (call,) = turn.calls
    assert (call.call_id, call.name, call.item_id) == (
        "call_patch",
        "apply_patch",
        "ctc_call_patch",
    )
    assert call.raw_arguments == '{"input":"not { json"}'


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"input": {"patch": PATCH}}, "'input' is not a string"),
        ({"call_id": None}, "no string 'call_id'"),
        ({"name": ""}, "no string 'name'"),
    ],
)
def test_a_custom_tool_call_without_its_documented_fields_is_malformed(
    change: dict[str, Any], says: str
) -> None:
    item = {**custom_call(), **change}
    with pytest.raises(MalformedProviderPayload, match=says):
        OpenAIResponsesAdapter().parse_response(answer(json.dumps(oa_response("resp_1", [item]))))


@pytest.mark.parametrize("event", ["custom_tool_call_input.done", "output_item.done"])
def test_a_stream_whose_custom_input_contradicts_its_pieces_runs_nothing(event: str) -> None:
    """The input's done event (or the item's) states another text than the pieces streamed."""
    stream = oa_stream(oa_response("resp_1", [custom_call()]))
    lines = stream.split("\n")
    (at,) = [i for i, line in enumerate(lines) if f'"type":"response.{event}"' in line]
    lines[at] = lines[at].replace("*** Begin Patch", "*** Begin Forged")
    with pytest.raises(MalformedProviderPayload, match="contradicts itself"):
        OpenAIResponsesAdapter().parse_response(answer("\n".join(lines), SSE))


# -- in a registry --------------------------------------------------------------------------------

HANDLERS = """
import json
from pathlib import Path


def apply_patch(arguments, context):
    with Path(__file__).with_name("patches.jsonl").open("a") as ran:
        ran.write(json.dumps(arguments) + "\\n")
    return "Done!"
"""


def registry(tmp_path: Path, **provider_tool: Any) -> Path:
    (tmp_path / "patch_tools.py").write_text(HANDLERS)
    declared = {"provider": "openai", "type": "custom", "format": TOOL["format"], **provider_tool}
    doc = {
        "registry": "coder",
        "revision": "1",
        "policy": {"revision": "p1", "approvers": ["ops-lead"]},
        "tools": {
            "apply_patch": {
                "provider_tool": declared,
                "description": TOOL["description"],
                "schema_version": "patch-v1",
                "risk": "write",
                "approval": "never",
                "handler": "patch_tools:apply_patch",
            }
        },
    }
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_registry_custom_tool_is_declared_as_openai_declares_it(tmp_path: Path) -> None:
    (spec,) = load_registry(registry(tmp_path)).tool_specs()
    assert (spec.provider, spec.declaration, spec.provider_type) == ("openai", TOOL, "custom")
    assert spec.parameters == TEXT_INPUT
    body = OpenAIResponsesAdapter().build_request(
        [{"role": "user", "content": TASK}], [spec], ModelSettings(model="gpt-5")
    )
    assert body.body["tools"] == [TOOL]


def test_a_registry_custom_tool_gets_the_call_s_text_as_its_input(
    cli: Invoke, tmp_path: Path
) -> None:
    path = write(tmp_path, patch_loop(stream=False))
    result = cli("replay", str(path), "--registry", str(registry(tmp_path)), "--json")
    out = json_out(result)
    assert (result.exit_code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    ran = (tmp_path / "patches.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in ran] == [{"input": PATCH}]
    assert cli("verify").exit_code == 0


def test_a_custom_tool_names_no_execution(tmp_path: Path) -> None:
    problems = check_registry(registry(tmp_path, execution="client"))
    where = "tools.apply_patch.provider_tool.execution"
    assert any(p == where and "leave it out" in m for p, m in problems), problems


def test_a_custom_tool_stream_cut_at_any_event_runs_no_call_and_whole_gives_the_call() -> None:
    """The call exists only once the stream's terminal event came; a stream cut before it
    (at any event boundary) is truncated with no call."""
    body = oa_stream(oa_response("resp_1", [custom_call()]))
    events = [chunk + "\n\n" for chunk in body.split("\n\n") if chunk.strip()]
    adapter = OpenAIResponsesAdapter()
    for end in range(1, len(events)):
        turn = adapter.parse_response(answer("".join(events[:end]), SSE))
        assert (turn.outcome, turn.calls) == (TurnOutcome.TRUNCATED, ()), end
    whole = adapter.parse_response(answer(body, SSE))
    assert [(c.call_id, c.raw_arguments) for c in whole.calls] == [
        ("call_patch", json.dumps({"input": PATCH}, separators=(",", ":")))
    ]
