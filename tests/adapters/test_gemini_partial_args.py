"""Gemini function calls streamed in pieces (Vertex AI's ``streamFunctionCallArguments``).

Each chunk then carries a ``functionCall`` with ``partialArgs`` (values by JSON path) and
``willContinue``, and no ``args``. toolloop never asks for it and does not put the pieces
together, so such an answer is refused as malformed: before, each piece ran as a whole call
with empty arguments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.providers import parse

from toolloop_cli.engine.types import HttpResponse
from toolloop_cli.errors import MalformedProviderPayload

PIECES = [
    {
        "name": "get_alerts",
        "partialArgs": [{"jsonPath": "$.region", "stringValue": "Bre", "willContinue": True}],
        "willContinue": True,
    },
    {
        "name": "get_alerts",
        "partialArgs": [{"jsonPath": "$.region", "stringValue": "tagne"}],
        "willContinue": False,
    },
]


def chunk(call: dict[str, Any], last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {
        "content": {"role": "model", "parts": [{"functionCall": call}]},
        "index": 0,
    }
    if last:
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-pro", "responseId": "r1"}


def streamed(calls: list[dict[str, Any]]) -> HttpResponse:
    body = b"".join(
        f"data: {json.dumps(chunk(c, i == len(calls) - 1))}\r\n\r\n".encode()
        for i, c in enumerate(calls)
    )
    return HttpResponse(200, {"content-type": "text/event-stream"}, body=body)


@pytest.mark.parametrize(
    "calls",
    [
        PIECES,
        PIECES[-1:],
        [{"partialArgs": PIECES[0]["partialArgs"], "willContinue": True}, PIECES[1]],
    ],
    ids=["named pieces", "one piece", "name first"],
)
def test_a_call_streamed_in_pieces_is_refused_not_run_with_empty_arguments(
    calls: list[dict[str, Any]],
) -> None:
    with pytest.raises(MalformedProviderPayload, match="streams its arguments in pieces"):
        parse("gemini-generate", streamed(calls))


def test_a_whole_call_in_one_chunk_still_runs() -> None:
    turn = parse(
        "gemini-generate", streamed([{"name": "get_alerts", "args": {"region": "Bretagne"}}])
    )
    assert [(c.name, c.arguments) for c in turn.calls] == [("get_alerts", {"region": "Bretagne"})]
