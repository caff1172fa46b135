"""OpenAI Responses event streams, read on the shared assembler (``_stream``).

Keying: ``response.output_item.added`` opens an item at its ``output_index`` (a function call's
``call_id`` and ``name`` come from there); argument deltas carry ``output_index`` and
``item_id`` but never the call id, so either finds the item (given both, they must agree). A
custom tool's call (``custom_tool_call``) streams its free-text ``input`` the same way
(``response.custom_tool_call_input.delta`` and ``.done``).

The streamed pieces are the source of a call's arguments, as for the other providers: the
deltas are assembled per output index under the byte cap and settled by the call's first done
event (``response.function_call_arguments.done``, ``response.custom_tool_call_input.done`` or
``response.output_item.done``). Every statement of the call after that (the other done
event, and the terminal event's snapshot:
``response.completed|incomplete|failed`` carries the whole response) must give the same
arguments, and never another type, call id or name for the same output index; otherwise the
stream contradicts itself and is a malformed payload: nothing in it runs. Item ids only find
the item a statement speaks of (a snapshot item is matched by id, else by its place): real
proxies (OpenRouter) hand out fresh ids in the final response.

A statement may leave things out: a snapshot without ``output`` items or without a call's
arguments is filled from what the stream assembled. An item only the snapshot holds (the stream
never added it) is taken from the snapshot. A call the stream added but never finished may be
finished by the snapshot only where its arguments continue the streamed pieces; one that
nobody finished cuts a completed turn. Nothing but ``[DONE]`` may follow the terminal event: a
``response.*`` event after it means the events came out of order.

The response so reconciled is parsed exactly as a non-streamed answer would be. An ``error``
event, or any event with a top-level ``error``, fails the turn by its code even though HTTP
said 200.
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
#: the status a terminal event that is no completion states for its response
_ENDED_BY = {"response.incomplete": "incomplete", "response.failed": "failed"}
#: Text-like deltas: counted against the fragment cap, assembled by ``output_item.done``.
_TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
    }
)
#: What names a call: a later statement of it may leave these out, never change them. Item ids
#: are only used to find an item: some proxies give the final response fresh ones.
_IDENTITY = ("type", "call_id", "name")
#: call item type → the field its streamed text is: a function's arguments, a custom tool's input
_STREAMED_TEXT = {"function_call": "arguments", "custom_tool_call": "input"}


def _malformed(reason: str) -> MalformedProviderPayload:
    return MalformedProviderPayload(f"openai responses stream: {reason}", provider=_PROVIDER)


def _contradiction(index: int, what: str) -> MalformedProviderPayload:
    return _malformed(f"output_index {index}: {what}; the stream contradicts itself")


def _output_index(data: JSONObject) -> int | None:
    index = data.get("output_index")
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _client_tool_search(item: JSONObject) -> bool:
    """A tool search the client runs: a call whose arguments come whole in its done item."""
    return item.get("type") == "tool_search_call" and item.get("execution") == "client"


def _text_field(item: JSONObject) -> str | None:
    """The field of a call item whose text streams in pieces (None: not such a call)."""
    kind = item.get("type")
    return _STREAMED_TEXT.get(kind) if isinstance(kind, str) else None


def _is_call(item: JSONObject) -> bool:
    return _text_field(item) is not None or _client_tool_search(item)


class OpenAIStream:
    """A ``StreamHandler`` for one Responses stream."""

    def __init__(self, parse_body: Callable[[Any], ModelTurn], on_event: EventSink) -> None:
        self.parse_body = parse_body
        self.on_event = on_event
        self.fragments = Fragments(_PROVIDER)
        self.items: dict[int, JSONObject] = {}  # the latest statement of each item
        self.done: set[int] = set()  # indexes an output_item.done closed
        self.by_item_id: dict[str, int] = {}
        self.arguments: dict[int, str] = {}  # a call's arguments, settled from its pieces

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        kind = data.get("type")
        if isinstance(kind, str) and kind in _TERMINAL:
            return self._terminal(kind, data.get("response"))
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
            case "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta":
                delta = data.get("delta")
                if not isinstance(delta, str):
                    raise _malformed("arguments delta without a string 'delta'")
                self.fragments.add(self._index(data), delta)
            case "response.function_call_arguments.done":
                index = self._index(data)
                where = "function_call_arguments.done"
                self._agree(index, {"name": data.get("name")}, where)
                self._settle(index, data.get("arguments"), where)
            case "response.custom_tool_call_input.done":
                self._settle(self._index(data), data.get("input"), "custom_tool_call_input.done")
            case "response.output_item.done":
                self._item_done(data)
            case str() if kind in _TEXT_DELTAS:
                delta = data.get("delta")
                self.fragments.count(delta if isinstance(delta, str) else "")
            case _:
                pass  # created, in_progress, content_part.*, *.done text events, [DONE]
        return None

    def after_end(self, name: str | None, data: JSONObject) -> None:
        """Only ``[DONE]`` may follow the terminal event; another ``response.*`` event means
        the events came out of order, so the end they reached cannot be trusted."""
        kind = data.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            raise _malformed(f"{kind} after the terminal event: the events are out of order")

    def _index(self, data: JSONObject) -> int:
        index = _output_index(data)
        item_id = data.get("item_id")
        by_id = self.by_item_id.get(item_id) if isinstance(item_id, str) else None
        if index is not None and index in self.items:
            if by_id is not None and by_id != index:
                raise _contradiction(index, f"an event names the item at output_index {by_id}")
            return index
        if by_id is not None:
            return by_id
        raise _malformed("an event for an output item that was never added")

    def _added(self, data: JSONObject) -> None:
        index, item = _output_index(data), data.get("item")
        if index is None or not isinstance(item, dict):
            raise _malformed("output_item.added without an integer output_index and an item")
        if index in self.items:
            raise _malformed(f"output_index {index} added twice")
        self.items[index] = dict(item)
        if isinstance(item.get("id"), str):
            self.by_item_id[item["id"]] = index
        if _text_field(item) is not None:
            self.fragments.open(index)
            self.on_event(
                "call_streaming",
                {"call_id": str(item.get("call_id")), "name": str(item.get("name"))},
            )

    def _item_done(self, data: JSONObject) -> None:
        index, item = _output_index(data), data.get("item")
        if index is None or index not in self.items or not isinstance(item, dict):
            raise _malformed("output_item.done for an item that was never added")
        self._agree(index, item, "output_item.done")
        field = _text_field(self.items[index])
        if field is not None:
            self._settle(index, item.get(field), "output_item.done")
            item = {**item, field: self.arguments[index]}
        self.items[index] = dict(item)
        self.done.add(index)

    def _agree(self, index: int, statement: JSONObject, where: str) -> None:
        """A later statement of a call may leave out what names it, never change it (other
        items, reasoning and messages, run nothing and are carried as the response says)."""
        known = self.items[index]
        if not _is_call(known) and not _is_call(statement):
            return
        for key in _IDENTITY:
            said, had = statement.get(key), known.get(key)
            if said is not None and had is not None and said != had:
                raise _contradiction(index, f"{where} gives another {key} than the stream")

    def _settle(self, index: int, stated: Any, where: str) -> None:
        """At a call's first done event its arguments are the assembled pieces; that event and
        every later one may leave the arguments out, or state exactly that text."""
        if index not in self.arguments:
            self.arguments[index] = self.fragments.close(index)
        if stated is not None and stated != self.arguments[index]:
            raise _contradiction(index, f"{where} states other arguments than the streamed pieces")

    def _terminal(self, kind: str, response: Any) -> ModelTurn:
        """Parse the terminal response once its output agrees with what the stream said.

        ``response.incomplete`` and ``response.failed`` end a stream that did not complete:
        a response in them that says ``completed`` contradicts the event, and nothing of it
        may run on the strength of its status."""
        ended = _ENDED_BY.get(kind)
        status = response.get("status") if isinstance(response, dict) else None
        if ended is not None and status != ended:
            raise _malformed(
                f"{kind} carries a response whose status is {status!r}; the stream"
                " contradicts itself"
            )
        output = response.get("output") if isinstance(response, dict) else None
        if isinstance(response, dict) and (output is None or isinstance(output, list)):
            response = {**response, "output": self._reconcile(output or [])}
            unfinished = self._unfinished_calls()
            if unfinished and kind == "response.completed":
                where = ", ".join(map(str, unfinished))
                return self.cut("stream_incomplete", f"no done event for output_index {where}")
        return self.parse_body(response)

    def _reconcile(self, snapshot: list[Any]) -> list[Any]:
        """The snapshot's items checked against the stream's, in output order; items the
        snapshot leaves out but the stream completed are put back."""
        placed: list[tuple[int, Any]] = []
        matched: set[int] = set()
        for position, item in enumerate(snapshot):
            index = self._counterpart(position, item)
            if index is None:
                placed.append((position, item))  # only the snapshot states it
                continue
            if index in matched:
                raise _contradiction(index, "the final response lists the item twice")
            matched.add(index)
            placed.append((index, self._checked(index, item)))
        left_out = (self.done | set(self.arguments)) - matched
        placed += [(index, self._streamed(index)) for index in sorted(left_out)]
        placed.sort(key=lambda entry: entry[0])
        return [item for _, item in placed]

    def _streamed(self, index: int) -> JSONObject:
        """An item as the stream left it; a call with its settled arguments."""
        item = self.items[index]
        field = _text_field(item)
        if index in self.arguments and field is not None:
            return {**item, field: self.arguments[index]}
        return item

    def _counterpart(self, position: int, item: Any) -> int | None:
        """The streamed output index a snapshot item speaks of: by item id, else by place."""
        item_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(item_id, str) and item_id in self.by_item_id:
            return self.by_item_id[item_id]
        return position if position in self.items else None

    def _checked(self, index: int, item: Any) -> Any:
        """The snapshot's statement of a streamed item, once it agrees with the stream."""
        if not isinstance(item, dict):
            return item  # the parser refuses it
        where = "the final response"
        self._agree(index, item, where)
        streamed = self.items[index]
        field = _text_field(streamed)
        if field is not None:
            self._finish_call(index, item.get(field))
            if index not in self.arguments:
                return item
            filled = {k: streamed[k] for k in _IDENTITY if item.get(k) is None and k in streamed}
            return {**item, **filled, field: self.arguments[index]}
        if index in self.done and _client_tool_search(streamed):
            stated, given = item.get("arguments"), streamed.get("arguments")
            if stated is None:
                return {**item, "arguments": given}
            if stated != given:
                raise _contradiction(index, f"{where} states other arguments than the stream")
        return item

    def _finish_call(self, index: int, stated: Any) -> None:
        """A call the stream settled keeps its text; one it left open may be finished by the
        snapshot only where the snapshot's text continues the streamed pieces."""
        if index in self.arguments:
            self._settle(index, stated, "the final response")
        elif stated is not None:
            pieces = self.fragments.close(index)
            if not isinstance(stated, str) or not stated.startswith(pieces):
                raise _contradiction(index, "the final response's arguments drop streamed pieces")
            self.arguments[index] = stated

    def _unfinished_calls(self) -> list[int]:
        return [
            index
            for index, item in sorted(self.items.items())
            if _text_field(item) is not None and index not in self.arguments
        ]

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        unfinished = [
            f"{item.get('call_id')} ({item.get('name')})"
            for index, item in sorted(self.items.items())
            if _text_field(item) is not None and index not in self.done
        ]
        if unfinished:
            detail += f"; call {', '.join(unfinished)} was cut mid-stream and never executed"
        return truncated(finish_reason, detail + "; no call will run")
