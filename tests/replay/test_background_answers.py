"""Background answers: a request answered ``queued``, then polled until it ends.

OpenAI Responses (``"background": true``) and Gemini Interactions (``"background": true``)
answer the POST at once, ``queued`` or ``in_progress``; the client then polls ``GET
…/responses/{id}`` or ``GET …/interactions/{id}`` until the answer ends. A replay folds
each poll into the interaction it polls: the last one is the answer. When the recording's
last poll still says ``queued`` or ``in_progress`` (its client stopped polling), the run has
no answer to act on yet, which is no error: it ends INCOMPLETE (12), not FAILED (13); a
``cancelled`` answer is FAILED.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recordings import (
    INTERACTIONS,
    OPENAI,
    calls,
    exchange,
    gi_answer,
    oa_response,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke

TASK = "What is the weather in Paris?"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RESPONSE_ID = "resp_06a562f31ab7703300698b9df109c481979ebf760b2ff5fc75"
INTERACTION_ID = "v1_ChdGUVFJaWFqdEhZU1BwdElQX3RuUndBYxIXRlFRSWlhanRIWVNQcHRJUF90blJ3QWM"


def openai_background(status: str, polls: list[str]) -> list[dict[str, Any]]:
    """A POST answered ``status``, then one GET poll per entry of ``polls`` (its status)."""
    body = {
        "background": True,
        "input": [{"content": TASK, "role": "user"}],
        "model": "gpt-4o",
        "stream": False,
    }
    answer: dict[str, Any] = {
        "background": True,
        "completed_at": None,
        "error": None,
        "id": RESPONSE_ID,
        "incomplete_details": None,
        "model": "gpt-4o-2024-08-06",
        "object": "response",
        "output": [],
        "status": status,
        "store": False,
        "usage": None,
    }
    poll = f"{OPENAI}/{RESPONSE_ID}?stream=false"
    return [
        exchange(OPENAI, body, answer),
        *(exchange(poll, None, {**answer, "status": s}, method="GET") for s in polls),
    ]


def test_an_openai_background_answer_whose_last_poll_is_unfinished_is_incomplete(
    cli: Invoke, tmp_path: Path
) -> None:
    path = write(tmp_path, openai_background("queued", ["queued", "in_progress"]))
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (12, "INCOMPLETE", [])
    assert out["operations"][0]["interactions"] == [0, 1, 2]
    assert out["reason"].startswith("response is in_progress: a background answer with no end")
    assert out["turns"][0]["finish_reason"] == "in_progress"


def test_an_openai_background_answer_queued_and_never_polled_is_incomplete(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, write(tmp_path, openai_background("queued", [])))
    assert (code, out["state"]) == (12, "INCOMPLETE")
    assert "response is queued" in out["reason"]


def test_an_openai_background_answer_cancelled_is_failed(cli: Invoke, tmp_path: Path) -> None:
    code, out = replay(cli, write(tmp_path, openai_background("queued", ["cancelled"])))
    assert (code, out["state"]) == (13, "FAILED")


TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER}
]
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "name": "get_weather",
    "arguments": {"city": "Paris"},
}
SAID: list[dict[str, Any]] = [
    {"type": "model_output", "content": [{"type": "text", "text": "21 °C in Paris."}]}
]


def gemini_background(first: list[str], second: list[str]) -> list[dict[str, Any]]:
    """Two background interactions (the call, then the answer to its result), each answered
    ``in_progress`` and then polled: ``first`` and ``second`` are the statuses of the polls."""
    ask: dict[str, Any] = {
        "model": "gemini-3-flash-preview",
        "input": [{"type": "user_input", "content": [{"type": "text", "text": TASK}]}],
        "tools": TOOLS,
        "background": True,
    }
    result = {"type": "function_result", "call_id": "fc_1", "name": "get_weather", "result": 21}
    then = {**ask, "previous_interaction_id": INTERACTION_ID, "input": [result]}
    interactions: list[dict[str, Any]] = []
    for body, interaction_id, statuses in (
        (ask, INTERACTION_ID, first),
        (then, INTERACTION_ID + "2", second),
    ):
        interactions.append(exchange(INTERACTIONS, body, gi_answer(interaction_id, [], "queued")))
        for status in statuses:
            ending: dict[str, list[dict[str, Any]]] = {"requires_action": [CALL], "completed": SAID}
            steps = ending.get(status, [])
            polled = gi_answer(interaction_id, steps, status)
            uri = f"{INTERACTIONS}/{interaction_id}"
            interactions.append(exchange(uri, None, polled, method="GET"))
    return interactions


def test_gemini_interaction_polls_are_folded_into_the_interaction_they_poll(
    cli: Invoke, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        gemini_background(["in_progress", "requires_action"], ["in_progress", "completed"]),
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"], out["skipped"]) == (0, "COMPLETED", [], [])
    assert [op["interactions"] for op in out["operations"]] == [[0, 1, 2, 3, 4, 5]]
    assert calls(out) == [("get_weather", "SUCCEEDED", 21)]
    assert out["final_text"] == "21 °C in Paris."


@pytest.mark.parametrize(
    ("last", "state", "code"),
    [("in_progress", "INCOMPLETE", 12), ("queued", "INCOMPLETE", 12), ("cancelled", "FAILED", 13)],
)
def test_a_gemini_background_interaction_not_finished_is_incomplete_and_cancelled_failed(
    cli: Invoke, tmp_path: Path, last: str, state: str, code: int
) -> None:
    path = write(tmp_path, gemini_background(["in_progress", "requires_action"], [last]))
    exit_code, out = replay(cli, path)
    assert (exit_code, out["state"], out["divergences"]) == (code, state, [])
    assert [op["interactions"] for op in out["operations"]] == [[0, 1, 2, 3, 4]]
    if state == "INCOMPLETE":
        assert out["reason"].startswith(f"the interaction is {last}: a background answer")


def test_reading_back_an_answer_that_has_ended_is_no_poll_of_it(
    cli: Invoke, tmp_path: Path
) -> None:
    """openai-dotnet's storage tests: a completed answer, then ``GET /responses/ID`` (200,
    then 404 once deleted). The GETs were folded in as polls, and the 404 turned the
    completed run FAILED (exit 13); they are skipped, saying why."""
    body = {"input": [{"content": TASK, "role": "user"}], "model": "gpt-4o", "store": True}
    answer = oa_response(RESPONSE_ID, [oa_text("Sunny, 21 C.")])
    stored = f"{OPENAI}/{RESPONSE_ID}"
    deleted = {"id": RESPONSE_ID, "object": "response.deleted", "deleted": True}
    gone = {
        "error": {
            "message": f"Response with id '{RESPONSE_ID}' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    path = write(
        tmp_path,
        [
            exchange(OPENAI, body, answer),
            exchange(stored, None, answer, method="GET"),
            exchange(stored, None, deleted, method="DELETE"),
            exchange(stored, None, gone, status=404, method="GET"),
        ],
    )  # fmt: skip
    code, out = replay(cli, path)
    assert (code, out["state"], out["final_text"]) == (0, "COMPLETED", "Sunny, 21 C.")
    assert out["operations"][0]["interactions"] == [0]
    assert [(s["index"], s["method"]) for s in out["skipped"]] == [
        (1, "GET"),
        (2, "DELETE"),
        (3, "GET"),
    ]
    assert out["skipped"][2]["reason"] == (
        "a GET of a stored answer, neither a model request (a POST) nor a poll of a background"
        " answer still running"
    )
