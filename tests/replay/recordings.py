"""Cassettes as other tools record them: each provider's real request and answer shapes.

Tests build a recording the way a client drives a model (a growing conversation, one request
per turn), in the wire format of the provider (JSON answers and event streams, as the APIs
send them), write it in vcrpy's cassette format and replay it with the CLI. Nothing here is
copied from another project's recordings: the shapes are rebuilt from the providers' APIs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from support.cli import Invoke, json_out

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
OPENAI = "https://api.openai.com/v1/responses"
ANTHROPIC = "https://api.anthropic.com/v1/messages"
INTERACTIONS = "https://generativelanguage.googleapis.com/v1beta/interactions"


def generate_uri(model: str = "gemini-2.5-flash", stream: str | None = None) -> str:
    """generateContent; ``stream``: ``"sse"`` (``?alt=sse``) or ``"json"`` (a JSON array)."""
    base = f"https://generativelanguage.googleapis.com/v1beta/models/{model}"
    if stream is None:
        return f"{base}:generateContent"
    return f"{base}:streamGenerateContent" + ("?alt=sse" if stream == "sse" else "")


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def exchange(
    uri: str,
    body: dict[str, Any] | None,
    answer: Any,
    *,
    status: int = 200,
    content_type: str | None = JSON,
    method: str = "POST",
    extra_headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One cassette interaction; ``answer`` is a JSON value or event-stream text."""
    text = answer if isinstance(answer, str) else compact(answer)
    headers = {"content-type": [content_type]} if content_type else {}
    headers.update({k: [v] for k, v in (extra_headers or {}).items()})
    request: dict[str, Any] = {
        "method": method,
        "uri": uri,
        "headers": {"content-type": [JSON]} if body is not None else {},
        "body": compact(body) if body is not None else None,
    }
    return {
        "request": request,
        "response": {
            "status": {"code": status, "message": "OK" if status == 200 else "Error"},
            "headers": headers,
            "body": {"string": text},
        },
    }


def write(tmp_path: Path, interactions: Sequence[dict[str, Any]], name: str = "c.yaml") -> Path:
    path = tmp_path / name
    # a copy through JSON: shared objects would be written as YAML aliases, which are refused
    document = json.loads(json.dumps({"interactions": list(interactions), "version": 1}))
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path


def replay(cli: Invoke, path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``toolloop replay PATH --results recorded --json``: the exit code and the JSON."""
    result = cli("replay", str(path), "--results", "recorded", "--json", *extra)
    return result.exit_code, json_out(result)


def calls(out: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(name, state, result payload) of every call of the first operation."""
    found = []
    for call in out["calls"]:
        result = call["result"] or {}
        payload = result.get("result") if result.get("ok") else result.get("error")
        found.append((call["name"], call["state"], payload))
    return found


def sse(events: Sequence[tuple[str | None, dict[str, Any]]]) -> str:
    return "".join(
        (f"event: {name}\n" if name else "") + f"data: {compact(data)}\n\n" for name, data in events
    )


# -- OpenAI Responses ---------------------------------------------------------------------------


def oa_call(
    call_id: str, name: str, arguments: dict[str, Any], item_id: str = ""
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id or f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": compact(arguments),
        "status": "completed",
    }


def oa_text(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def oa_output(call_id: str, output: Any) -> dict[str, Any]:
    text = output if isinstance(output, str) else compact(output)
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def oa_response(
    response_id: str, output: list[dict[str, Any]], status: str = "completed", **extra: Any
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
        **extra,
    }


#: call item type → the field whose text streams in pieces, and its events' prefix
STREAMED_CALLS = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}


def oa_stream(response: dict[str, Any]) -> str:
    """The event stream of a Response: items added, argument and text deltas, done, completed."""
    seq = iter(range(10_000))
    events: list[tuple[str | None, dict[str, Any]]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    shell = {**response, "status": "in_progress", "output": []}
    emit("response.created", response=shell)
    emit("response.in_progress", response=shell)
    for index, item in enumerate(response["output"]):
        if item["type"] in STREAMED_CALLS:
            field, prefix = STREAMED_CALLS[item["type"]]
            emit("response.output_item.added", output_index=index, item={**item, field: ""})
            half = len(item[field]) // 2
            for delta in (item[field][:half], item[field][half:]):
                emit(f"{prefix}.delta", item_id=item["id"], output_index=index, delta=delta)
            emit(f"{prefix}.done", item_id=item["id"], output_index=index, **{field: item[field]})
        elif item["type"] == "message":
            emit("response.output_item.added", output_index=index, item={**item, "content": []})
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.output_text.delta", **where, delta=text)
            emit("response.output_text.done", **where, text=text)
        else:  # tool_search_call and the like: added empty, done whole
            opened = {**item, "status": "in_progress", "arguments": {}}
            emit("response.output_item.added", output_index=index, item=opened)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return sse(events)


# -- Anthropic Messages -------------------------------------------------------------------------


def an_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def an_use(tool_use_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": arguments}


def an_result(tool_use_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content,
        "is_error": is_error,
    }


def an_message(message_id: str, content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 12},
    }


def an_stream(message: dict[str, Any]) -> str:
    """The event stream of a message: start, each block's start, deltas, stop, then the end."""
    start = {**message, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opened = {**block, "input": {}}
            text = compact(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ("", text)]
        elif block["type"] == "text":
            opened = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            opened, deltas = block, []
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 12}})
    events.append({"type": "message_stop"})
    return sse([(event["type"], event) for event in events])


# -- Gemini generateContent ---------------------------------------------------------------------


def gg_call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": arguments}
    if call_id is not None:
        call["id"] = call_id
    return {"functionCall": call}


def gg_response(
    response_id: str, parts: list[dict[str, Any]], finish: str = "STOP", **candidate: Any
) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": parts, "role": "model"},
                "finishReason": finish,
                "index": 0,
                **candidate,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 30,
            "candidatesTokenCount": 8,
            "totalTokenCount": 38,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": response_id,
    }


def gg_chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks a stream of ``answer`` sends: one per part, the finish reason on the last."""
    candidate = answer["candidates"][0]
    chunks = []
    parts = candidate["content"]["parts"]
    for index, part in enumerate(parts):
        body: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if index == len(parts) - 1:
            body["finishReason"] = candidate["finishReason"]
        chunks.append({**answer, "candidates": [body]})
    return chunks


def gg_stream(answer: dict[str, Any]) -> str:
    return "".join(f"data: {compact(chunk)}\r\n\r\n" for chunk in gg_chunks(answer))


# -- Gemini Interactions ------------------------------------------------------------------------


def gi_answer(interaction_id: str, steps: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": interaction_id,
        "object": "interaction",
        "model": "gemini-3-flash-preview",
        "status": status,
        "steps": steps,
        "usage": {"total_input_tokens": 20, "total_output_tokens": 5, "total_tokens": 25},
    }


def gi_stream(answer: dict[str, Any]) -> str:
    shell = {k: answer[k] for k in ("id", "object", "model")}
    events: list[dict[str, Any]] = [
        {"event_type": "interaction.created", "interaction": {**shell, "status": "in_progress"}}
    ]
    for index, step in enumerate(answer["steps"]):
        if step["type"] == "function_call":
            opened = {**step, "arguments": {}}
            delta = {"type": "arguments_delta", "arguments": compact(step["arguments"])}
        else:
            opened = {"type": step["type"], "content": []}
            delta = {"type": "text", "text": step["content"][0]["text"]}
        events.append({"event_type": "step.start", "index": index, "step": opened})
        events.append({"event_type": "step.delta", "index": index, "delta": delta})
        events.append({"event_type": "step.stop", "index": index})
    done = {**shell, "status": answer["status"], "usage": answer["usage"]}
    events.append({"event_type": "interaction.completed", "interaction": done})
    return sse([(e["event_type"], e) for e in events]) + "event: done\ndata: [DONE]\n\n"
