"""Anthropic Messages event streams, read on the shared assembler (``_stream``).

``message_start`` gives the message shell; each ``content_block_start`` opens a block at its
``index`` (a ``tool_use`` block's id and name come only from there, its ``input`` is ``{}``);
``content_block_delta`` fragments (``text_delta``, ``input_json_delta``, ``thinking_delta``,
and a ``compaction`` block's ``compaction_delta`` summary ``content``) are assembled per index
under the byte cap, ``signature_delta``, ``citations_delta`` and a compaction's latest
``encrypted_content`` are set as they come; ``content_block_stop`` closes the block, and only
then is a call's ``partial_json`` parsed (an empty one is ``{}``; the parsed object
*replaces* the start ``input``). ``message_delta`` carries the stop reason; ``message_stop``
ends the answer, which is then parsed exactly like a non-streamed message. ``ping`` may come
anywhere. An ``error`` event fails the turn by its ``error.type`` (``overloaded_error`` is
retryable) even though the HTTP status was 200. A ``tool_use`` block never closed
(``max_tokens`` can skip its ``content_block_stop``) is a cut call: never executed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolloop_cli.engine.types import JSONObject, ModelTurn, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

from ._errors import ANTHROPIC, classify_stream_error
from ._json import parse_arguments
from ._stream import EventSink, Fragments, dumps_arguments, truncated

__all__ = ["AnthropicStream"]

_PROVIDER = "anthropic"
_JSON_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
#: delta type → the delta field that holds its text fragment
_DELTAS: dict[str, str] = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}
#: block type → the delta types that may build it; a delta of another type on one of these
#: blocks is a broken stream (a text or thinking fragment must never become a call's input)
_BLOCK_DELTAS: dict[str, frozenset[str]] = {
    "text": frozenset({"text_delta", "citations_delta"}),
    "thinking": frozenset({"thinking_delta", "signature_delta"}),
    "redacted_thinking": frozenset(),
    "compaction": frozenset({"compaction_delta"}),
    **{kind: frozenset({"input_json_delta"}) for kind in _JSON_BLOCKS},
}
#: stop reasons that end a message whose last call may be cut short: nothing of it runs
#: (a truncation is INCOMPLETE, a refusal REFUSED), so an open tool_use is no broken stream
_CALLS_NEVER_RUN = frozenset({"max_tokens", "model_context_window_exceeded", "refusal"})
#: block type → the block field its streamed text is assembled into
_TEXT_FIELDS: dict[str, str] = {"text": "text", "thinking": "thinking", "compaction": "content"}

ParseMessage = Callable[[Any, Mapping[int, str] | None], ModelTurn]


#: the events that build a message (``ping`` and ``error`` are not among them)
_MESSAGE_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)


def _malformed(reason: str) -> MalformedProviderPayload:
    return MalformedProviderPayload(f"anthropic messages stream: {reason}", provider=_PROVIDER)


def _index(data: JSONObject) -> int:
    index = data.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _malformed(f"{data.get('type')} without an integer 'index'")
    return index


def _merge_usage(message: JSONObject, usage: Any) -> None:
    """Add ``message_delta`` counts to the ``message_start`` ones. A null count says nothing,
    so it never erases a reported one; the counts themselves are checked when parsed."""
    if usage is None:
        return
    given = message.get("usage")
    if not isinstance(usage, dict) or not isinstance(given, dict | None):
        raise _malformed("usage is not an object")
    merged = dict(given or {})
    merged.update((key, value) for key, value in usage.items() if value is not None)
    message["usage"] = merged


class AnthropicStream:
    """A ``StreamHandler`` for one Messages stream."""

    def __init__(self, parse_message: ParseMessage, on_event: EventSink) -> None:
        self.parse_message = parse_message
        self.on_event = on_event
        self.fragments = Fragments(_PROVIDER)
        self.message: JSONObject | None = None
        self.blocks: dict[int, JSONObject] = {}
        self.raw_inputs: dict[int, str] = {}
        #: blocks given text, at their start or in deltas (a compaction given none keeps its
        #: null summary)
        self.given_text: set[int] = set()

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        match data.get("type"):
            case "message_start":
                message = data.get("message")
                if not isinstance(message, dict) or self.message is not None:
                    raise _malformed("message_start without a message, or twice")
                self.message = dict(message)
            case "content_block_start":
                self._start(_index(data), data.get("content_block"))
            case "content_block_delta":
                self._delta(_index(data), data.get("delta"))
            case "content_block_stop":
                self._stop(_index(data))
            case "message_delta":
                self._message_delta(data)
            case "message_stop":
                return self._finish()
            case "error":
                error = classify_stream_error(ANTHROPIC, data.get("error"))
                return ModelTurn(
                    outcome=TurnOutcome.API_FAILURE,
                    finish_reason="error",
                    error=error,
                    detail=f"error event in the stream: {error.type or 'no type'}",
                )
            case _:
                pass  # ping, [DONE], and event types newer than this adapter
        return None

    def _start(self, index: int, block: Any) -> None:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _malformed("content_block_start without a typed content_block")
        if index in self.blocks:
            raise _malformed(f"content block {index} started twice")
        self.blocks[index] = dict(block)
        self.fragments.open(index)
        key = _TEXT_FIELDS.get(block["type"])
        if key is not None and isinstance(block.get(key), str) and block[key]:
            self.fragments.add(index, block[key])
            self.given_text.add(index)
        if block["type"] == "tool_use":
            self.on_event(
                "call_streaming", {"call_id": str(block.get("id")), "name": str(block.get("name"))}
            )

    def _delta(self, index: int, delta: Any) -> None:
        block = self.blocks.get(index)
        if block is None or not isinstance(delta, dict):
            raise _malformed(f"content_block_delta for block {index}, which never started")
        kind = delta.get("type")
        allowed = _BLOCK_DELTAS.get(block["type"])
        if allowed is not None and kind not in allowed:
            raise _malformed(f"{kind!r} delta for block {index} of type {block['type']!r}")
        match kind:
            case "signature_delta":
                block["signature"] = delta.get("signature")
            case "citations_delta":
                if not isinstance(block.get("citations"), list):  # absent, or null
                    block["citations"] = []
                block["citations"].append(delta.get("citation"))
            case "compaction_delta":
                self._compaction_delta(index, block, delta)
            case str() if kind in _DELTAS:
                text = delta.get(_DELTAS[kind])
                if not isinstance(text, str):
                    raise _malformed(f"{kind} without a string '{_DELTAS[kind]}'")
                self.fragments.add(index, text)
            case _:
                raise _malformed(f"content_block_delta of unsupported type {kind!r}")

    def _compaction_delta(self, index: int, block: JSONObject, delta: JSONObject) -> None:
        """A compaction summary: its ``content`` text (null says nothing) and its opaque
        ``encrypted_content``, which the next request must carry back as the latest one."""
        if block["type"] != "compaction":
            raise _malformed(f"compaction_delta for block {index} of type {block['type']!r}")
        text, sealed = delta.get("content"), delta.get("encrypted_content")
        if not isinstance(text, str | None) or not isinstance(sealed, str | None):
            raise _malformed(
                "compaction_delta with a 'content' or 'encrypted_content' not a string"
            )
        if text is not None:
            self.fragments.add(index, text)
            self.given_text.add(index)
        if sealed is not None:
            block["encrypted_content"] = sealed

    def _stop(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None:
            raise _malformed(f"content_block_stop for block {index}, which never started")
        self._settle(index, block, self.fragments.close(index))

    def _settle(self, index: int, block: JSONObject, text: str) -> None:
        """Put a block's assembled text where it belongs; parse a call's input once, whole."""
        kind = block["type"]
        if kind in _JSON_BLOCKS:
            given = block.get("input")
            raw = (
                text if text.strip() else dumps_arguments(given if isinstance(given, dict) else {})
            )
            arguments, _ = parse_arguments(raw)
            block["input"] = arguments if arguments is not None else {}
            self.raw_inputs[index] = raw
        elif kind in ("text", "thinking"):
            block[kind] = text
        elif kind == "compaction" and index in self.given_text:
            block["content"] = text

    def _message_delta(self, data: JSONObject) -> None:
        if self.message is None:
            raise _malformed("message_delta before message_start")
        delta = data.get("delta")
        if isinstance(delta, dict):
            for key in ("stop_reason", "stop_sequence", "stop_details"):
                if key in delta:
                    self.message[key] = delta[key]
        _merge_usage(self.message, data.get("usage"))

    def _finish(self) -> ModelTurn:
        if self.message is None:
            raise _malformed("message_stop before message_start")
        unclosed = [i for i in sorted(self.blocks) if self.fragments.is_open(i)]
        for index in unclosed:
            self._settle(index, self.blocks[index], self.fragments.close(index))
        calls = [i for i in unclosed if self.blocks[i]["type"] == "tool_use"]
        if calls and self.message.get("stop_reason") not in _CALLS_NEVER_RUN:
            return self.cut("stream_incomplete", "a tool_use block was never closed")
        message = {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
        return self.parse_message(message, self.raw_inputs)

    def after_end(self, name: str | None, data: JSONObject) -> None:
        """Nothing of the message may follow ``message_stop`` (a ``ping`` may): a block or a
        delta after it means the events came out of order, so the end they reached (and the
        calls it holds) cannot be trusted."""
        kind = data.get("type")
        if kind in _MESSAGE_EVENTS:
            raise _malformed(f"{kind} after message_stop: the events are out of order")

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        calls = [
            f"{b.get('id')} ({b.get('name')})"
            for _, b in sorted(self.blocks.items())
            if b.get("type") == "tool_use"
        ]
        if calls:
            detail += f"; call {', '.join(calls)} was cut mid-stream and never executed"
        message_id = self.message.get("id") if self.message is not None else None
        return truncated(
            finish_reason,
            detail + "; no call will run",
            response_id=message_id if isinstance(message_id, str) else None,
        )
