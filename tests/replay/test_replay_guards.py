"""The guards of a replay of another tool's recording (``replay/guards.py``): with recorded
results nothing runs, so toolloop's defaults must not end the recorded path early and report
their own limit as a divergence; with handlers running, the registry's defaults apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from recordings import (
    ANTHROPIC,
    OPENAI,
    an_message,
    an_result,
    an_text,
    an_use,
    exchange,
    oa_call,
    oa_output,
    oa_response,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out
from support.paths import REGISTRY

from toolloop_cli.engine.records import Guards
from toolloop_cli.replay.deps import Plan
from toolloop_cli.replay.guards import replay_guards
from toolloop_cli.replay.split import split_conversations
from toolloop_cli.tools.registry import load_registry
from toolloop_cli.transcripts import load_cassette
from toolloop_cli.wiring import build_guards

TOOLS = [
    {
        "name": "double",
        "description": "Twice x",
        "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}},
    }
]


def loop(tmp_path: Path, xs: list[float]) -> Path:
    """Another tool's Anthropic recording: one ``double`` call per turn, then a final text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Double these."}]
    interactions = []
    for k, x in enumerate([*xs, None]):
        body = {"model": "claude-3", "max_tokens": 300, "messages": list(messages), "tools": TOOLS}
        if x is None:
            answer = an_message(f"msg_{k}", [an_text("Done.")], "end_turn")
        else:
            use = an_use(f"toolu_{k}", "double", {"x": x})
            answer = an_message(f"msg_{k}", [use], "tool_use")
            messages += [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [an_result(f"toolu_{k}", str(2 * x))]},
            ]
        interactions.append(exchange(ANTHROPIC, body, answer))
    return write(tmp_path, interactions)


def test_a_recording_longer_than_the_default_turn_limit_replays_whole(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, loop(tmp_path, [float(k) for k in range(24)]))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert out["final_text"] == "Done."
    assert len(out["calls"]) == 24
    assert out["guards"]["max_turns"] == 25  # 24 tool turns and the final answer
    assert Guards().max_turns == 20


def test_a_call_the_recording_repeats_is_not_cut_short_as_no_progress(
    cli: Invoke, tmp_path: Path
) -> None:
    """The other tool let its model propose ``double(210.5)`` five times; nothing runs here."""
    code, out = replay(cli, loop(tmp_path, [210.5] * 5))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [c["state"] for c in out["calls"]] == ["SUCCEEDED"] * 5
    assert out["guards"]["no_progress_after"] == 6


def _plan(path: Path, mode: str, registry: Any = None) -> Plan:
    cassette = load_cassette(path)
    (conversation,) = split_conversations(cassette).conversations
    return Plan(cassette, conversation, {}, registry, mode)  # type: ignore[arg-type]


def test_with_handlers_running_the_registry_defaults_apply(tmp_path: Path) -> None:
    registry = load_registry(REGISTRY)
    path = loop(tmp_path, [210.5] * 5)
    assert replay_guards(_plan(path, "live", registry)) == build_guards(registry, {})
    widened = replay_guards(_plan(path, "recorded", registry))
    assert widened.no_progress_after == 6
    assert widened.max_turns == max(build_guards(registry, {}).max_turns, 6)


def test_a_toolloop_recording_keeps_its_own_guards(tmp_path: Path) -> None:
    path = loop(tmp_path, [1.0] * 5)
    cassette = load_cassette(path)
    (conversation,) = split_conversations(cassette).conversations
    own = {"guards": {"max_turns": 2, "no_progress_after": 2}}
    guards = replay_guards(Plan(cassette, conversation, own, None, "recorded"))
    assert (guards.max_turns, guards.no_progress_after) == (2, 2)


def test_argument_text_too_deep_to_read_is_counted_as_sent_not_parsed(
    cli: Invoke, tmp_path: Path
) -> None:
    """The recorded call's argument text nests 5,000 levels: the adapter refuses to read it
    (the call is INVALID, never run), and counting repeats for the guards takes the text as
    sent instead of parsing it again (a recursive parser raised RecursionError here)."""
    deep = "[" * 5000 + "]" * 5000
    call = {**oa_call("call_1", "double", {}), "arguments": deep}
    tools = [{"type": "function", "name": "double", "parameters": {"type": "object"}}]
    first = {"model": "gpt-4o", "input": [{"role": "user", "content": "Go."}], "tools": tools}
    second = {**first, "input": [*first["input"], call, oa_output("call_1", "4")]}
    path = write(
        tmp_path,
        [
            exchange(OPENAI, first, oa_response("resp_1", [call])),
            exchange(OPENAI, second, oa_response("resp_2", [oa_text("Done.")])),
        ],
    )
    code, out = replay(cli, path)
    assert code == 17 and out["state"] == "COMPLETED"  # a divergence, reported, not a crash
    (replayed,) = out["calls"]
    assert replayed["state"] == "INVALID"
    assert "nesting deeper than 64 levels" in replayed["result"]["error"]["message"]


def test_invalid_recorded_guards_are_refused_in_one_line_before_a_store_exists(
    cli: Invoke, tmp_path: Path
) -> None:
    path = loop(tmp_path, [1.0])
    document = yaml.safe_load(path.read_text())
    document["toolloop"] = {"guards": {"max_turns": -1}}
    path.write_text(yaml.safe_dump(document))
    store = tmp_path / "store.db"
    result = cli("replay", str(path), "--store", str(store), "--json")
    assert result.exit_code == 2
    assert json_out(result)["error"] == (
        "the recording's toolloop.guards are invalid: max_turns: Input should be greater than"
        " or equal to 1"
    )
    assert not store.exists()
