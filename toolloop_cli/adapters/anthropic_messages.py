"""Anthropic Messages API adapter (``POST {base_url}/v1/messages``).

Headers: ``anthropic-version: 2023-06-01``; ``max_tokens`` is always sent (the API needs it).

Continuation: stateless, like every adapter but Gemini Interactions. The conversation is the
``messages`` list itself: the user's task, then each assistant message exactly as received (all
blocks, ``thinking`` with its ``signature`` included), then one user message holding one
``tool_result`` block per ``tool_use`` of that assistant message, results first and nothing
before them. ``build_request`` refuses a conversation that breaks that pairing rather than
sending one the API would reject. Consecutive messages of one role are one turn, as the API
combines them (a recorded history may hold each call of one answer as its own message).

Stop reasons, every one mapped:

- ``end_turn``, ``stop_sequence``: FINAL_TEXT (TOOL_PROPOSALS if the message still has
  ``tool_use`` blocks: those need results before anything else may be said);
- ``tool_use``: TOOL_PROPOSALS; ``input`` is an object, recorded as its JSON text;
- ``max_tokens``, ``model_context_window_exceeded``: TRUNCATED, also with ``tool_use`` blocks
  present: a call cut by the limit is never executed;
- ``pause_turn``: the turn is to be continued by sending the assistant content back. It is a
  TOOL_PROPOSALS turn with no calls (unless the message holds client ``tool_use`` blocks): the
  engine appends the content, has no results to add, and asks again; the turn guard bounds it;
- ``compaction`` (context management with ``pause_after_compaction``): the same as
  ``pause_turn``: the message holds the ``compaction`` block that replaces the history before
  it, sent back as received, and the model is asked to go on;
- ``refusal``: REFUSAL, with ``stop_details`` (category, explanation) in the detail.

A streamed answer is read by ``_anthropic_stream``; ``max_tokens`` is 4096 unless the settings
say otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from toolloop_cli.audit.canonical import canonical_text
from toolloop_cli.engine.types import (
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
from toolloop_cli.errors import AdapterError, MalformedProviderPayload

from ._answer import parse_answer, usage_from
from ._anthropic_stream import AnthropicStream
from ._declare import declarations
from ._errors import ANTHROPIC
from ._json import parse_arguments
from ._messages_reader import MessagesReader
from ._stream import EventSink, dumps_arguments, no_events
from .providers import default_base_url

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "DEFAULT_MAX_TOKENS", "AnthropicMessagesAdapter"]

DEFAULT_BASE_URL = default_base_url("anthropic", "messages")
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_PROVIDER = "anthropic"
_TRUNCATING = {
    "max_tokens": "the answer hit max_tokens",
    "model_context_window_exceeded": "the conversation exceeded the model's context window",
}


def _malformed(reason: str) -> NoReturn:
    raise MalformedProviderPayload(f"anthropic messages: {reason}", provider=_PROVIDER)


class AnthropicMessagesAdapter(MessagesReader):
    """The ``ModelAdapter`` for Anthropic's Messages API; holds no conversation state."""

    provider: str = "anthropic"
    api_family: str = "messages"
    revision: str = "anthropic-messages/1"

    def __init__(self, base_url: str = DEFAULT_BASE_URL) -> None:
        self.base_url = base_url.rstrip("/")

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]:
        return [{"role": "user", "content": task}]

    def build_request(
        self,
        conversation: Sequence[JSONObject],
        tools: Sequence[ToolSpec],
        settings: ModelSettings,
    ) -> HttpRequest:
        """The exact request for the conversation so far; credentials are the transport's job."""
        _check_pairing(conversation)
        body: JSONObject = {
            "model": settings.model,
            "max_tokens": settings.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": list(conversation),
        }
        declared = [
            own or {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t, own in declarations(tools, self.provider)
        ]
        if declared:
            body["tools"] = declared
        if settings.instructions is not None:
            body["system"] = settings.instructions
        if settings.stream:
            body["stream"] = True
        return HttpRequest(
            url=f"{self.base_url}/v1/messages",
            headers={"content-type": "application/json", "anthropic-version": API_VERSION},
            body=body,
        )

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]:
        """One user message: a ``tool_result`` per call, in order, and nothing before them."""
        if not results:
            return []
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": r.call_id,
                "content": canonical_text(r.content),
                "is_error": r.is_error,
            }
            for r in results
        ]
        return [{"role": "user", "content": blocks}]

    def parse_response(
        self, response: HttpResponse, on_event: EventSink | None = None
    ) -> ModelTurn:
        """Classify one answer into a ``ModelTurn``; see the module docstring for the rules."""
        return parse_answer(
            response,
            provider=_PROVIDER,
            table=ANTHROPIC,
            stream=lambda: AnthropicStream(parse_message, on_event or no_events),
            parse=parse_message,
            request_id_header="request-id",
        )


def _check_pairing(messages: Sequence[JSONObject]) -> None:
    """Every ``tool_use`` is answered in the next turn, by ``tool_result`` blocks first.

    Consecutive messages of one role are one turn, as the API combines them: two assistant
    messages in a row (a client that wrote each call of one answer as its own message) are
    answered together by the user message after them.
    """
    turns = _turns(messages)
    for (first, last, role, content), (following, _, _, reply) in itertools.pairwise(turns):
        if role != "assistant":
            continue
        wanted = [
            b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        if not wanted:
            continue
        leading: list[Any] = []
        for block in reply:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                break
            leading.append(block.get("tool_use_id"))
        if sorted(map(str, leading)) != sorted(map(str, wanted)):
            found = ", ".join(map(str, leading)) or "none"
            asked = f"messages[{first}]" if first == last else f"messages[{first}..{last}]"
            raise AdapterError(  # counted from 0, as conversations and interactions are
                f"anthropic messages: messages[{following}] must open with one tool_result for "
                f"each tool_use of {asked} ({', '.join(map(str, wanted))}); "
                f"the tool_results it opens with answer: {found}",
                provider=_PROVIDER,
            )


def _turns(messages: Sequence[JSONObject]) -> list[tuple[int, int, Any, list[Any]]]:
    """(first index, last index, role, blocks) of each run of messages of one role."""
    turns: list[tuple[int, int, Any, list[Any]]] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        role = message.get("role")
        if turns and turns[-1][2] == role:
            first, _, _, earlier = turns[-1]
            turns[-1] = (first, index, role, [*earlier, *blocks])
        else:
            turns.append((index, index, role, list(blocks)))
    return turns


def parse_message(data: Any, raw_inputs: Mapping[int, str] | None = None) -> ModelTurn:
    """A Message (a JSON answer, or one assembled from a stream) → ``ModelTurn``.

    ``raw_inputs`` holds, per block index, the argument text a stream sent, so a call keeps the
    exact text it arrived as (and an unparsable one is an INVALID call, never repaired).
    """
    if not isinstance(data, dict) or data.get("type") not in ("message", None):
        _malformed("answer is not a message object")
    message_id, content = data.get("id"), data.get("content")
    if not isinstance(message_id, str) or not message_id:
        _malformed("message has no string 'id'")
    if not isinstance(content, list):
        _malformed("message 'content' is not a list")
    stop = data.get("stop_reason")
    if not isinstance(stop, str):
        _malformed("message has no string 'stop_reason'")
    texts, calls = _scan(content, raw_inputs or {})
    model = data.get("model")
    common: dict[str, Any] = {
        "response_id": message_id,
        "model": model if isinstance(model, str) else None,
        "usage": _usage(data.get("usage")),
        "output_items": ({"role": "assistant", "content": content},),
        "finish_reason": stop,
    }
    text = "".join(texts) if texts else None
    match stop:
        case "end_turn" | "stop_sequence" if not calls:
            return ModelTurn(outcome=TurnOutcome.FINAL_TEXT, text=text or "", **common)
        case "end_turn" | "stop_sequence" | "tool_use":
            if not calls:
                _malformed("stop_reason tool_use without a tool_use block")
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS, text=text, calls=tuple(calls), **common
            )
        case "pause_turn" | "compaction":
            detail = (
                "the provider paused the turn; its content is sent back to continue it"
                if stop == "pause_turn"
                else "the provider compacted the conversation and paused; the compaction is "
                "sent back to continue"
            )
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS,
                text=text,
                calls=tuple(calls),
                detail=detail,
                **common,
            )
        case "max_tokens" | "model_context_window_exceeded":
            detail = _TRUNCATING[stop]
            if calls:
                cut = ", ".join(f"{c.call_id} ({c.name})" for c in calls)
                detail += f"; call {cut} was cut and is never executed"
            return ModelTurn(
                outcome=TurnOutcome.TRUNCATED,
                text=text,
                detail=detail + "; no call will run",
                **common,
            )
        case "refusal":
            return ModelTurn(
                outcome=TurnOutcome.REFUSAL,
                text=text,
                detail=_refusal_detail(data.get("stop_details")),
                **common,
            )
        case _:
            _malformed(f"unknown stop_reason {stop!r}")


def _scan(
    content: list[Any], raw_inputs: Mapping[int, str]
) -> tuple[list[str], list[ProposedCall]]:
    texts: list[str] = []
    calls: list[ProposedCall] = []
    seen: set[str] = set()
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            _malformed(f"content[{index}] is not a block with a string 'type'")
        match kind:
            case "text":
                if not isinstance(block.get("text"), str):
                    _malformed(f"content[{index}] text block has no string 'text'")
                texts.append(block["text"])
            case "tool_use":
                call = _tool_use(index, block, raw_inputs.get(index))
                if call.call_id in seen:
                    _malformed(f"content[{index}] repeats tool_use id {call.call_id!r}")
                seen.add(call.call_id)
                calls.append(call)
            case _:
                # thinking, redacted_thinking, server tool blocks: carried back, never run
                pass
    return texts, calls


def _usage(raw: Any) -> Usage:
    """The answer's token counts, with those of the compaction it ran first.

    A compacting answer (context management) reports its compaction as a separate entry of
    ``usage.iterations``, left out of the top-level counts; the budget counts what was spent,
    so its tokens are added. The ``message`` iteration is the top level itself.
    """
    usage = usage_from(raw, "input_tokens", "output_tokens", None, _PROVIDER)
    iterations = raw.get("iterations") if isinstance(raw, dict) else None
    if iterations is None:
        return usage
    if not isinstance(iterations, list) or not all(isinstance(i, dict) for i in iterations):
        _malformed("usage 'iterations' is not a list of objects")
    tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    for step in iterations:
        if step.get("type") == "compaction":
            spent = usage_from(step, "input_tokens", "output_tokens", None, _PROVIDER)
            tokens_in += spent.input_tokens
            tokens_out += spent.output_tokens
    return Usage(
        input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out
    )


def _tool_use(index: int, block: JSONObject, raw: str | None) -> ProposedCall:
    call_id, name, given = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        _malformed(f"content[{index}] tool_use has no string 'id'")
    if not isinstance(name, str) or not name:
        _malformed(f"content[{index}] tool_use has no string 'name'")
    if raw is None:
        if not isinstance(given, dict):
            _malformed(f"content[{index}] tool_use 'input' is not an object")
        raw = dumps_arguments(given)
    arguments, error = parse_arguments(raw)
    return ProposedCall(
        call_id=call_id, name=name, raw_arguments=raw, arguments=arguments, argument_error=error
    )


def _refusal_detail(details: Any) -> str:
    if not isinstance(details, dict):
        return "the model refused"
    category, explanation = details.get("category"), details.get("explanation")
    words = "the model refused"
    if isinstance(category, str):
        words += f" (category {category})"
    if isinstance(explanation, str) and explanation:
        words += f": {explanation[:300]}"
    return words
