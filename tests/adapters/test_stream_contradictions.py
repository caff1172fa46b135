"""OpenAI Responses streams are read from their pieces: a self-contradicting stream runs nothing.

The argument deltas, settled by the call's done events, are what a call runs with; the final
``response.completed`` snapshot may leave things out but never restate a call differently.
Every case mutates a copy of the bundled recorded stream (the recording itself is untouched).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke
from support.providers import adapter_for, answers, assert_nothing_ran, run_fixture, transcript

from toolloop_cli.adapters._stream import SSEParser
from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import HttpResponse, ModelTurn, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload
from toolloop_cli.transcripts import load_cassette
from toolloop_cli.transcripts.cassette import dump_cassette

Events = list[dict[str, Any]]
Mutation = Callable[[Events], Events]

STREAM = transcript("openai", stream=True)
PLAIN = transcript("openai")
#: the recorded turns that propose a call: get_order, create_refund_draft, submit_refund
CALL_TURNS = [0, 1, 2]
CONTRADICTION = "contradicts itself|out of order|which is not open"


def recorded_events(turn: int) -> Events:
    """The events of one recorded streamed turn, in order."""
    parser = SSEParser("test")
    framed = parser.feed(answers(STREAM)[turn].body)
    assert parser.finish() is None
    return [json.loads(event.data) for event in framed]


def sse(events: Events) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def parse_events(events: Events, trailer: bytes = b"") -> ModelTurn:
    response = HttpResponse(200, {"content-type": "text/event-stream"}, body=sse(events) + trailer)
    return adapter_for("openai").parse_response(response)


def plain_turn(turn: int) -> ModelTurn:
    return adapter_for("openai").parse_response(answers(PLAIN)[turn])


def canonical_calls(turn: ModelTurn) -> list[tuple[str, str, bytes]]:
    """Each call's id, name and arguments in canonical form (the bytes that get hashed)."""
    return [
        (call.call_id, call.name, canonical_bytes(json.loads(call.raw_arguments)))
        for call in turn.calls
    ]


# -- finding the parts of a turn's call ---------------------------------------------------------


def positions(events: Events, kind: str) -> list[int]:
    return [i for i, event in enumerate(events) if event["type"] == kind]


def call_index(events: Events) -> int:
    """The output_index of the turn's function call."""
    (added,) = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    index: int = added["output_index"]
    return index


def snapshot_call(events: Events) -> dict[str, Any]:
    """The function call item inside the final ``response.completed`` snapshot."""
    (completed,) = [e for e in events if e["type"] == "response.completed"]
    item: dict[str, Any] = completed["response"]["output"][call_index(events)]
    assert item["type"] == "function_call"
    return item


def other(arguments: str) -> str:
    """Valid arguments that say something else."""
    changed = arguments.replace("ord_1001", "ord_2002")
    assert changed != arguments
    return changed


# -- mutations: each one makes the stream contradict itself ------------------------------------


def snapshot_arguments_changed(events: Events) -> Events:
    item = snapshot_call(events)
    item["arguments"] = other(item["arguments"])
    return events


def snapshot_call_id_changed(events: Events) -> Events:
    snapshot_call(events)["call_id"] = "call_someone_else"
    return events


def snapshot_name_changed(events: Events) -> Events:
    snapshot_call(events)["name"] = "submit_refund_now"
    return events


def delta_dropped(events: Events) -> Events:
    deltas = positions(events, "response.function_call_arguments.delta")
    del events[deltas[1]]
    return events


def delta_duplicated(events: Events) -> Events:
    deltas = positions(events, "response.function_call_arguments.delta")
    events.insert(deltas[1], copy.deepcopy(events[deltas[1]]))
    return events


def order_reversed(events: Events) -> Events:
    return events[::-1]


def done_text_differs(events: Events) -> Events:
    (done,) = positions(events, "response.function_call_arguments.done")
    events[done]["arguments"] = other(events[done]["arguments"])
    return events


def item_done_text_differs(events: Events) -> Events:
    index = call_index(events)
    for i in positions(events, "response.output_item.done"):
        if events[i]["output_index"] == index:
            events[i]["item"]["arguments"] = other(events[i]["item"]["arguments"])
    return events


def item_done_call_id_changed(events: Events) -> Events:
    index = call_index(events)
    for i in positions(events, "response.output_item.done"):
        if events[i]["output_index"] == index:
            events[i]["item"]["call_id"] = "call_someone_else"
    return events


def delta_after_done(events: Events) -> Events:
    last = positions(events, "response.function_call_arguments.delta")[-1]
    (done,) = positions(events, "response.function_call_arguments.done")
    events.insert(done, events.pop(last))
    return events


def done_events_dropped(events: Events) -> Events:
    """Neither done event for the call: only the snapshot says the call is whole."""
    index = call_index(events)
    return [
        e
        for e in events
        if not (
            e["type"] in ("response.function_call_arguments.done", "response.output_item.done")
            and e["output_index"] == index
        )
    ]


def ended_incomplete(events: Events) -> Events:
    """The terminal event says the answer was cut short; its response says completed (the
    call ran: the event was not read)."""
    for event in events:
        if event["type"] == "response.completed":
            event["type"] = "response.incomplete"
    return events


def ended_failed(events: Events) -> Events:
    for event in events:
        if event["type"] == "response.completed":
            event["type"] = "response.failed"
    return events


MUTATIONS: list[Mutation] = [
    ended_incomplete,
    ended_failed,
    snapshot_arguments_changed,
    snapshot_call_id_changed,
    snapshot_name_changed,
    delta_dropped,
    delta_duplicated,
    order_reversed,
    done_text_differs,
    item_done_text_differs,
    item_done_call_id_changed,
    delta_after_done,
]


def mutated(turn: int, mutation: Mutation) -> Events:
    original = recorded_events(turn)
    changed = mutation(copy.deepcopy(original))
    assert changed != original
    return changed


# -- the unmodified stream ----------------------------------------------------------------------


@pytest.mark.parametrize("turn", CALL_TURNS)
def test_each_streamed_call_runs_with_the_arguments_of_the_json_answer(turn: int) -> None:
    streamed = parse_events(recorded_events(turn))
    assert streamed.outcome is TurnOutcome.TOOL_PROPOSALS
    assert canonical_calls(streamed) == canonical_calls(plain_turn(turn))


# -- contradictions -----------------------------------------------------------------------------


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("turn", CALL_TURNS)
def test_a_stream_that_contradicts_itself_is_a_malformed_payload(
    turn: int, mutation: Mutation
) -> None:
    with pytest.raises(MalformedProviderPayload, match=CONTRADICTION):
        parse_events(mutated(turn, mutation))


def test_the_final_snapshot_cannot_change_the_amount_the_pieces_streamed() -> None:
    events = recorded_events(1)
    item = snapshot_call(events)
    item["arguments"] = item["arguments"].replace("4999", "1")
    with pytest.raises(MalformedProviderPayload, match="other arguments than the streamed"):
        parse_events(events)


def write_stream(tmp_path: Path, turn: int, events: Events) -> Path:
    """A copy of the recorded stream transcript whose ``turn`` answers with ``events``."""
    cassette = load_cassette(STREAM)
    interactions = list(cassette.interactions)
    recorded = interactions[turn]
    interactions[turn] = replace(recorded, response=replace(recorded.response, body=sse(events)))
    path = tmp_path / "contradicting.yaml"
    dump_cassette(interactions, path)
    return path


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_a_run_whose_stream_contradicts_itself_fails_and_runs_nothing(
    cli: Invoke, store_path: Path, tmp_path: Path, mutation: Mutation
) -> None:
    path = write_stream(tmp_path, 0, mutated(0, mutation))
    _, view = run_fixture(cli, path, "--stream")
    assert view["state"] == "FAILED"
    assert view["turns"][0]["error"]["type"] == "malformed_payload"
    assert_nothing_ran(view, store_path)


def test_a_run_whose_snapshot_changes_the_refund_amount_fails_before_the_refund(
    cli: Invoke, tmp_path: Path
) -> None:
    events = recorded_events(1)
    item = snapshot_call(events)
    item["arguments"] = item["arguments"].replace("4999", "1")
    _, view = run_fixture(cli, write_stream(tmp_path, 1, events), "--stream")
    assert view["state"] == "FAILED"
    assert view["turns"][1]["error"]["type"] == "malformed_payload"
    assert [(c["name"], c["state"]) for c in view["calls"]] == [("get_order", "SUCCEEDED")]


# -- what is not a contradiction ----------------------------------------------------------------


def output_emptied(events: Events) -> Events:
    for event in events:
        if event["type"] == "response.completed":
            event["response"]["output"] = []
    return events


def snapshot_arguments_left_out(events: Events) -> Events:
    del snapshot_call(events)["arguments"]
    return events


def snapshot_arguments_null(events: Events) -> Events:
    snapshot_call(events)["arguments"] = None
    return events


def snapshot_item_ids_fresh(events: Events) -> Events:
    """As OpenRouter does: the final response names its items with new ids."""
    for event in events:
        if event["type"] == "response.completed":
            for n, item in enumerate(event["response"]["output"]):
                item["id"] = f"tmp_{n}"
    return events


OMISSIONS: list[Mutation] = [
    output_emptied,
    snapshot_arguments_left_out,
    snapshot_arguments_null,
    snapshot_item_ids_fresh,
    done_events_dropped,
]


@pytest.mark.parametrize("mutation", OMISSIONS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("turn", CALL_TURNS)
def test_what_a_statement_leaves_out_is_filled_from_the_streamed_pieces(
    turn: int, mutation: Mutation
) -> None:
    streamed = parse_events(mutated(turn, mutation))
    assert streamed.outcome is TurnOutcome.TOOL_PROPOSALS
    assert canonical_calls(streamed) == canonical_calls(plain_turn(turn))


def test_done_after_the_terminal_event_is_not_out_of_order() -> None:
    streamed = parse_events(recorded_events(1), trailer=b"data: [DONE]\n\n")
    assert canonical_calls(streamed) == canonical_calls(plain_turn(1))


def test_a_snapshot_may_finish_an_open_call_only_by_continuing_its_pieces() -> None:
    events = done_events_dropped(recorded_events(1))
    item = snapshot_call(events)
    item["arguments"] = item["arguments"].replace("4999", "1")
    with pytest.raises(MalformedProviderPayload, match="drop streamed pieces"):
        parse_events(events)


def test_a_call_that_nobody_finished_cuts_the_completed_turn() -> None:
    events = output_emptied(done_events_dropped(recorded_events(1)))
    streamed = parse_events(events)
    assert (streamed.outcome, streamed.finish_reason, streamed.calls) == (
        TurnOutcome.TRUNCATED,
        "stream_incomplete",
        (),
    )
    assert "call_W1jLA3iFUnNcFrMRo5Yy0bk3 (create_refund_draft)" in (streamed.detail or "")


def tool_search_stream(final_arguments: dict[str, Any]) -> Events:
    """A client tool search: added empty, done whole (as recorded), then the final response."""
    item = {
        "type": "tool_search_call",
        "id": "tsc_1",
        "call_id": "call_search",
        "execution": "client",
        "status": "completed",
        "arguments": {"queries": ["refund policy"]},
    }
    opened = {**item, "status": "in_progress", "arguments": {}}
    final = {**item, "arguments": final_arguments}
    response = {"id": "resp_1", "object": "response", "status": "completed", "output": [final]}
    return [
        {"type": "response.created", "response": {**response, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": opened},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]


def test_a_client_tool_search_runs_with_the_arguments_its_done_item_gave() -> None:
    (call,) = parse_events(tool_search_stream({"queries": ["refund policy"]})).calls
    assert (call.name, json.loads(call.raw_arguments)) == (
        "tool_search",
        {"queries": ["refund policy"]},
    )
    with pytest.raises(MalformedProviderPayload, match="other arguments than the stream"):
        parse_events(tool_search_stream({"queries": ["wire money"]}))
