"""OpenAI Responses API adapter (``POST {base_url}/responses``).

Continuation: stateless manual context. The conversation is the user input items, then every
output item of each response exactly as received (``reasoning``, ``message``, ``function_call``),
then that turn's ``function_call_output`` items; no ``previous_response_id``. Why:

- an operation can pause for a human approval for hours and resume in another process;
  provider-side state may have expired by then, a conversation in the store has not;
- it works with ``store: false`` / zero data retention accounts;
- every request is rebuildable from the store alone, so ``verify`` can hash the exact bytes and
  ``replay`` can compare them with a recording.

Invariants (see ``engine.ports.ModelAdapter``): ``ProposedCall.call_id`` is the item's
``call_id`` (the item ``id`` goes to ``item_id``); arguments are parsed strictly and never
repaired; only a ``completed`` response whose calls are all ``completed`` yields calls; an
error answer is a turn (``API_FAILURE``), a payload without the documented shape raises
``MalformedProviderPayload``. A streamed answer (``text/event-stream``) is read under a byte
cap and parsed only from its terminal event (``response.completed|incomplete|failed``), which
carries the whole response; a stream that ends without one is ``TRUNCATED``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from toolloop_cli.audit.canonical import canonical_text
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
    Usage,
)
from toolloop_cli.errors import MalformedProviderPayload

from ._errors import OPENAI, classify_body_failure, classify_http_error
from ._json import load_json_body, parse_arguments

__all__ = ["DEFAULT_BASE_URL", "MAX_BODY_BYTES", "OpenAIResponsesAdapter"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Largest answer (JSON or event stream) read from the provider.
MAX_BODY_BYTES = 16 * 1024 * 1024

_PROVIDER = "openai"
_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_EVENT_SPLIT = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def _malformed(reason: str) -> NoReturn:
    raise MalformedProviderPayload(f"openai responses: {reason}", provider=_PROVIDER)


@dataclass
class _Scan:
    """What the ``output`` items of one response amount to."""

    calls: list[ProposedCall] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    #: call ids of function_call items whose own status is present and not "completed"
    unfinished: list[str] = field(default_factory=list)


class OpenAIResponsesAdapter:
    """The ``ModelAdapter`` for OpenAI's Responses API; holds no conversation state."""

    provider: str = "openai"
    api_family: str = "responses"
    revision: str = "openai-responses/1"

    def __init__(self, base_url: str = DEFAULT_BASE_URL) -> None:
        self.base_url = base_url.rstrip("/")

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]:
        """The conversation of a new task: one user message."""
        return [{"role": "user", "content": task}]

    def build_request(
        self,
        conversation: Sequence[JSONObject],
        tools: Sequence[ToolSpec],
        settings: ModelSettings,
    ) -> HttpRequest:
        """The exact request for the conversation so far; credentials are the transport's job."""
        body: JSONObject = {"model": settings.model, "input": list(conversation)}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": False,
                }
                for tool in tools
            ]
        if settings.instructions is not None:
            body["instructions"] = settings.instructions
        if settings.max_output_tokens is not None:
            body["max_output_tokens"] = settings.max_output_tokens
        if settings.stream:
            body["stream"] = True
        return HttpRequest(
            url=f"{self.base_url}/responses",
            headers={"content-type": "application/json"},
            body=body,
        )

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]:
        """One ``function_call_output`` per result, in order; the content as canonical JSON."""
        return [
            {
                "type": "function_call_output",
                "call_id": result.call_id,
                "output": canonical_text(result.content),
            }
            for result in results
        ]

    def parse_response(self, response: HttpResponse) -> ModelTurn:
        """Classify one answer into a ``ModelTurn``; see the module docstring for the rules."""
        body = _read_capped(response)
        if not 200 <= response.status < 300:
            error = classify_http_error(OPENAI, response.status, response.headers, body)
            return ModelTurn(
                outcome=TurnOutcome.API_FAILURE,
                finish_reason=f"http_{response.status}",
                error=error,
                detail=_http_detail(error, response.headers.get("x-request-id")),
            )
        if "text/event-stream" in response.content_type:
            return _parse_stream(body)
        return _parse_body(load_json_body(body, _PROVIDER))


def _read_capped(response: HttpResponse) -> bytes:
    """The whole body, refusing more than ``MAX_BODY_BYTES`` (streamed chunks stop early)."""
    if response.chunks is None:
        body = response.body
    else:
        parts: list[bytes] = []
        size = 0
        for chunk in response.chunks:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                _malformed(f"answer larger than {MAX_BODY_BYTES} bytes")
            parts.append(chunk)
        response.chunks = None
        body = response.body = b"".join(parts)
    if len(body) > MAX_BODY_BYTES:
        _malformed(f"answer larger than {MAX_BODY_BYTES} bytes")
    return body


def _http_detail(error: ApiError, request_id: str | None) -> str:
    kind = error.code or error.type or "error"
    retry = "retryable" if error.retryable else "not retryable"
    where = f", request {request_id}" if request_id else ""
    return f"HTTP {error.status} {kind} ({retry}{where})"


def _parse_stream(body: bytes) -> ModelTurn:
    """Take the terminal event's response; an error event fails the turn; no terminal: cut."""
    for data in _stream_events(body):
        kind = data.get("type")
        if isinstance(kind, str) and kind in _TERMINAL_EVENTS:
            return _parse_body(data.get("response"))
        if kind == "error" or "error" in data:
            nested = data.get("error")
            error = classify_body_failure(OPENAI, nested if isinstance(nested, dict) else data)
            return ModelTurn(
                outcome=TurnOutcome.API_FAILURE,
                finish_reason="error",
                error=error,
                detail=f"error event in the stream: {error.code or 'no code'}",
            )
    return ModelTurn(
        outcome=TurnOutcome.TRUNCATED,
        finish_reason="stream_incomplete",
        detail="the event stream ended before response.completed/incomplete/failed",
    )


def _stream_events(body: bytes) -> list[JSONObject]:
    """The JSON ``data`` of each server-sent event, in order (comments and ``[DONE]`` skipped).

    A last event without its closing blank line counts only if its data is whole JSON: a
    stream cut mid-event is a cut stream, not a malformed one.
    """
    events: list[JSONObject] = []
    blocks = _EVENT_SPLIT.split(body)
    for index, block in enumerate(blocks):
        lines = [line for line in block.splitlines() if line.startswith(b"data:")]
        if not lines:
            continue
        data = b"\n".join(line[5:].removeprefix(b" ") for line in lines)
        if data.strip() == b"[DONE]":
            continue
        try:
            event = load_json_body(data, _PROVIDER)
        except MalformedProviderPayload:
            if index == len(blocks) - 1:
                break
            raise
        if not isinstance(event, dict):
            _malformed("stream event data is not a JSON object")
        events.append(event)
    return events


def _parse_body(data: Any) -> ModelTurn:
    """A response object (from a JSON answer or a terminal stream event) → ``ModelTurn``."""
    if not isinstance(data, dict):
        _malformed("response is not a JSON object")
    status = data.get("status")
    if not isinstance(status, str):
        _malformed("response has no string 'status'")
    response_id = data.get("id")
    if not isinstance(response_id, str) or not response_id:
        _malformed("response has no string 'id'")
    output = data.get("output")
    if not isinstance(output, list):
        _malformed("response 'output' is not a list")
    scan = _scan(output)
    model = data.get("model")
    common: dict[str, Any] = {
        "response_id": response_id,
        "model": model if isinstance(model, str) else None,
        "usage": _usage(data.get("usage")),
        "output_items": tuple(output),
    }
    match status:
        case "completed":
            return _completed(scan, common)
        case "incomplete":
            return _incomplete(data.get("incomplete_details"), common)
        case "failed":
            error = classify_body_failure(OPENAI, data.get("error"))
            detail = f"response failed: {error.code or 'no error code'}"
        case "cancelled" | "in_progress" | "queued":
            error = ApiError(code=status, message=f"response is {status}", retryable=False)
            detail = f"response is {status}, not finished: nothing to act on"
        case _:
            _malformed(f"unknown response status {status!r}")
    return ModelTurn(
        outcome=TurnOutcome.API_FAILURE, finish_reason=status, error=error, detail=detail, **common
    )


def _completed(scan: _Scan, common: dict[str, Any]) -> ModelTurn:
    text = "".join(scan.texts) if scan.texts else None
    if scan.unfinished:
        ids = ", ".join(scan.unfinished)
        return ModelTurn(
            outcome=TurnOutcome.TRUNCATED,
            finish_reason="completed",
            text=text,
            detail=f"function call(s) {ids} not completed: none will run",
            **common,
        )
    if scan.refusals:
        return ModelTurn(
            outcome=TurnOutcome.REFUSAL,
            finish_reason="completed",
            text="".join(scan.refusals),
            detail="the model refused",
            **common,
        )
    if scan.calls:
        return ModelTurn(
            outcome=TurnOutcome.TOOL_PROPOSALS,
            finish_reason="completed",
            text=text,
            calls=tuple(scan.calls),
            **common,
        )
    if text is not None:
        return ModelTurn(
            outcome=TurnOutcome.FINAL_TEXT, finish_reason="completed", text=text, **common
        )
    _malformed("completed response has neither output_text nor function_call items")


def _incomplete(details: Any, common: dict[str, Any]) -> ModelTurn:
    reason = details.get("reason") if isinstance(details, dict) else None
    if reason is not None and not isinstance(reason, str):
        _malformed("incomplete_details.reason is not a string")
    words = {
        "max_output_tokens": "the answer hit max_output_tokens",
        "content_filter": "the answer was cut by the content filter",
    }.get(reason or "", f"the answer is incomplete ({reason or 'no reason given'})")
    return ModelTurn(
        outcome=TurnOutcome.TRUNCATED,
        finish_reason=reason or "incomplete",
        detail=f"{words}; no call will run",
        **common,
    )


def _scan(output: list[Any]) -> _Scan:
    """Validate every output item and collect calls, text and refusals."""
    scan = _Scan()
    seen: set[str] = set()
    for index, item in enumerate(output):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            _malformed(f"output[{index}] is not an item with a string 'type'")
        match item["type"]:
            case "function_call":
                call, status = _function_call(index, item)
                if call.call_id in seen:
                    _malformed(f"output[{index}] repeats call_id {call.call_id!r}")
                seen.add(call.call_id)
                if status is not None and status != "completed":
                    scan.unfinished.append(call.call_id)
                scan.calls.append(call)
            case "message":
                _message(index, item, scan)
            case _:
                # reasoning and other items: carried forward verbatim, never text or calls
                pass
    return scan


def _function_call(index: int, item: JSONObject) -> tuple[ProposedCall, str | None]:
    call_id, name, raw = item.get("call_id"), item.get("name"), item.get("arguments")
    item_id, status = item.get("id"), item.get("status")
    if not isinstance(call_id, str) or not call_id:
        _malformed(f"output[{index}] function_call has no string 'call_id'")
    if not isinstance(name, str) or not name:
        _malformed(f"output[{index}] function_call has no string 'name'")
    if not isinstance(raw, str):
        _malformed(f"output[{index}] function_call 'arguments' is not a string")
    if item_id is not None and not isinstance(item_id, str):
        _malformed(f"output[{index}] function_call 'id' is not a string")
    if status is not None and not isinstance(status, str):
        _malformed(f"output[{index}] function_call 'status' is not a string")
    arguments, error = parse_arguments(raw)
    call = ProposedCall(
        call_id=call_id,
        name=name,
        raw_arguments=raw,
        arguments=arguments,
        argument_error=error,
        item_id=item_id,
    )
    return call, status


def _message(index: int, item: JSONObject, scan: _Scan) -> None:
    content = item.get("content")
    if not isinstance(content, list):
        _malformed(f"output[{index}] message 'content' is not a list")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        match kind:
            case "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    _malformed(f"output[{index}] output_text has no string 'text'")
                scan.texts.append(text)
            case "refusal":
                refusal = part.get("refusal")
                if not isinstance(refusal, str):
                    _malformed(f"output[{index}] refusal has no string 'refusal'")
                scan.refusals.append(refusal)
            case _:
                _malformed(f"output[{index}] message part of unsupported type {kind!r}")


def _usage(raw: Any) -> Usage:
    """Token counts; a missing or non-integer count is 0 (usage never decides an outcome)."""
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        total_tokens=count("total_tokens"),
    )
