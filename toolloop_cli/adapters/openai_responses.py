"""OpenAI Responses API adapter (``POST {base_url}/responses``).

Continuation: stateless manual context. The conversation is the user input items, then every
output item of each response exactly as received (``reasoning``, ``message``, ``function_call``),
then that turn's ``function_call_output`` items; no ``previous_response_id``. Why:

- an operation can pause for a human approval for hours and resume in another process;
  provider-side state may have expired by then, a conversation in the store has not;
- it works with ``store: false`` / zero data retention accounts;
- every request is rebuildable from the store alone, so ``verify`` can hash the exact bytes and
  ``replay`` can compare them with a recording.

A client-executed tool search (``tool_search_call`` with ``execution: client``, declared as
the provider-defined ``{"type": "tool_search", "execution": "client"}``) is a call to the tool
``tool_search`` whose arguments are the item's object; its result goes back as a
``tool_search_output`` item whose ``tools`` are the result. A server-executed one is carried
forward like reasoning. A call to a custom (free-text) tool, declared ``{"type": "custom",
"name": …}``, is a ``custom_tool_call`` whose ``input`` is text: it is a call whose arguments
are ``{"input": <that text>}``, answered by a ``custom_tool_call_output`` item. An item that
asks the client for another action (``computer_call``, ``shell_call``, ``local_shell_call``,
``apply_patch_call``, ``mcp_approval_request``) is no registry tool's call: the answer is an
API_FAILURE that is not retried (FAILED, naming the item), never a completion that drops it,
and none of its calls runs.

Invariants (see ``engine.ports.ModelAdapter``): ``ProposedCall.call_id`` is the item's
``call_id`` (the item ``id`` goes to ``item_id``); arguments are parsed strictly and never
repaired; only a ``completed`` response whose calls are all ``completed`` yields calls; an
error answer is a turn (``API_FAILURE``), a payload without the documented shape raises
``MalformedProviderPayload``. A streamed answer (``text/event-stream``) goes through the shared
assembler (see ``_openai_stream``): fragments per output index under a byte cap; a call runs
with its streamed pieces, and the terminal event's response (``response.completed|incomplete|
failed``) is parsed once it agrees with them (a stream that contradicts itself is malformed);
a stream that ends without a terminal event is ``TRUNCATED`` and runs nothing. So is a
response still ``queued`` or ``in_progress`` (background mode, no poll saying how it ended);
a ``cancelled`` one is an API_FAILURE that is not retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
)
from toolloop_cli.errors import MalformedProviderPayload

from ._answer import MAX_BODY_BYTES, UNFINISHED, parse_answer, usage_from
from ._declare import declarations
from ._errors import OPENAI, classify_body_failure
from ._openai_stream import OpenAIStream
from ._responses_reader import CUSTOM, TOOL_SEARCH, ResponsesReader
from ._stream import EventSink, dumps_arguments, no_events
from .providers import default_base_url

__all__ = ["DEFAULT_BASE_URL", "MAX_BODY_BYTES", "OpenAIResponsesAdapter"]

DEFAULT_BASE_URL = default_base_url("openai", "responses")
#: Largest answer (JSON or event stream) read from the provider.

_PROVIDER = "openai"


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
    #: types of the items that ask the client for an action toolloop does not take
    client_actions: list[str] = field(default_factory=list)
    #: types of the items the server's own tools made (an image, a search, an MCP call)
    hosted: list[str] = field(default_factory=list)


#: output items the client must act on that are no registry tool's call (the hosted tools the
#: client runs, an MCP call waiting for the client's approval): toolloop answers none of them,
#: and the next request without their outputs would be refused
_CLIENT_ACTIONS = frozenset(
    {"computer_call", "local_shell_call", "shell_call", "apply_patch_call", "mcp_approval_request"}
)


class OpenAIResponsesAdapter(ResponsesReader):
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
        declared = [
            own
            or {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool, own in declarations(tools, self.provider)
        ]
        if declared:
            body["tools"] = declared
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
        """One item per result, in order: a ``function_call_output`` with the content as
        canonical JSON (a ``custom_tool_call_output`` for a custom tool's call), or for a
        client tool search the ``tool_search_output`` whose ``tools`` are the result (none when
        the call failed)."""
        items: list[JSONObject] = []
        for result in results:
            if result.provider_type == CUSTOM:
                items.append(
                    {
                        "type": "custom_tool_call_output",
                        "call_id": result.call_id,
                        "output": canonical_text(result.content),
                    }
                )
            elif result.provider_type == TOOL_SEARCH:
                found = result.content.get("result") if not result.is_error else None
                items.append(
                    {
                        "type": "tool_search_output",
                        "call_id": result.call_id,
                        "execution": "client",
                        "status": "completed",
                        "tools": found if isinstance(found, list) else [],
                    }
                )
            else:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": result.call_id,
                        "output": canonical_text(result.content),
                    }
                )
        return items

    def parse_response(
        self, response: HttpResponse, on_event: EventSink | None = None
    ) -> ModelTurn:
        """Classify one answer into a ``ModelTurn``; see the module docstring for the rules."""
        return parse_answer(
            response,
            provider=_PROVIDER,
            table=OPENAI,
            stream=lambda: OpenAIStream(_parse_body, on_event or no_events),
            parse=_parse_body,
            request_id_header="x-request-id",
        )


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
        "usage": usage_from(
            data.get("usage"), "input_tokens", "output_tokens", "total_tokens", _PROVIDER
        ),
        "output_items": tuple(output),
    }
    match status:
        case "completed":
            for key in ("error", "incomplete_details"):
                if data.get(key) is not None:  # what it says against its status runs nothing
                    _malformed(f"a completed response with a non-null {key!r} contradicts itself")
            return _completed(scan, common)
        case "incomplete":
            return _incomplete(data.get("incomplete_details"), common)
        case "failed":
            error = classify_body_failure(OPENAI, data.get("error"))
            detail = f"response failed: {error.code or 'no error code'}"
        case "in_progress" | "queued":
            return ModelTurn(
                outcome=TurnOutcome.TRUNCATED,
                finish_reason=status,
                detail=f"response is {status}: {UNFINISHED}",
                **common,
            )
        case "cancelled":
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
    if scan.client_actions:
        kinds = ", ".join(sorted(set(scan.client_actions)))
        message = f"the answer asks the client for {kinds}, which toolloop does not run"
        return ModelTurn(
            outcome=TurnOutcome.API_FAILURE,
            finish_reason="completed",
            text=text,
            error=ApiError(code="unsupported_item", message=message, retryable=False),
            detail=f"{message} (only the registry's tools run); nothing will run",
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
    if scan.hosted:  # the answer is what the server's tools made (an image): no text
        kinds = ", ".join(sorted(set(scan.hosted)))
        return ModelTurn(
            outcome=TurnOutcome.FINAL_TEXT,
            finish_reason="completed",
            text="",
            detail=f"the answer holds only what the server's tools made ({kinds}), no text",
            **common,
        )
    _malformed("completed response has neither output_text nor call items")


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
                _take(scan, seen, index, *_function_call(index, item))
            case "custom_tool_call":
                _take(scan, seen, index, *_custom_tool_call(index, item))
            case "tool_search_call" if item.get("execution") == "client":
                _take(scan, seen, index, *_tool_search_call(index, item))
            case "message":
                _message(index, item, scan)
            case kind if kind in _CLIENT_ACTIONS:
                scan.client_actions.append(kind)
            case "reasoning" | "compaction":
                pass  # carried forward verbatim, never text or calls
            case kind:
                # the server's own tools (web_search_call, image_generation_call, mcp_call…)
                # and newer items: carried forward verbatim, never text or calls
                scan.hosted.append(kind)
    return scan


def _take(scan: _Scan, seen: set[str], index: int, call: ProposedCall, status: str | None) -> None:
    """One call of the answer; its call id is its own, and it runs only if it completed."""
    if call.call_id in seen:
        _malformed(f"output[{index}] repeats call_id {call.call_id!r}")
    seen.add(call.call_id)
    if status is not None and status != "completed":
        scan.unfinished.append(call.call_id)
    scan.calls.append(call)


def _function_call(index: int, item: JSONObject) -> tuple[ProposedCall, str | None]:
    # left as text: the engine parses it once it is known to be under the tool's byte cap
    return _named_call(index, item, "arguments", lambda raw: raw)


def _custom_tool_call(index: int, item: JSONObject) -> tuple[ProposedCall, str | None]:
    """A call to a custom tool: its free text ``input`` is the arguments ``{"input": text}``."""
    return _named_call(index, item, "input", lambda text: dumps_arguments({"input": text}))


def _named_call(
    index: int, item: JSONObject, text_key: str, arguments: Callable[[str], str]
) -> tuple[ProposedCall, str | None]:
    """A call item that names its tool and carries its text under ``text_key`` (checked to be
    there, all strings), with the raw arguments ``arguments`` makes of that text."""
    kind = item["type"]
    call_id, name, text = item.get("call_id"), item.get("name"), item.get(text_key)
    item_id, status = item.get("id"), item.get("status")
    if not isinstance(call_id, str) or not call_id:
        _malformed(f"output[{index}] {kind} has no string 'call_id'")
    if not isinstance(name, str) or not name:
        _malformed(f"output[{index}] {kind} has no string 'name'")
    if not isinstance(text, str):
        _malformed(f"output[{index}] {kind} '{text_key}' is not a string")
    if item_id is not None and not isinstance(item_id, str):
        _malformed(f"output[{index}] {kind} 'id' is not a string")
    if status is not None and not isinstance(status, str):
        _malformed(f"output[{index}] {kind} 'status' is not a string")
    raw = arguments(text)
    return ProposedCall(call_id=call_id, name=name, raw_arguments=raw, item_id=item_id), status


def _tool_search_call(index: int, item: JSONObject) -> tuple[ProposedCall, str | None]:
    """A client-executed tool search: a call to ``tool_search`` (its arguments an object)."""
    call_id, given, status = item.get("call_id"), item.get("arguments"), item.get("status")
    if not isinstance(call_id, str) or not call_id:
        _malformed(f"output[{index}] tool_search_call has no string 'call_id'")
    if isinstance(given, dict):
        raw = dumps_arguments(given)
    elif isinstance(given, str):
        raw = given
    else:
        _malformed(f"output[{index}] tool_search_call 'arguments' is not an object")
    if status is not None and not isinstance(status, str):
        _malformed(f"output[{index}] tool_search_call 'status' is not a string")
    item_id = item.get("id") if isinstance(item.get("id"), str) else None
    call = ProposedCall(call_id=call_id, name=TOOL_SEARCH, raw_arguments=raw, item_id=item_id)
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
