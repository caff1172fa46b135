"""An error body under HTTP 200 (a proxy or gateway passing the provider's error on) is the
error it says, judged by its kind as an error event in a stream is: an overloaded provider is
retried; it was a malformed answer ("answer is not a message object"), never retried, and the
provider's error appeared nowhere."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.providers import parse

from toolloop_cli.engine.types import HttpResponse, TurnOutcome


def ok(body: dict[str, Any]) -> HttpResponse:
    return HttpResponse(200, {"content-type": "application/json"}, json.dumps(body).encode())


OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
    "request_id": "req_1",
}


@pytest.mark.parametrize(
    ("option", "body", "kind", "retryable"),
    [
        ("anthropic", OVERLOADED, "overloaded_error", True),
        (
            "anthropic",
            {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}},
            "invalid_request_error",
            False,
        ),
        ("openai", {"error": {"type": "server_error", "message": "bad"}}, "server_error", True),
        ("gemini-generate", {"error": {"code": 503, "status": "UNAVAILABLE"}}, "UNAVAILABLE", True),
        ("gemini", {"error": {"code": 404, "status": "NOT_FOUND"}}, "NOT_FOUND", False),
    ],
)  # fmt: skip
def test_an_error_body_under_200_is_that_error(
    option: str, body: dict[str, Any], kind: str, retryable: bool
) -> None:
    turn = parse(option, ok(body))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None
    assert (turn.error.type, turn.error.retryable) == (kind, retryable)
    assert not turn.calls
    assert "an error answer under HTTP 200" in (turn.detail or "")


def test_a_failed_openai_response_is_still_read_as_a_response() -> None:
    """A Responses answer with ``status: failed`` carries an ``error`` too, beside its id."""
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "failed",
        "error": {"code": "server_error", "message": "The model failed"},
        "output": [],
    }
    turn = parse("openai", ok(body))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.detail == "response failed: server_error"
