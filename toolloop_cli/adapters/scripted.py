"""A scripted model: the real ``ModelAdapter`` and ``Transport`` contracts, no provider.

For tests, demos and benchmarks. Each scripted answer is a small JSON object:

    {"calls": [{"name": "get_order", "arguments": {"order_id": "ord_1"}}]}   # tool proposals
    {"text": "done"}                                                         # final text
    {"refusal": "no"} | {"truncated": "max_tokens"} | {"error": 500}        # the other outcomes

``arguments`` may be a string, sent as the raw argument text (to script invalid JSON or
odd whitespace). Call ids are ``call_<turn>_<n>`` unless given; usage may be scripted too.
A script entry may also be a function of the request, to answer from what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from toolloop_cli.engine.types import (
    ApiError,
    HttpRequest,
    HttpResponse,
    JSONObject,
    ModelSettings,
    ModelTurn,
    ProposedCall,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import MalformedProviderPayload, TranscriptError

from ._answer import usage_from

Answer = JSONObject | Callable[[HttpRequest], JSONObject]


class ScriptedAdapter:
    """Speaks the scripted answer format above."""

    provider = "scripted"
    api_family = "scripted"
    revision = "scripted/1"

    def __init__(self, base_url: str | None = None) -> None:
        self.base_url = base_url or "scripted://model"

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]:
        return [{"role": "user", "content": task}]

    def build_request(
        self, conversation: Sequence[JSONObject], tools: Sequence[ToolSpec], settings: ModelSettings
    ) -> HttpRequest:
        return HttpRequest(
            url=self.base_url,
            body={
                "model": settings.model,
                "input": list(conversation),
                "tools": [t.name for t in tools],
            },
        )

    def parse_response(
        self,
        response: HttpResponse,
        on_event: Callable[[str, dict[str, object]], None] | None = None,
    ) -> ModelTurn:
        try:
            answer = json.loads(response.read())
        except ValueError as exc:
            raise MalformedProviderPayload(
                "scripted answer is not JSON", provider="scripted"
            ) from exc
        if not isinstance(answer, dict):
            raise MalformedProviderPayload("scripted answer is not an object", provider="scripted")
        turn_id = str(answer.get("id", "scripted"))
        usage = usage_from(
            answer.get("usage"), "input_tokens", "output_tokens", "total_tokens", "scripted"
        )
        common: dict[str, Any] = {"response_id": turn_id, "usage": usage, "model": "scripted"}
        if "error" in answer:
            status = int(answer["error"])
            error = ApiError(status=status, message=f"scripted {status}", retryable=status >= 500)
            return ModelTurn(outcome=TurnOutcome.API_FAILURE, error=error, **common)
        if "refusal" in answer:
            return ModelTurn(outcome=TurnOutcome.REFUSAL, text=answer["refusal"], **common)
        if "truncated" in answer:
            return ModelTurn(
                outcome=TurnOutcome.TRUNCATED, finish_reason=answer["truncated"], **common
            )
        if "calls" in answer:
            calls = tuple(_call(turn_id, n, c) for n, c in enumerate(answer["calls"]))
            items = ({"role": "assistant", "calls": [c.model_dump() for c in calls]},)
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS, calls=calls, output_items=items, **common
            )
        text = str(answer.get("text", ""))
        items = ({"role": "assistant", "content": text},)
        return ModelTurn(
            outcome=TurnOutcome.FINAL_TEXT,
            text=text,
            finish_reason="stop",
            output_items=items,
            **common,
        )

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]:
        return [
            {"role": "tool", "call_id": r.call_id, "is_error": r.is_error, "content": r.content}
            for r in results
        ]


def _call(turn_id: str, n: int, spec: JSONObject) -> ProposedCall:
    raw = spec.get("arguments", {})
    text = raw if isinstance(raw, str) else json.dumps(raw)
    return ProposedCall(  # the engine parses the text under the tool's byte cap
        call_id=str(spec.get("id", f"call_{turn_id}_{n}")),
        name=str(spec["name"]),
        raw_arguments=text,
    )


class ScriptedTransport:
    """Answers each request with the next scripted answer; counts what it was sent."""

    name = "scripted"

    def __init__(self, answers: Sequence[Answer]) -> None:
        self.answers = list(answers)
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        if len(self.requests) >= len(self.answers):
            raise TranscriptError(f"the script has no answer for request {len(self.requests) + 1}")
        answer = self.answers[len(self.requests)]
        self.requests.append(request)
        body = answer(request) if callable(answer) else answer
        body = {"id": f"turn{len(self.requests)}", **body}
        return HttpResponse(status=200, body=json.dumps(body).encode())
