"""Gemini Interactions API adapter (``POST {base_url}/v1beta/interactions``, the ``steps`` schema).

The request header ``Api-Revision: 2026-05-20`` selects the current schema; an answer in the
older ``outputs`` shape is refused with a clear error rather than half-read.

Continuation: this is the one *stateful* adapter. Gemini keeps the interaction server-side and
the next request names it with ``previous_interaction_id``, sending only the new input (the
``function_result`` steps). The conversation items in the store represent that exactly:

- ``start`` stores the task as a ``user_input`` step;
- each answer is stored as one local marker item ``{"type": "interaction", "id", "status",
  "steps"}`` (the steps exactly as received, for audit); the marker itself is never sent;
- results are stored as ``function_result`` steps.

``build_request`` takes the last marker: its ``id`` becomes ``previous_interaction_id`` and the
items after it become ``input`` (before any marker, every item is ``input``). So a request is
still rebuilt byte for byte from stored items, and ``verify`` can hash it; what it cannot do is
bring back an interaction the provider has since expired (a long approval pause is the risk).

Status mapping: ``requires_action`` → TOOL_PROPOSALS (``function_call`` steps with no matching
``function_result``); ``completed`` → FINAL_TEXT (text of the ``model_output`` steps after the
last input step), API_FAILURE when a ``model_output`` carries an ``error``; ``incomplete`` and
``budget_exceeded`` → TRUNCATED (calls never run); ``failed`` → API_FAILURE classified by its
``errors[0]`` code; ``in_progress``/``queued`` (a background interaction not finished: the
last poll a recording holds, or a live answer) → TRUNCATED; ``cancelled`` and
``continuation_required`` → API_FAILURE, not retryable (nothing to act on). Results go back
as ``function_result`` steps whose ``result`` is the envelope object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

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
from toolloop_cli.errors import MalformedProviderPayload

from ._answer import UNFINISHED, parse_answer, usage_from
from ._declare import declarations
from ._errors import GEMINI, classify_stream_error
from ._gemini_readers import InteractionsReader
from ._gemini_stream import InteractionsStream
from ._json import parse_arguments
from ._stream import EventSink, dumps_arguments, no_events
from .providers import default_base_url

__all__ = ["API_REVISION", "DEFAULT_BASE_URL", "MARKER", "GeminiInteractionsAdapter"]

DEFAULT_BASE_URL = default_base_url("gemini", "interactions")
API_REVISION = "2026-05-20"
#: ``type`` of the local conversation item that stands for one answered interaction.
MARKER = "interaction"

_PROVIDER = "gemini"
_INPUT_STEPS = frozenset({"user_input", "function_result"})
_NOT_FINISHED = frozenset({"cancelled", "continuation_required"})


def _malformed(reason: str) -> NoReturn:
    raise MalformedProviderPayload(f"gemini interactions: {reason}", provider=_PROVIDER)


class GeminiInteractionsAdapter(InteractionsReader):
    """The ``ModelAdapter`` for Gemini's Interactions API (stateful continuation)."""

    provider: str = "gemini"
    api_family: str = "interactions"
    revision: str = "gemini-interactions/1"

    def __init__(self, base_url: str = DEFAULT_BASE_URL) -> None:
        self.base_url = base_url.rstrip("/")

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]:
        return [{"type": "user_input", "content": [{"type": "text", "text": task}]}]

    def build_request(
        self,
        conversation: Sequence[JSONObject],
        tools: Sequence[ToolSpec],
        settings: ModelSettings,
    ) -> HttpRequest:
        """The last marker's id continues the interaction; the items after it are the input."""
        marks = [i for i, item in enumerate(conversation) if item.get("type") == MARKER]
        body: JSONObject = {"model": settings.model}
        if marks:
            body["previous_interaction_id"] = conversation[marks[-1]]["id"]
            body["input"] = list(conversation[marks[-1] + 1 :])
        else:
            body["input"] = list(conversation)
        declared = [
            own
            or {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t, own in declarations(tools, self.provider)
        ]
        if declared:
            body["tools"] = declared
        if settings.instructions is not None:
            body["system_instruction"] = settings.instructions
        if settings.max_output_tokens is not None:
            body["generation_config"] = {"max_output_tokens": settings.max_output_tokens}
        headers = {"content-type": "application/json", "api-revision": API_REVISION}
        if settings.stream:
            body["stream"] = True
            headers["accept"] = "text/event-stream"
        return HttpRequest(url=f"{self.base_url}/v1beta/interactions", headers=headers, body=body)

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]:
        """One ``function_result`` step per call, in order; ``result`` is the envelope."""
        return [
            {
                "type": "function_result",
                "call_id": r.call_id,
                "name": r.name,
                "result": r.content,
                "is_error": r.is_error,
            }
            for r in results
        ]

    def parse_response(
        self, response: HttpResponse, on_event: EventSink | None = None
    ) -> ModelTurn:
        """Classify one answer into a ``ModelTurn``; see the module docstring for the rules."""
        return parse_answer(
            response,
            provider=_PROVIDER,
            table=GEMINI,
            stream=lambda: InteractionsStream(parse_interaction, on_event or no_events),
            parse=parse_interaction,
            request_id_header=None,
        )


def parse_interaction(data: Any, raw_arguments: Mapping[str, str] | None = None) -> ModelTurn:
    """An Interaction (a JSON answer, or one assembled from a stream) → ``ModelTurn``."""
    if not isinstance(data, dict):
        _malformed("answer is not an interaction object")
    if "steps" not in data and "outputs" in data:
        _malformed(
            "answer uses the retired 'outputs' schema; this adapter reads the 'steps' schema "
            f"(Api-Revision {API_REVISION})"
        )
    interaction_id, status = data.get("id"), data.get("status")
    if not isinstance(interaction_id, str) or not interaction_id:
        _malformed("interaction has no string 'id'")
    if not isinstance(status, str):
        _malformed("interaction has no string 'status'")
    steps = data.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        _malformed("interaction 'steps' is not a list of objects")
    calls, text, output_error = _scan(steps, raw_arguments or {})
    model = data.get("model")
    common: dict[str, Any] = {
        "response_id": interaction_id,
        "model": model if isinstance(model, str) else None,
        "usage": usage_from(
            data.get("usage"),
            "total_input_tokens",
            "total_output_tokens",
            "total_tokens",
            _PROVIDER,
        ),
        "finish_reason": status,
    }
    marker = {"type": MARKER, "id": interaction_id, "status": status, "steps": steps}
    match status:
        case "requires_action" | "completed" if calls:
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS,
                text=text,
                calls=tuple(calls),
                output_items=(marker,),
                **common,
            )
        case "requires_action":
            _malformed("status requires_action without a pending function_call step")
        case "completed" if output_error is not None:
            return _failure(
                classify_stream_error(GEMINI, output_error), "model output error", common
            )
        case "completed":
            return ModelTurn(
                outcome=TurnOutcome.FINAL_TEXT, text=text or "", output_items=(marker,), **common
            )
        case "incomplete" | "budget_exceeded":
            detail = f"the interaction is {status}"
            if calls:
                cut = ", ".join(f"{c.call_id} ({c.name})" for c in calls)
                detail += f"; call {cut} is never executed"
            return ModelTurn(
                outcome=TurnOutcome.TRUNCATED,
                text=text,
                detail=detail + "; no call will run",
                **common,
            )
        case "failed":
            errors = data.get("errors")
            first = errors[0] if isinstance(errors, list) and errors else None
            return _failure(classify_stream_error(GEMINI, first), "interaction failed", common)
        case "in_progress" | "queued":
            detail = f"the interaction is {status}: {UNFINISHED}"
            return ModelTurn(outcome=TurnOutcome.TRUNCATED, detail=detail, **common)
        case str() if status in _NOT_FINISHED:
            error = ApiError(code=status, message=f"interaction is {status}", retryable=False)
            return _failure(error, f"interaction is {status}, not finished", common)
        case _:
            _malformed(f"unknown interaction status {status!r}")


def _failure(error: ApiError, what: str, common: dict[str, Any]) -> ModelTurn:
    detail = f"{what}: {error.code or error.type or 'no error code'}"
    return ModelTurn(outcome=TurnOutcome.API_FAILURE, error=error, detail=detail, **common)


def _scan(
    steps: list[JSONObject], raw_arguments: Mapping[str, str]
) -> tuple[list[ProposedCall], str | None, Any]:
    """Pending calls, the text after the last input step, and any model_output error."""
    for index, step in enumerate(steps):
        if not isinstance(step.get("type"), str):
            _malformed(f"steps[{index}] has no string 'type'")
    answered = {
        s["call_id"]
        for s in steps
        if s.get("type") == "function_result" and isinstance(s.get("call_id"), str)
    }
    last_input = max((i for i, s in enumerate(steps) if s.get("type") in _INPUT_STEPS), default=-1)
    calls: list[ProposedCall] = []
    texts: list[str] = []
    output_error: Any = None
    seen: set[str] = set()
    for index, step in enumerate(steps):
        kind = step.get("type")
        step_id = step.get("id")
        if kind == "function_call" and not (isinstance(step_id, str) and step_id in answered):
            call = _function_call(index, step, raw_arguments)
            if call.call_id in seen:
                _malformed(f"steps[{index}] repeats function_call id {call.call_id!r}")
            seen.add(call.call_id)
            calls.append(call)
        elif kind == "model_output" and index > last_input:
            content = step.get("content", [])
            if not isinstance(content, list):
                _malformed(f"steps[{index}] model_output 'content' is not a list")
            texts.extend(
                c["text"]
                for c in content
                if isinstance(c, dict)
                and c.get("type") == "text"
                and isinstance(c.get("text"), str)
            )
            if step.get("error") is not None:
                output_error = step["error"]
    return calls, ("".join(texts) if texts else None), output_error


def _function_call(index: int, step: JSONObject, raw_arguments: Mapping[str, str]) -> ProposedCall:
    call_id, name, given = step.get("id"), step.get("name"), step.get("arguments", {})
    if not isinstance(call_id, str) or not call_id:
        _malformed(f"steps[{index}] function_call has no string 'id'")
    if not isinstance(name, str) or not name:
        _malformed(f"steps[{index}] function_call has no string 'name'")
    raw = raw_arguments.get(call_id)
    if raw is None:
        if not isinstance(given, dict):
            _malformed(f"steps[{index}] function_call 'arguments' is not an object")
        raw = dumps_arguments(given)
    arguments, error = parse_arguments(raw)
    return ProposedCall(
        call_id=call_id, name=name, raw_arguments=raw, arguments=arguments, argument_error=error
    )
