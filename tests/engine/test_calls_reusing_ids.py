"""A provider that gives every turn's calls the same ids: each call runs as its own call.

A call is (operation, response id, call id). Some providers and gateways name the calls of
every turn ``call_0``, ``call_1``…, so a later turn's ``call_0`` is another call than the
first turn's: it is validated, run, and answered with its own result, paired with it. What is
still refused: one response proposing the same id twice, and an answer that repeats an
earlier (response id, call id) pair (tests/security/test_engine_intents.py).

The real engine runs against the scripted model (or the generateContent adapter over a local
transport) and the guard registry's handlers, in a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.scripted import GUARDS, answer, call, final, handler_log, run_script

from toolloop_cli.engine.states import CallState, OpState
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.service import operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


def verified(store: Store) -> None:
    report = verify_store(store)
    assert report.ok, [m.line() for m in report.mismatches]


def sent_results(request: HttpRequest) -> list[tuple[str, Any]]:
    """(call id, result) of the scripted results a request carries, in order."""
    return [(i["call_id"], i["content"]) for i in request.body["input"] if i.get("role") == "tool"]


def echoed(n: int) -> dict[str, Any]:
    return {"ok": True, "result": {"echo": {"n": n}}}


def test_calls_reusing_an_earlier_turns_ids_each_run_and_send_their_own_results(
    store: Store,
) -> None:
    script = [
        answer("resp_a", call("echo", {"n": 1}, "call_0"), call("echo", {"n": 2}, "call_1")),
        answer("resp_b", call("echo", {"n": 3}, "call_0"), call("echo", {"n": 4}, "call_1")),
        final("done"),
    ]
    result, transport = run_script(store, script)
    assert result.target is OpState.COMPLETED, result.operation.reason
    op_id = result.operation.operation_id
    assert [
        (c.turn_idx, c.response_id, c.call_id, c.state, c.model_result) for c in store.calls(op_id)
    ] == [
        (0, "resp_a", "call_0", CallState.SUCCEEDED, echoed(1)),
        (0, "resp_a", "call_1", CallState.SUCCEEDED, echoed(2)),
        (1, "resp_b", "call_0", CallState.SUCCEEDED, echoed(3)),
        (1, "resp_b", "call_1", CallState.SUCCEEDED, echoed(4)),
    ]
    ran = sorted(e["arguments"]["n"] for e in handler_log(store))  # a turn's calls run at once
    assert ran == [1, 2, 3, 4]
    # each request carries the results of the turn before it, paired with that turn's calls
    assert sent_results(transport.requests[1]) == [("call_0", echoed(1)), ("call_1", echoed(2))]
    assert sent_results(transport.requests[2])[2:] == [
        ("call_0", echoed(3)),
        ("call_1", echoed(4)),
    ]
    moves = [(t["response_id"], t["call_id"], t["target"]) for t in store.transitions(op_id)]
    for response_id in ("resp_a", "resp_b"):
        for call_id in ("call_0", "call_1"):
            mine = [target for r, c, target in moves if (r, c) == (response_id, call_id)]
            assert mine == ["APPROVED", "EXECUTING", "SUCCEEDED"], (response_id, call_id)
    verified(store)


def test_a_read_repeated_in_a_later_turn_under_the_same_id_is_answered_as_a_repeat(
    store: Store,
) -> None:
    """The same tool and arguments again is a repeat, whatever its id: not run twice."""
    script = [
        answer("resp_a", call("echo", {"n": 1}, "call_0")),
        answer("resp_b", call("echo", {"n": 1}, "call_0")),
        final("done"),
    ]
    result, transport = run_script(store, script)
    assert result.target is OpState.COMPLETED, result.operation.reason
    first, again = store.calls(result.operation.operation_id)
    assert (first.state, again.state) == (CallState.SUCCEEDED, CallState.DUPLICATE)
    assert again.model_result == {**echoed(1), "repeat_of": "call_0"}
    assert len(handler_log(store)) == 1
    assert sent_results(transport.requests[2])[-1] == ("call_0", again.model_result)
    verified(store)


def test_one_response_proposing_the_same_call_id_twice_still_fails_the_operation(
    store: Store,
) -> None:
    script = [answer("resp_a", call("echo", {"n": 1}, "call_0"), call("echo", {"n": 2}, "call_0"))]
    result, _ = run_script(store, script)
    assert result.target is OpState.FAILED
    assert "the response proposes call id 'call_0' twice" in (result.operation.reason or "")
    assert store.calls(result.operation.operation_id) == []
    assert handler_log(store) == []
    verified(store)


class GeminiAnswers:
    """Answers generateContent requests from a list of bodies (no network)."""

    name = "test"

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        body = json.dumps(self.bodies[len(self.requests) - 1]).encode()
        return HttpResponse(status=200, headers={"content-type": "application/json"}, body=body)


def gemini(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """An answer without ``responseId``: the engine names its response ``turn-<index>``."""
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
    }


def test_gemini_ids_reused_in_answers_without_a_response_id_are_two_calls(store: Store) -> None:
    """Both answers call ``call_0`` and have no response id: ``turn-0`` and ``turn-1``."""
    transport = GeminiAnswers(
        [
            gemini([{"functionCall": {"id": "call_0", "name": "echo", "args": {"n": 1}}}]),
            gemini([{"functionCall": {"id": "call_0", "name": "echo", "args": {"n": 2}}}]),
            gemini([{"text": "done"}]),
        ]
    )
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="gemini-generate", model="gemini-2.5-flash"
    )
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.COMPLETED, result.operation.reason
    assert [
        (c.response_id, c.call_id, c.state, c.model_result)
        for c in store.calls(result.operation.operation_id)
    ] == [
        ("turn-0", "call_0", CallState.SUCCEEDED, echoed(1)),
        ("turn-1", "call_0", CallState.SUCCEEDED, echoed(2)),
    ]
    last = transport.requests[2].body["contents"]
    replies = [p["functionResponse"] for c in last for p in c["parts"] if "functionResponse" in p]
    assert [(r["id"], r["response"]) for r in replies] == [
        ("call_0", echoed(1)),
        ("call_0", echoed(2)),
    ]
    verified(store)
