"""Recordings whose provider gives every turn's calls the same ids replay as recorded.

Some providers (and clients talking to them) number the calls of each answer ``call_0``,
``call_1``…, so turn 1's ``call_0`` is another call than turn 0's. A call is (response id,
call id), and each turn's results are paired with the calls of that turn: ``replay --results
recorded`` ends COMPLETED, exit 0, with every call answered by its own recorded result, and
the store it leaves verifies. The cassettes are built in each provider's wire format, as a
client records them (JSON answers and event streams), like tests/replay/test_other_recordings.

A toolloop recording of such a run (``--record``) carries each approval with its turn, so a
decision recorded for one turn's ``call_0`` is replayed onto that call only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from recordings import (
    JSON,
    OPENAI,
    SSE,
    calls,
    exchange,
    generate_uri,
    gg_call,
    gg_chunks,
    gg_response,
    gg_stream,
    oa_call,
    oa_output,
    oa_response,
    oa_stream,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out
from support.paths import BRANCHES, REGISTRY

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TASK = "Weather and local time in Paris and in Rome?"
WEATHER = {"Paris": {"city": "Paris", "temp_c": 21}, "Rome": {"city": "Rome", "temp_c": 25}}
TIME = {"Paris": {"city": "Paris", "time": "14:05"}, "Rome": {"city": "Rome", "time": "14:05"}}
#: (call id, tool, city) of every call, per turn: both turns name them call_0 and call_1
TURNS = [
    [("call_0", "get_weather", "Paris"), ("call_1", "get_weather", "Rome")],
    [("call_0", "get_time", "Paris"), ("call_1", "get_time", "Rome")],
]
RESULTS: dict[str, dict[str, dict[str, Any]]] = {"get_weather": WEATHER, "get_time": TIME}
EXPECTED = [(name, "SUCCEEDED", RESULTS[name][city]) for turn in TURNS for _, name, city in turn]
FINAL = "21 °C in Paris, 25 °C in Rome; 14:05 in both."


def openai_loop(stream: bool) -> list[dict[str, Any]]:
    """OpenAI Responses, stateless: every request carries the whole conversation."""
    tools = [
        {"type": "function", "name": name, "description": "", "parameters": CITY, "strict": True}
        for name in ("get_weather", "get_time")
    ]
    items: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": TASK}]}
    ]
    answers = []
    bodies = []
    for index, turn in enumerate(TURNS):
        made = [
            oa_call(call_id, name, {"city": city}, item_id=f"fc_{index}_{n}")
            for n, (call_id, name, city) in enumerate(turn)
        ]
        bodies.append(list(items))
        answers.append(oa_response(f"resp_{index}", made))
        items += made
        items += [oa_output(call_id, RESULTS[name][city]) for call_id, name, city in turn]
    bodies.append(list(items))
    answers.append(oa_response("resp_final", [oa_text(FINAL)]))
    return [
        exchange(
            OPENAI,
            {"model": "gpt-4.1", "input": body, "tools": tools, "stream": stream},
            oa_stream(answer) if stream else answer,
            content_type=SSE if stream else JSON,
        )
        for body, answer in zip(bodies, answers, strict=True)
    ]


def generate_loop(ids: str, stream: str | None) -> list[dict[str, Any]]:
    """Gemini generateContent. ``ids``: ``model`` (the answers carry ``call_0``… every turn),
    ``model-no-response-id`` (the same, answers without ``responseId``) or ``client`` (the
    answers carry none; the client invents ``call_0``… every turn and answers under them).
    ``stream``: None, ``sse`` or ``json`` (a JSON array of chunks)."""
    tools = [
        {
            "functionDeclarations": [
                {"name": name, "description": "", "parametersJsonSchema": CITY}
                for name in ("get_weather", "get_time")
            ]
        }
    ]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": TASK}]}]
    bodies, answers = [], []
    for index, turn in enumerate(TURNS):
        given = None if ids == "client" else "id"
        parts = [
            gg_call(name, {"city": city}, call_id if given else None)
            for call_id, name, city in turn
        ]
        answer = gg_response(f"r{index}", parts)
        if ids == "model-no-response-id":
            del answer["responseId"]
        bodies.append(list(contents))
        answers.append(answer)
        echoed = [gg_call(name, {"city": city}, call_id) for call_id, name, city in turn]
        replies = [
            {"functionResponse": {"id": call_id, "name": name, "response": RESULTS[name][city]}}
            for call_id, name, city in turn
        ]
        contents += [{"role": "model", "parts": echoed}, {"role": "user", "parts": replies}]
    bodies.append(list(contents))
    final = gg_response("r_final", [{"text": FINAL}])
    if ids == "model-no-response-id":
        del final["responseId"]
    answers.append(final)

    def body_of(answer: dict[str, Any]) -> str | dict[str, Any]:
        if stream == "sse":
            return gg_stream(answer)
        if stream == "json":
            return "[" + ",\r\n".join(json.dumps(c) for c in gg_chunks(answer)) + "]"
        return answer

    return [
        exchange(
            generate_uri(stream=stream),
            {"contents": body, "tools": tools},
            body_of(answer),
            content_type="text/event-stream" if stream == "sse" else JSON,
        )
        for body, answer in zip(bodies, answers, strict=True)
    ]


LOOPS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "openai-json": lambda: openai_loop(False),
    "openai-stream": lambda: openai_loop(True),
    **{
        f"generate-{ids}-{stream or 'json-answer'}": functools.partial(generate_loop, ids, stream)
        for ids in ("model", "model-no-response-id", "client")
        for stream in (None, "sse", "json")
    },
}


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_ids_reused_in_every_turn_replay_with_each_turns_own_results(
    cli: Invoke, tmp_path: Path, loop: str
) -> None:
    code, out = replay(cli, write(tmp_path, LOOPS[loop]()))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == EXPECTED
    assert out["final_text"] == FINAL
    named = [(c["turn"], c["response_id"], c["call_id"]) for c in out["calls"]]
    assert len(set(named)) == 4  # four calls, none mistaken for another
    if not loop.startswith("generate-client"):  # the provider's own ids, reused
        assert [c["call_id"] for c in out["calls"]] == ["call_0", "call_1"] * 2
        assert len({(r, c) for _, r, c in named}) == 4
    verified = cli("verify", "--json")
    assert verified.exit_code == 0, verified.output


# -- toolloop's own recording of such a run, with an approval in each turn ----------------------


def submit_answers() -> list[dict[str, Any]]:
    """Drafts, then one submit per turn, each named call_0: approved in turn 1, denied in 2."""
    drafts = [
        oa_call("call_0", "create_refund_draft", {"order_id": "ord_1001", "amount_cents": 4999}),
        oa_call("call_1", "create_refund_draft", {"order_id": "ord_1002", "amount_cents": 1250}),
    ]
    return [
        oa_response("resp_t0", drafts),
        oa_response(
            "resp_t1",
            [oa_call("call_0", "submit_refund", {"order_id": "ord_1001", "amount_cents": 4999})],
        ),
        oa_response(
            "resp_t2",
            [oa_call("call_0", "submit_refund", {"order_id": "ord_1002", "amount_cents": 1250})],
        ),
        oa_response("resp_t3", [oa_text("One refund submitted, the other was denied.")]),
    ]


def recorded_run(cli: Invoke, tmp_path: Path) -> Path:
    answers = write(tmp_path, [exchange(OPENAI, None, a) for a in submit_answers()], "in.yaml")
    cassette = tmp_path / "recorded.yaml"
    run = ["--registry", str(REGISTRY), "--transcript", str(answers)]
    first = cli("run", "refund two orders", *run, "--record", str(cassette), "--json")
    assert first.exit_code == 10, first.output
    (turn1,) = [a for a in json_out(first)["approvals"] if a["status"] == "PENDING"]
    assert cli("approve", turn1["approval_id"], "--as", "ops-lead", "--resume").exit_code == 10
    pending = json_out(cli("pending", "--json"))["pending"]
    (turn2,) = pending
    assert (turn2["response_id"], turn2["call_id"]) == ("resp_t2", "call_0")
    denied = cli("approve", turn2["approval_id"], "--as", "finance", "--deny", "--resume")
    assert denied.exit_code == 0, denied.output
    return cassette


def test_a_recording_with_an_approval_per_turn_under_one_call_id_replays_each_decision(
    cli: Invoke, tmp_path: Path
) -> None:
    cassette = recorded_run(cli, tmp_path)
    meta = yaml.safe_load(cassette.read_text())["toolloop"]
    assert [
        (a["turn"], a["response_id"], a["call_id"], a["status"]) for a in meta["approvals"]
    ] == [
        (1, "resp_t1", "call_0", "APPROVED"),
        (2, "resp_t2", "call_0", "DENIED"),
    ]
    code, out = replay(cli, cassette)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [(c["turn"], c["call_id"], c["name"], c["state"]) for c in out["calls"]] == [
        (0, "call_0", "create_refund_draft", "SUCCEEDED"),
        (0, "call_1", "create_refund_draft", "SUCCEEDED"),
        (1, "call_0", "submit_refund", "SUCCEEDED"),
        (2, "call_0", "submit_refund", "DENIED"),
    ]
    assert [(a["response_id"], a["status"], a["decided_by"]) for a in out["approvals"]] == [
        ("resp_t1", "APPROVED", "ops-lead"),
        ("resp_t2", "DENIED", "finance"),
    ]
    assert cli("verify").exit_code == 0


@pytest.mark.parametrize("branch", ["happy_path", "approval_expired"])
def test_a_recording_whose_approvals_name_no_turn_replays_as_before(
    cli: Invoke, tmp_path: Path, branch: str
) -> None:
    """Recordings made before approvals named their call's turn: each approval belongs to the
    first call with its id (toolloop then answered a reused id INVALID), and replays so."""
    document = yaml.safe_load((BRANCHES / "openai" / f"{branch}.yaml").read_text())
    meta = document["toolloop"]
    assert meta["approvals"]
    for entry in meta["approvals"]:
        del entry["turn"], entry["response_id"]
    for entry in meta["calls"]:
        del entry["response_id"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    code, out = replay(cli, old, "--strict-requests")
    assert (code, out["divergences"], out["state"]) == (0, [], meta["state"])
    assert [(a["status"], a["decided_by"]) for a in out["approvals"]] == [
        (a["status"], a["decided_by"]) for a in meta["approvals"]
    ]


def shifted(path: Path, after: int, by: int, folder: Path) -> Path:
    """The recording as if ``by`` requests after turn ``after`` had got no answer: such a
    request is a turn of the run (the metadata counts it) but not an interaction."""
    document = yaml.safe_load(path.read_text())
    for entry in (*document["toolloop"]["calls"], *document["toolloop"]["approvals"]):
        if entry["turn"] > after:
            entry["turn"] += by
    out = folder / f"shifted-{path.name}"
    out.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return out


@pytest.mark.parametrize("branch", ["happy_path", "submit_timeout_reconciled"])
def test_recorded_turns_that_got_no_answer_do_not_move_an_entry_off_its_call(
    cli: Invoke, tmp_path: Path, branch: str
) -> None:
    """Each recorded turn is placed at the answer that proposed its calls."""
    code, out = replay(cli, shifted(BRANCHES / "openai" / f"{branch}.yaml", 0, 2, tmp_path))
    assert (code, out["divergences"], out["state"]) == (0, [], "COMPLETED")
    assert [a["decided_by"] for a in out["approvals"]] == ["ops-lead"]


def test_reused_ids_after_turns_that_got_no_answer_keep_each_turns_decision(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, shifted(recorded_run(cli, tmp_path), 1, 1, tmp_path))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [c["state"] for c in out["calls"]][2:] == ["SUCCEEDED", "DENIED"]
