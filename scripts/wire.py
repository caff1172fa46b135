"""Provider wire answers, rendered from one neutral scripted turn.

Every generator here scripts what the model says in neutral terms — a ``Turn`` of texts and
tool calls with its finish reason, token usage and ids — and renders it in the wire shape of
the API it records: OpenAI Responses, Anthropic Messages, Gemini Interactions and Gemini
generateContent, as a JSON answer and as an event stream. The shapes follow the providers'
SDK types and real recordings (docs/wire-formats.md); they live here so that a shape is
written once for the refund transcripts, the branches and the per-outcome fixtures alike.

``*_stream`` renders the whole event stream of a complete answer. The fixtures also need broken
streams (cut mid-call, an error event mid-way), so the event builders those are made of are
public too. Nothing here reads the clock or a random source: the same turn renders the same
bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: API (as given to ``--provider``) → the model its recordings name
MODELS = {
    "openai": "gpt-4.1-2025-04-14",
    "anthropic": "claude-sonnet-4-5-20250929",
    "gemini": "gemini-3-flash-preview",
    "gemini-generate": "gemini-2.5-flash",
}
JSON = "application/json"
#: API → (JSON answer, event stream) content types, as the providers send them
CONTENT_TYPES = {
    "openai": (JSON, "text/event-stream; charset=utf-8"),
    "anthropic": (JSON, "text/event-stream; charset=utf-8"),
    "gemini": ("application/json; charset=UTF-8", "text/event-stream"),
    "gemini-generate": ("application/json; charset=UTF-8", "text/event-stream"),
}
_REQUEST_ID = {"openai": "x-request-id", "anthropic": "request-id"}

Event = dict[str, Any]


@dataclass(frozen=True)
class Text:
    """Text the model says."""

    text: str
    id: str = ""  # the OpenAI message item id


@dataclass(frozen=True)
class Call:
    """A tool call; ``cut``: stopped by the output-token limit, ``arguments`` got out before."""

    name: str
    arguments: dict[str, Any]
    id: str = ""  # OpenAI call_id, Anthropic tool_use id, Interactions step id
    item_id: str = ""  # the OpenAI function_call item id
    cut: bool = False


Part = Text | Call


@dataclass(frozen=True)
class Usage:
    """Token counts; ``detailed=False`` keeps only the counts the adapters read."""

    input_tokens: int
    output_tokens: int
    detailed: bool = True


@dataclass(frozen=True)
class Turn:
    """One model answer in neutral terms.

    ``finish`` is the API's own stop reason or status; ``None`` derives it from the parts (a
    cut call, tool calls, or text only). ``signature`` is Gemini's thought signature. ``extra``
    holds API-specific fields, merged after the rendered ones (for generateContent into the
    candidate); a key already rendered keeps its place and takes the new value.
    """

    id: str
    parts: Sequence[Part]
    usage: Usage
    finish: str | None = None
    created: datetime | None = None
    signature: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> list[Call]:
        return [part for part in self.parts if isinstance(part, Call)]

    @property
    def cut(self) -> bool:
        return any(call.cut for call in self.calls)


# -- text helpers -------------------------------------------------------------------------------


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pieces(text: str, n: int = 3) -> list[str]:
    """``text`` in ``n`` fragments, as a provider streams it."""
    step = max(1, -(-len(text) // n))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def token(seed: str, size: int, alphabet: str = "") -> str:
    """A deterministic id body of ``size`` characters."""
    digest = b"".join(hashlib.sha256(f"{seed}/{i}".encode()).digest() for i in range(4))
    chars = alphabet or "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(chars[b % len(chars)] for b in digest[:size])


def sse(events: Sequence[tuple[str | None, Event]], end: str = "\n\n") -> str:
    """Server-sent events: an optional ``event:`` line, one compact ``data:`` line each."""
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {compact(data)}{end}")
    return "".join(out)


def headers(api: str, stream: bool = False, request_id: str | None = None) -> dict[str, str]:
    """The answer's content type, and the API's request-id header when one is given."""
    out = {"content-type": CONTENT_TYPES[api][stream]}
    if request_id is not None:
        out[_REQUEST_ID[api]] = request_id
    return out


# -- OpenAI Responses ---------------------------------------------------------------------------


def openai_response(
    turn: Turn, request: Mapping[str, Any], model: str = MODELS["openai"]
) -> dict[str, Any]:
    """The Response object; ``request`` is the request body, whose settings it echoes."""
    if turn.created is None:
        raise ValueError("an OpenAI response needs turn.created")
    usage = turn.usage
    return {
        "id": turn.id,
        "object": "response",
        "created_at": int(turn.created.timestamp()),
        "status": turn.finish or ("incomplete" if turn.cut else "completed"),
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if turn.cut else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": [_openai_item(part) for part in turn.parts],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": request.get("tools", []),
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
        "metadata": {},
        **turn.extra,
    }


def _openai_item(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        text = {"annotations": [], "logprobs": [], "text": part.text, "type": "output_text"}
        return {
            "content": [text],
            "id": part.id,
            "role": "assistant",
            "status": "completed",
            "type": "message",
        }
    arguments = compact(part.arguments)
    return {
        "arguments": arguments[: len(arguments) // 2] if part.cut else arguments,
        "call_id": part.id,
        "id": part.item_id,
        "name": part.name,
        "status": "incomplete" if part.cut else "completed",
        "type": "function_call",
    }


def openai_stream(response: dict[str, Any]) -> str:
    """The event stream of a Response object, item by item, with sequence numbers."""
    seq = iter(range(1_000_000))
    events: list[tuple[str | None, Event]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    shell = {**response, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=shell)
    emit("response.in_progress", response=shell)
    for index, item in enumerate(response["output"]):
        if item["type"] == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=added)
            where = {"item_id": item["id"], "output_index": index}
            for delta in pieces(item["arguments"]):
                emit(
                    "response.function_call_arguments.delta",
                    **where,
                    delta=delta,
                    obfuscation=token(delta, 6),
                )
            emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            added = {**item, "content": [], "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=added)
            for part_index, part in enumerate(item["content"]):
                where = {"item_id": item["id"], "output_index": index, "content_index": part_index}
                emit("response.content_part.added", **where, part={**part, "text": ""})
                for delta in pieces(part["text"], 2):
                    emit("response.output_text.delta", **where, delta=delta, logprobs=[])
                emit("response.output_text.done", **where, text=part["text"], logprobs=[])
                emit("response.content_part.done", **where, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return sse(events)


# -- Anthropic Messages -------------------------------------------------------------------------


def anthropic_content(part: Part) -> dict[str, Any]:
    """A content block: ``text`` or ``tool_use``."""
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}


def anthropic_message(turn: Turn, model: str = MODELS["anthropic"]) -> dict[str, Any]:
    content = [anthropic_content(part) for part in turn.parts]
    sent, out = turn.usage.input_tokens, turn.usage.output_tokens
    usage: dict[str, Any] = {"input_tokens": sent, "output_tokens": out}
    if turn.usage.detailed:
        usage = {
            "input_tokens": sent,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": out,
            "service_tier": "standard",
        }
    stop = "max_tokens" if turn.cut else "tool_use" if turn.calls else "end_turn"
    return {
        "id": turn.id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.finish or stop,
        "stop_sequence": None,
        "usage": usage,
        **turn.extra,
    }


def anthropic_error(
    kind: str, message: str, request_id: str | None = None, details: Any = None
) -> dict[str, Any]:
    """An error body (HTTP ≥ 400, and the stream's ``error`` event)."""
    error: dict[str, Any] = {"type": kind, "message": message}
    if details is not None:
        error["details"] = details
    body: dict[str, Any] = {"type": "error", "error": error}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def anthropic_start(message: dict[str, Any], output_tokens: int | None = None) -> Event:
    """``message_start``: the message with no content and no stop reason yet."""
    usage = dict(message["usage"])
    if output_tokens is not None:
        usage["output_tokens"] = output_tokens
    shell = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    return {"type": "message_start", "message": shell}


def anthropic_block(
    index: int,
    block: dict[str, Any],
    raw: str | None = None,
    text_pieces: int = 1,
    empty_first: bool = False,
) -> list[Event]:
    """A content block's start and deltas; ``raw`` overrides the tool input's JSON text."""
    tool = block["type"] == "tool_use"
    opened = {**block, "input": {}} if tool else {**block, "text": ""}
    if tool:
        json_text = raw if raw is not None else compact(block["input"])
        parts = ([""] if empty_first else []) + pieces(json_text)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in parts]
    else:
        deltas = [{"type": "text_delta", "text": t} for t in pieces(block["text"], text_pieces)]
    return [
        {"type": "content_block_start", "index": index, "content_block": opened},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
    ]


def anthropic_block_stop(index: int) -> Event:
    return {"type": "content_block_stop", "index": index}


def anthropic_end(reason: str, output_tokens: int, **delta: Any) -> list[Event]:
    """``message_delta`` (stop reason, output tokens) and ``message_stop``."""
    body = {"stop_reason": reason, "stop_sequence": None, **delta}
    return [
        {"type": "message_delta", "delta": body, "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    ]


def anthropic_sse(events: Sequence[Event]) -> str:
    return sse([(event["type"], event) for event in events])


def anthropic_stream(message: dict[str, Any]) -> str:
    """The event stream of a message, as the API sends it (a ping after the first block)."""
    events = [anthropic_start(message, output_tokens=1)]
    for index, block in enumerate(message["content"]):
        opened, *deltas = anthropic_block(index, block, text_pieces=2, empty_first=True)
        ping = [{"type": "ping"}] if index == 0 else []
        events += [opened, *ping, *deltas, anthropic_block_stop(index)]
    events += anthropic_end(message["stop_reason"], message["usage"]["output_tokens"])
    # real streams pad some JSON lines with spaces before the newline
    return anthropic_sse(events).replace(
        '"type":"content_block_stop","index":0}', '"type":"content_block_stop","index":0}       '
    )


# -- Gemini Interactions ------------------------------------------------------------------------


def interaction_step(part: Part) -> dict[str, Any]:
    """A ``model_output`` or ``function_call`` step."""
    if isinstance(part, Text):
        return {"type": "model_output", "content": [{"type": "text", "text": part.text}]}
    return {"type": "function_call", "id": part.id, "name": part.name, "arguments": part.arguments}


def interaction(turn: Turn, model: str = MODELS["gemini"]) -> dict[str, Any]:
    """An interaction; a thought step with the signature, if any, comes first."""
    thought = [] if turn.signature is None else [{"type": "thought", "signature": turn.signature}]
    status = "incomplete" if turn.cut else "requires_action" if turn.calls else "completed"
    body: dict[str, Any] = {
        "id": turn.id,
        "object": "interaction",
        "model": model,
        "status": turn.finish or status,
    }
    if turn.created is not None:
        body["created"] = body["updated"] = turn.created.strftime("%Y-%m-%dT%H:%M:%SZ")
    sent, out = turn.usage.input_tokens, turn.usage.output_tokens
    thinking = {"total_thought_tokens": 0} if turn.usage.detailed else {}
    usage = {"total_input_tokens": sent, "total_output_tokens": out, **thinking}
    return {
        **body,
        "steps": [*thought, *(interaction_step(part) for part in turn.parts)],
        "usage": {**usage, "total_tokens": sent + out},
        **turn.extra,
    }


def interaction_event(kind: str, **data: Any) -> Event:
    return {"event_type": kind, **data}


def interaction_created(answer: dict[str, Any]) -> Event:
    shell = {key: answer[key] for key in ("id", "object", "model")}
    return interaction_event("interaction.created", interaction={**shell, "status": "in_progress"})


def step_start(index: int, step: dict[str, Any]) -> Event:
    """``step.start``: the step with its streamed content still empty."""
    if step["type"] == "thought":
        opened: dict[str, Any] = {"type": "thought"}
    elif step["type"] == "model_output":
        opened = {"type": "model_output", "content": []}
    else:
        opened = {**step, "arguments": {}}
    return interaction_event("step.start", index=index, step=opened)


def step_delta(index: int, delta: dict[str, Any]) -> Event:
    return interaction_event("step.delta", index=index, delta=delta)


def arguments_delta(index: int, text: str) -> Event:
    return step_delta(index, {"type": "arguments_delta", "arguments": text})


def interactions_sse(events: Sequence[Event], done: bool = True) -> str:
    """Events named by ``event_type``; ``done`` ends the stream with the ``[DONE]`` sentinel."""
    body = sse([(event["event_type"], event) for event in events])
    return body + ("event: done\ndata: [DONE]\n\n" if done else "")


def interactions_stream(answer: dict[str, Any]) -> str:
    """The event stream of an interaction, step by step."""
    events = [
        interaction_created(answer),
        interaction_event(
            "interaction.status_update", interaction_id=answer["id"], status="in_progress"
        ),
    ]
    for index, step in enumerate(answer["steps"]):
        events.append(step_start(index, step))
        if step["type"] == "thought":
            delta = {"type": "thought_signature", "signature": step["signature"]}
            events.append(step_delta(index, delta))
        elif step["type"] == "model_output":
            for text in pieces(step["content"][0]["text"], 2):
                events.append(step_delta(index, {"type": "text", "text": text}))
        else:
            events += [arguments_delta(index, p) for p in pieces(compact(step["arguments"]))]
        events.append(interaction_event("step.stop", index=index))
    shell = {key: answer[key] for key in ("id", "object", "model")}
    done = {**shell, "status": answer["status"], "usage": answer["usage"]}
    events.append(interaction_event("interaction.completed", interaction=done))
    return interactions_sse(events)


def google_error(code: int, status: str, message: str, retry_delay: str | None = None) -> Event:
    """A Google API error body (both Gemini APIs), with a ``RetryInfo`` when delayed."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if retry_delay is not None:
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        error["details"] = [retry]
    return {"error": error}


# -- Gemini generateContent ---------------------------------------------------------------------


def generate_response(
    turn: Turn, model: str = MODELS["gemini-generate"], finish_after_index: bool = False
) -> dict[str, Any]:
    """A GenerateContentResponse with one candidate.

    The thought signature rides on the first function call. ``finish_after_index`` puts
    ``finishReason`` after ``index`` and the extra fields (the order the fixtures were written in).
    """
    parts: list[dict[str, Any]] = []
    signature = turn.signature
    for part in turn.parts:
        if isinstance(part, Text):
            parts.append({"text": part.text})
            continue
        rendered: dict[str, Any] = {"functionCall": {"name": part.name, "args": part.arguments}}
        if signature is not None:
            rendered["thoughtSignature"], signature = signature, None
        parts.append(rendered)
    finish = turn.finish or ("MAX_TOKENS" if turn.cut else "STOP")
    if finish_after_index:
        candidate = {**_candidate(parts, None), **turn.extra, "finishReason": finish}
    else:
        candidate = {**_candidate(parts, finish), **turn.extra}
    usage = turn.usage
    metadata: dict[str, Any] = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": usage.output_tokens,
        "totalTokenCount": usage.input_tokens + usage.output_tokens,
    }
    if usage.detailed:
        metadata["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": usage.input_tokens}]
    return {
        "candidates": [candidate],
        "usageMetadata": metadata,
        "modelVersion": model,
        "responseId": turn.id,
    }


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        body["finishReason"] = finish
    body["index"] = 0
    return body


def generate_chunk(
    answer: dict[str, Any], parts: list[dict[str, Any]] | None = None, finish: str | None = None
) -> dict[str, Any]:
    """One streamed chunk of ``answer``: ``parts`` (default: all of its parts), no finish reason
    unless given."""
    if parts is None:
        parts = answer["candidates"][0]["content"]["parts"]
    return {**answer, "candidates": [_candidate(parts, finish)]}


def generate_sse(chunks: Sequence[dict[str, Any]]) -> str:
    return sse([(None, chunk) for chunk in chunks], end="\r\n\r\n")


def generate_stream(answer: dict[str, Any]) -> str:
    """The ``alt=sse`` stream of an answer: texts in pieces, each call whole, then the finish."""
    candidate = answer["candidates"][0]
    chunks = []
    for part in candidate["content"]["parts"]:
        if "text" in part:
            chunks += [generate_chunk(answer, [{"text": t}]) for t in pieces(part["text"], 2)]
        else:
            chunks.append(generate_chunk(answer, [part]))
    chunks.append(generate_chunk(answer, [{"text": ""}], candidate["finishReason"]))
    return generate_sse(chunks)
