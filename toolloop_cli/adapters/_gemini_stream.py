"""Gemini event streams (Interactions and generateContent), read on the shared assembler.

Interactions: ``interaction.created`` gives the shell; ``step.start`` opens a step at its
``index`` (a ``function_call`` step's id and name come only from there, its ``arguments`` are
``{}``); ``step.delta`` fragments (``arguments_delta`` — its ``arguments`` field, with the
``partial_arguments`` spelling some clients report accepted too — and ``text``) are assembled
per index under the byte cap; ``step.stop`` closes the step and only then are the arguments
parsed. ``interaction.completed`` carries the final status and usage but no steps: the answer
is the shell, the completed interaction and the assembled steps, parsed like a JSON answer. The
``[DONE]`` sentinel that follows is not required. ``error`` fails the turn by its code.

generateContent (``?alt=sse``): frames have no event names; each is a whole
GenerateContentResponse fragment. Parts are appended in order (adjacent plain text merged, the
way the non-streamed answer holds it); a ``functionCall`` part always arrives whole. The frame
with a ``finishReason`` (or a prompt ``blockReason``) ends the answer; a top-level ``error``
fails it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from toolloop_cli.engine.types import JSONObject, ModelTurn, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

from ._errors import GEMINI, classify_stream_error
from ._json import parse_arguments
from ._stream import EventSink, Fragments, dumps_arguments, truncated

__all__ = [
    "SYNTHETIC_PREFIX",
    "GenerateStream",
    "InteractionsStream",
    "is_synthetic_call_id",
    "synthetic_call_id",
]

_PROVIDER = "gemini"
SYNTHETIC_PREFIX = "gcall_"


def synthetic_call_id(response_id: str | None, ordinal: int, call: JSONObject) -> str:
    """A stable id for the ``ordinal``-th ``functionCall`` of an answer that sent none."""
    seed = json.dumps(
        [response_id or "", ordinal, call.get("name"), call.get("args")],
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return f"{SYNTHETIC_PREFIX}{hashlib.sha256(seed.encode()).hexdigest()[:16]}_{ordinal}"


def is_synthetic_call_id(call_id: str) -> bool:
    """Whether ``call_id`` is exactly what ``synthetic_call_id`` makes (``gcall_``, 16 hex
    digits, ``_`` and the ordinal; the engine may add ``_t<turn>`` to keep it apart from an
    earlier turn's): a provider's id that only starts like one is its own."""
    digest, sep, tail = call_id.removeprefix(SYNTHETIC_PREFIX).partition("_")
    if not call_id.startswith(SYNTHETIC_PREFIX) or not sep or len(digest) != 16:
        return False
    if any(c not in "0123456789abcdef" for c in digest):
        return False
    ordinal, turn_sep, turn = tail.partition("_t")
    return _number(ordinal) and (not turn_sep or _number(turn))


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _says_something(part: Any) -> bool:
    """A part with more than an empty text (the padding some streams end with)."""
    return not (isinstance(part, dict) and set(part) <= {"text"} and not part.get("text"))


def _malformed(what: str, reason: str) -> MalformedProviderPayload:
    return MalformedProviderPayload(f"gemini {what} stream: {reason}", provider=_PROVIDER)


def _failure(error: Any) -> ModelTurn:
    api_error = classify_stream_error(GEMINI, error)
    return ModelTurn(
        outcome=TurnOutcome.API_FAILURE,
        finish_reason="error",
        error=api_error,
        detail=f"error event in the stream: {api_error.code or api_error.type or 'no code'}",
    )


class InteractionsStream:
    """A ``StreamHandler`` for one Interactions stream."""

    def __init__(
        self, parse: Callable[[Any, Mapping[str, str] | None], ModelTurn], on_event: EventSink
    ) -> None:
        self.parse = parse
        self.on_event = on_event
        self.fragments = Fragments(_PROVIDER)
        self.shell: JSONObject = {}
        self.steps: dict[int, JSONObject] = {}
        self.raw_arguments: dict[str, str] = {}

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        kind = data.get("event_type", name)
        match kind:
            case "interaction.created":
                interaction = data.get("interaction")
                if isinstance(interaction, dict):
                    self.shell.update(interaction)
            case "interaction.status_update":
                if isinstance(data.get("status"), str):
                    self.shell["status"] = data["status"]
            case "step.start":
                self._start(self._index(data), data.get("step"))
            case "step.delta":
                self._delta(self._index(data), data.get("delta"))
            case "step.stop":
                self._stop(self._index(data))
            case "interaction.completed":
                return self._finish(data.get("interaction"))
            case "error":
                return _failure(data.get("error"))
            case _:
                pass  # [DONE], and event types newer than this adapter
        return None

    def _index(self, data: JSONObject) -> int:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise _malformed("interactions", f"{data.get('event_type')} without an integer index")
        return index

    def _start(self, index: int, step: Any) -> None:
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            raise _malformed("interactions", "step.start without a typed step")
        if index in self.steps:
            raise _malformed("interactions", f"step {index} started twice")
        self.steps[index] = dict(step)
        self.fragments.open(index)
        if step["type"] == "function_call":
            self.on_event(
                "call_streaming", {"call_id": str(step.get("id")), "name": str(step.get("name"))}
            )

    def _delta(self, index: int, delta: Any) -> None:
        step = self.steps.get(index)
        if step is None or not isinstance(delta, dict) or not self.fragments.is_open(index):
            raise _malformed("interactions", f"step.delta for step {index}, which is not open")
        match delta.get("type"):
            case "arguments_delta":
                text = delta.get("arguments", delta.get("partial_arguments"))
                if not isinstance(text, str):
                    raise _malformed("interactions", "arguments_delta without string arguments")
                self.fragments.add(index, text)
            case "text":
                text = delta.get("text")
                if not isinstance(text, str):
                    raise _malformed("interactions", "text delta without a string 'text'")
                self.fragments.count(text)
                content = step.setdefault("content", [])
                if content and content[-1].get("type") == "text":
                    content[-1]["text"] += text
                else:
                    content.append({"type": "text", "text": text})
            case "thought_signature":
                step["signature"] = delta.get("signature")
            case _:
                pass  # summaries, annotations, server tool deltas: nothing a call depends on

    def _stop(self, index: int) -> None:
        step = self.steps.get(index)
        if step is None:
            raise _malformed("interactions", f"step.stop for step {index}, which never started")
        text = self.fragments.close(index)
        if step["type"] == "function_call":
            given = step.get("arguments")
            raw = (
                text if text.strip() else dumps_arguments(given if isinstance(given, dict) else {})
            )
            arguments, _ = parse_arguments(raw)
            step["arguments"] = arguments if arguments is not None else {}
            self.raw_arguments[str(step.get("id"))] = raw

    def _finish(self, interaction: Any) -> ModelTurn:
        if any(self.fragments.is_open(i) for i in self.steps):
            return self.cut("stream_incomplete", "interaction.completed before every step stopped")
        done = interaction if isinstance(interaction, dict) else {}
        answer = {**self.shell, **done, "steps": [self.steps[i] for i in sorted(self.steps)]}
        return self.parse(answer, self.raw_arguments)

    def after_end(self, name: str | None, data: JSONObject) -> None:
        """Only ``done`` and status updates may follow ``interaction.completed``: a step after
        it means the events came out of order, so the answer it completed cannot be
        trusted."""
        kind = data.get("event_type", name)
        if isinstance(kind, str) and kind.startswith("step."):
            raise _malformed(
                "interactions", f"{kind} after interaction.completed: the events are out of order"
            )

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        calls = [
            f"{s.get('id')} ({s.get('name')})"
            for _, s in sorted(self.steps.items())
            if s.get("type") == "function_call"
        ]
        if calls:
            detail += f"; call {', '.join(calls)} was cut mid-stream and never executed"
        shell_id = self.shell.get("id")
        return truncated(
            finish_reason,
            detail + "; no call will run",
            response_id=shell_id if isinstance(shell_id, str) else None,
        )


class GenerateStream:
    """A ``StreamHandler`` for one ``streamGenerateContent?alt=sse`` answer."""

    def __init__(self, parse: Callable[[Any], ModelTurn], on_event: EventSink) -> None:
        self.parse = parse
        self.on_event = on_event
        self.fragments = Fragments(_PROVIDER)
        self.last: JSONObject = {}
        self.parts: list[JSONObject] = []
        self.calls: list[str] = []

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        if data.get("type") == "[DONE]":
            return None
        if "error" in data:
            return _failure(data.get("error"))
        self.last = data
        candidates = data.get("candidates")
        if not candidates:
            feedback = data.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                return self.parse(data)
            return None
        if not isinstance(candidates, list) or not isinstance(candidates[0], dict):
            raise _malformed("generateContent", "candidates is not a list of objects")
        candidate = candidates[0]
        content = candidate.get("content")
        parts = content.get("parts", []) if isinstance(content, dict) else []
        if not isinstance(parts, list):
            raise _malformed("generateContent", "content 'parts' is not a list")
        for part in parts:
            self._part(part)
        if candidate.get("finishReason") is not None:
            merged = {**candidate, "content": {"role": "model", "parts": self.parts}}
            return self.parse({**data, "candidates": [merged]})
        return None

    def _part(self, part: Any) -> None:
        if not isinstance(part, dict):
            raise _malformed("generateContent", "a part is not an object")
        call = part.get("functionCall")
        if isinstance(call, dict):
            self.fragments.count(dumps_arguments(call))
            given = call.get("id")
            response_id = self.last.get("responseId")
            call_id = (
                given
                if isinstance(given, str) and given
                else synthetic_call_id(
                    response_id if isinstance(response_id, str) and response_id else None,
                    len(self.calls),
                    call,
                )
            )
            self.calls.append(f"{call_id} ({call.get('name')})")
            self.on_event("call_streaming", {"call_id": call_id, "name": str(call.get("name"))})
            self.parts.append(dict(part))
            return
        text = part.get("text")
        if isinstance(text, str):
            self.fragments.count(text)
            if not text and set(part) == {"text"}:
                return
            last = self.parts[-1] if self.parts else None
            if (
                last is not None
                and isinstance(last.get("text"), str)
                and set(last) <= {"text", "thought"}
                and set(part) <= {"text", "thought", "thoughtSignature"}
                and last.get("thought") == part.get("thought")
            ):
                last["text"] += text
                if "thoughtSignature" in part:
                    last["thoughtSignature"] = part["thoughtSignature"]
                return
        self.parts.append(dict(part))

    def after_end(self, name: str | None, data: JSONObject) -> None:
        """A chunk after the one with ``finishReason`` may carry usage, never content: a part
        after the finish means the chunks came out of order, so the answer it finished (and
        the calls it holds) cannot be trusted."""
        candidates = data.get("candidates")
        for candidate in candidates if isinstance(candidates, list) else []:
            content = candidate.get("content") if isinstance(candidate, dict) else None
            parts = content.get("parts") if isinstance(content, dict) else None
            if any(_says_something(p) for p in (parts if isinstance(parts, list) else [])):
                raise _malformed(
                    "generateContent", "a part after the chunk with finishReason: out of order"
                )

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        if self.calls:
            calls = ", ".join(self.calls)
            detail += f"; call {calls} arrived but the answer never finished: never executed"
        response_id = self.last.get("responseId")
        return truncated(
            finish_reason,
            detail + "; no call will run",
            response_id=response_id if isinstance(response_id, str) else None,
        )
