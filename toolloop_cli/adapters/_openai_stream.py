"""OpenAI Responses event streams, read on the shared assembler (``_stream``).

Keying: ``response.output_item.added`` opens an item at its ``output_index`` (a function call's
``call_id`` and ``name`` come only from there); argument deltas carry ``output_index`` and
``item_id`` but never the call id, so either finds the item. A call's arguments are complete at
``response.function_call_arguments.done`` or ``response.output_item.done``; the terminal event
(``response.completed|incomplete|failed``) carries the whole response, which is what is parsed,
exactly as a non-streamed answer would be. A terminal response whose ``output`` is empty (some
proxies drop it) is filled with the items the stream completed. An ``error`` event, or any
event with a top-level ``error``, fails the turn by its code even though HTTP said 200.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolloop_cli.engine.types import JSONObject, ModelTurn, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

from ._errors import OPENAI, classify_stream_error
from ._stream import EventSink, Fragments, truncated

__all__ = ["OpenAIStream"]

_PROVIDER = "openai"
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: Text-like deltas: counted against the fragment cap, assembled by ``output_item.done``.
_TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
    }
)


def _malformed(reason: str) -> MalformedProviderPayload:
    return MalformedProviderPayload(f"openai responses stream: {reason}", provider=_PROVIDER)


class OpenAIStream:
    """A ``StreamHandler`` for one Responses stream."""

    def __init__(self, parse_body: Callable[[Any], ModelTurn], on_event: EventSink) -> None:
        self.parse_body = parse_body
        self.on_event = on_event
        self.fragments = Fragments(_PROVIDER)
        self.items: dict[int, JSONObject] = {}
        self.done: set[int] = set()
        self.by_item_id: dict[str, int] = {}

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        kind = data.get("type")
        if isinstance(kind, str) and kind in _TERMINAL:
            return self._terminal(data)
        if kind == "error" or "error" in data:
            nested = data.get("error")
            error = classify_stream_error(OPENAI, nested if isinstance(nested, dict) else data)
            return ModelTurn(
                outcome=TurnOutcome.API_FAILURE,
                finish_reason="error",
                error=error,
                detail=f"error event in the stream: {error.code or error.type or 'no code'}",
            )
        match kind:
            case "response.output_item.added":
                self._added(data)
            case "response.function_call_arguments.delta":
                delta = data.get("delta")
                if not isinstance(delta, str):
                    raise _malformed("arguments delta without a string 'delta'")
                self.fragments.add(self._index(data), delta)
            case "response.function_call_arguments.done":
                self._arguments_done(self._index(data), data.get("arguments"))
            case "response.output_item.done":
                self._item_done(data)
            case str() if kind in _TEXT_DELTAS:
                delta = data.get("delta")
                self.fragments.count(delta if isinstance(delta, str) else "")
            case _:
                pass  # created, in_progress, content_part.*, *.done text events, [DONE]
        return None

    def _index(self, data: JSONObject) -> int:
        index = data.get("output_index")
        if isinstance(index, int) and not isinstance(index, bool) and index in self.items:
            return index
        item_id = data.get("item_id")
        if isinstance(item_id, str) and item_id in self.by_item_id:
            return self.by_item_id[item_id]
        raise _malformed("an event for an output item that was never added")

    def _added(self, data: JSONObject) -> None:
        index, item = data.get("output_index"), data.get("item")
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(item, dict):
            raise _malformed("output_item.added without an integer output_index and an item")
        if index in self.items:
            raise _malformed(f"output_index {index} added twice")
        self.items[index] = dict(item)
        if isinstance(item.get("id"), str):
            self.by_item_id[item["id"]] = index
        if item.get("type") == "function_call":
            self.fragments.open(index)
            self.on_event(
                "call_streaming",
                {"call_id": str(item.get("call_id")), "name": str(item.get("name"))},
            )

    def _arguments_done(self, index: int, arguments: Any) -> None:
        if not self.fragments.is_open(index):
            return
        joined = self.fragments.close(index)
        self.items[index]["arguments"] = arguments if isinstance(arguments, str) else joined

    def _item_done(self, data: JSONObject) -> None:
        index, item = data.get("output_index"), data.get("item")
        if not isinstance(index, int) or index not in self.items or not isinstance(item, dict):
            raise _malformed("output_item.done for an item that was never added")
        if self.fragments.is_open(index):
            self.fragments.close(index)
        self.items[index] = dict(item)
        self.done.add(index)

    def _terminal(self, data: JSONObject) -> ModelTurn:
        response = data.get("response")
        if isinstance(response, dict) and response.get("output") == [] and self.done:
            response = {**response, "output": [self.items[i] for i in sorted(self.done)]}
        return self.parse_body(response)

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        unfinished = [
            f"{item.get('call_id')} ({item.get('name')})"
            for index, item in sorted(self.items.items())
            if item.get("type") == "function_call" and index not in self.done
        ]
        if unfinished:
            detail += f"; call {', '.join(unfinished)} was cut mid-stream and never executed"
        return truncated(finish_reason, detail + "; no call will run")
