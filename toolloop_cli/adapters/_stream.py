"""Streamed answers, shared by every adapter: SSE frames, fragments under a byte cap, one driver.

Three layers, each small enough to test on its own:

- ``SSEParser`` turns bytes into events whatever the chunking: LF, CRLF or CR line ends (a CR
  at the end of a chunk waits for the next one), ``:`` comments, several ``data:`` lines, and
  JSON padded with spaces (real Anthropic streams pad). A last event without its closing blank
  line is handed back separately: it counts only if its data is whole JSON.
- ``Fragments`` assembles string fragments keyed by item / output index / block index under a
  cumulative byte cap; a key's text is handed out only when the provider's done event closes
  it, so arguments are parsed once, whole. Going over the cap raises ``FragmentCapExceeded``
  at once: the rest of the stream is never read, let alone buffered.
- ``run_stream`` drives one provider ``StreamHandler`` over an answer: each JSON event goes to
  ``handle`` until one returns the turn (a terminal or error event); whatever follows is read
  within the cap and its events go to ``after_end``, so a handler can refuse a stream that
  goes on after saying it ended (events out of order), except after an ``error`` event,
  whose error is the answer whatever follows it; a stream that ends first,
  or whose connection drops, is ``handler.cut(...)`` (a TRUNCATED turn: nothing runs). The raw
  bytes it consumed are left in ``response.body`` so the store keeps exactly what arrived (over
  the byte cap, only the first ``max_bytes``). A ``DeadlineExceeded`` from the transport is not
  a cut: it passes through, and the engine ends the operation on its deadline.

An unparsable *complete* event is a ``MalformedProviderPayload``; an unparsable last event is a
cut stream (the connection dropped mid-event), which is what it almost always is.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from toolloop_cli.engine.types import HttpResponse, JSONObject, ModelTurn, TurnOutcome
from toolloop_cli.errors import AdapterError, DeadlineExceeded, MalformedProviderPayload

from ._json import load_json_body

__all__ = [
    "MAX_FRAGMENT_BYTES",
    "EventSink",
    "Fragments",
    "FragmentCapExceeded",
    "SSEEvent",
    "SSEParser",
    "StreamHandler",
    "dumps_arguments",
    "is_event_stream",
    "no_events",
    "read_capped",
    "run_stream",
    "truncated",
]

#: Largest total of streamed fragments (arguments and text) assembled from one answer.
MAX_FRAGMENT_BYTES = 4 * 1024 * 1024

EventSink = Callable[[str, dict[str, object]], None]


def no_events(kind: str, data: dict[str, object]) -> None:
    """The default sink: progress events go nowhere."""


#: how an event stream's first line starts (a field name, or a comment)
_SSE_START = (b"event:", b"data:", b":", b"id:", b"retry:")


#: the characters of an RFC 9110 token, lower case (a media type is ``token/token``)
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


def _is_media_type(text: str) -> bool:
    kind, slash, subtype = text.partition("/")
    return bool(slash and kind and subtype) and _TOKEN.issuperset(kind + subtype)


def is_event_stream(response: HttpResponse) -> bool:
    """Said by the content type; or, for a recorded answer whose content type says nothing
    (no header kept, or one a recorder blanked: LangChain writes ``**REDACTED**`` over every
    header), by its bytes (``event:``/``data:`` framing, which no JSON body starts with)."""
    content_type = response.content_type.lower()
    media_type = content_type.split(";", 1)[0].strip()
    if _is_media_type(media_type):
        return media_type == "text/event-stream"
    if response.chunks is not None:
        return False
    return response.body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_SSE_START)


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched server-sent event: its ``event:`` name (if any) and joined ``data:``."""

    event: str | None
    data: str


class SSEParser:
    """Incremental SSE framing (WHATWG rules, minus ``id``/``retry``, which we do not use)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer already known to hold no line end
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by this chunk, in order."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        start = 0
        buffer = self._buffer
        i = self._scanned
        size = len(buffer)
        while i < size:
            byte = buffer[i]
            if byte not in (10, 13):
                i += 1
                continue
            if byte == 13 and i + 1 == size:
                break  # a CR at the very end may be the first half of CRLF
            line = bytes(buffer[start:i])
            i += 2 if byte == 13 and buffer[i + 1] == 10 else 1
            start = i
            event = self._line(line)
            if event is not None:
                events.append(event)
        del self._buffer[:start]
        self._scanned = max(0, i - start)
        return events

    def finish(self) -> SSEEvent | None:
        """At end of stream: the last event if it lacked its closing blank line."""
        if self._buffer:
            tail = bytes(self._buffer)
            self._buffer.clear()
            self._scanned = 0
            dispatched = self._line(tail.removesuffix(b"\r"))
            if dispatched is not None:
                return dispatched
        if not self._data:
            return None
        event = SSEEvent(self._event, "\n".join(self._data))
        self._event, self._data = None, []
        return event

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            if not self._data:
                self._event = None
                return None
            event = SSEEvent(self._event, "\n".join(self._data))
            self._event, self._data = None, []
            return event
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedProviderPayload(
                f"{self.provider}: event stream line is not UTF-8 (byte {exc.start})",
                provider=self.provider,
            ) from exc
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


class FragmentCapExceeded(Exception):
    """Streamed fragments grew past the cap; ``key`` is the fragment that crossed it."""

    def __init__(self, key: Hashable, cap: int) -> None:
        self.key = key
        self.cap = cap
        super().__init__(f"streamed fragments exceeded {cap} bytes")


@dataclass
class Fragments:
    """String fragments per key, under one cumulative byte cap; read only once closed."""

    provider: str
    cap: int = field(default_factory=lambda: MAX_FRAGMENT_BYTES)
    total: int = 0
    _open: dict[Hashable, list[str]] = field(default_factory=dict)
    _closed: set[Hashable] = field(default_factory=set)

    def open(self, key: Hashable) -> None:
        if key in self._open or key in self._closed:
            raise MalformedProviderPayload(
                f"{self.provider}: stream starts index {key!r} twice", provider=self.provider
            )
        self._open[key] = []

    def is_open(self, key: Hashable) -> bool:
        return key in self._open

    def add(self, key: Hashable, text: str) -> None:
        parts = self._open.get(key)
        if parts is None:
            raise MalformedProviderPayload(
                f"{self.provider}: stream fragment for index {key!r}, which is not open",
                provider=self.provider,
            )
        self.total += len(text.encode("utf-8", errors="surrogatepass"))
        if self.total > self.cap:
            raise FragmentCapExceeded(key, self.cap)
        parts.append(text)

    def count(self, text: str) -> None:
        """Count streamed text that is assembled elsewhere against the same cap."""
        self.total += len(text.encode("utf-8", errors="surrogatepass"))
        if self.total > self.cap:
            raise FragmentCapExceeded("text", self.cap)

    def close(self, key: Hashable) -> str:
        """The whole text of ``key``; the provider said it is done."""
        parts = self._open.pop(key, None)
        if parts is None:
            raise MalformedProviderPayload(
                f"{self.provider}: stream closes index {key!r}, which is not open",
                provider=self.provider,
            )
        self._closed.add(key)
        return "".join(parts)

    def open_keys(self) -> list[Hashable]:
        return list(self._open)


class StreamHandler(Protocol):
    """One provider's reading of its events."""

    def handle(self, name: str | None, data: JSONObject) -> ModelTurn | None:
        """Take one event; return the turn when this event ends the answer."""
        ...

    def after_end(self, name: str | None, data: JSONObject) -> None:
        """See one event that followed the terminal one; raise if it contradicts the end."""
        ...

    def cut(self, finish_reason: str, detail: str) -> ModelTurn:
        """The TRUNCATED turn for a stream that stopped early, naming unfinished calls."""
        ...


def truncated(reason: str, detail: str, **common: object) -> ModelTurn:
    """A TRUNCATED turn: nothing in it runs."""
    return ModelTurn(
        outcome=TurnOutcome.TRUNCATED,
        finish_reason=reason,
        detail=detail,
        **common,
    )


def read_capped(response: HttpResponse, provider: str, max_bytes: int) -> bytes:
    """A whole (non-event-stream) answer, refusing more than ``max_bytes``.

    Over the cap, reading stops at the chunk that crosses it and ``response.body`` keeps only
    the first ``max_bytes``; the error says how much was read and its sha256.
    """
    if response.chunks is None:
        body = response.body
        if len(body) > max_bytes:
            response.body = body[:max_bytes]
            raise _too_large(provider, max_bytes, [body], len(response.body))
        return body
    parts: list[bytes] = []
    size = 0
    chunks = response.chunks
    response.chunks = None
    try:
        for chunk in chunks:
            if size + len(chunk) > max_bytes:
                read = [*parts, chunk]
                parts.append(chunk[: max_bytes - size])
                response.body = b"".join(parts)
                raise _too_large(provider, max_bytes, read, max_bytes)
            size += len(chunk)
            parts.append(chunk)
    finally:
        _close(chunks)
    body = response.body = b"".join(parts)
    return body


def _too_large(
    provider: str, max_bytes: int, read: list[bytes], kept: int
) -> MalformedProviderPayload:
    digest = hashlib.sha256()
    for part in read:
        digest.update(part)
    size = sum(map(len, read))
    return MalformedProviderPayload(
        f"{provider}: answer larger than {max_bytes} bytes: refused after reading {size} bytes "
        f"(sha256 {digest.hexdigest()}); the first {kept} bytes are kept",
        provider=provider,
    )


def _close(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if callable(close):
        close()


class _Reader:
    """Yields the JSON events of an answer, keeping every byte it consumed."""

    def __init__(self, response: HttpResponse, provider: str, max_bytes: int) -> None:
        self.response = response
        self.provider = provider
        self.max_bytes = max_bytes
        self.consumed: list[bytes] = []
        self.size = 0
        self.dropped: str | None = None  # the transport error that ended the stream, if any
        self.parser = SSEParser(provider)
        self.queued: deque[SSEEvent] = deque()  # framed, not yet handed out
        if response.chunks is None:
            self._chunks: Iterator[bytes] = iter([response.body])
        else:
            self._chunks = response.chunks
        response.chunks = None

    def _take(self) -> Iterator[bytes]:
        try:
            for chunk in self._chunks:
                if self.size + len(chunk) > self.max_bytes:
                    read = [*self.consumed, chunk]
                    self.consumed.append(chunk[: self.max_bytes - self.size])
                    raise _too_large(self.provider, self.max_bytes, read, self.max_bytes)
                self.size += len(chunk)
                self.consumed.append(chunk)
                yield chunk
        except (MalformedProviderPayload, DeadlineExceeded):
            raise
        except AdapterError as exc:  # the connection dropped mid-stream: a cut, not a retry
            self.dropped = str(exc)

    def events(self) -> Iterator[tuple[str | None, JSONObject]]:
        for chunk in self._take():
            self.queued.extend(self.parser.feed(chunk))
            while self.queued:
                event = self.queued.popleft()
                parsed = self._json(event, last=False)
                if parsed is not None:
                    yield event.event, parsed
        tail = self.parser.finish()
        if tail is not None:
            parsed = self._json(tail, last=True)
            if parsed is not None:
                yield tail.event, parsed

    def _json(self, event: SSEEvent, *, last: bool) -> JSONObject | None:
        if event.data.strip() == "[DONE]":
            return {"type": "[DONE]"}
        try:
            data = event.data.encode("utf-8", errors="surrogatepass")
            value = load_json_body(data, self.provider)
        except MalformedProviderPayload:
            if last:
                return None  # cut mid-event
            raise
        if not isinstance(value, dict):
            raise MalformedProviderPayload(
                f"{self.provider}: stream event data is not a JSON object", provider=self.provider
            )
        return value

    def drain(self) -> Iterator[tuple[str | None, JSONObject]]:
        """Read what follows the terminal event (a ``[DONE]``, a blank line) within the cap,
        then hand out its whole JSON events. Read leniently: past the end, a dropped
        connection, bytes over the cap or text that is not an event are no answer's business."""
        try:
            for chunk in self._chunks:
                if self.size + len(chunk) > self.max_bytes:
                    break
                self.size += len(chunk)
                self.consumed.append(chunk)
                self.queued.extend(self.parser.feed(chunk))
            tail = self.parser.finish()
            if tail is not None:
                self.queued.append(tail)
        except AdapterError:  # a dropped connection, or a line that is not UTF-8
            pass
        for event in self.queued:
            parsed = self._loose_json(event)
            if parsed is not None:
                yield event.event, parsed

    def _loose_json(self, event: SSEEvent) -> JSONObject | None:
        try:
            return self._json(event, last=False)
        except MalformedProviderPayload:
            return None

    def close(self) -> None:
        self.response.body = b"".join(self.consumed)
        _close(self._chunks)


def run_stream(
    response: HttpResponse, handler: StreamHandler, provider: str, max_bytes: int
) -> ModelTurn:
    """Feed an event stream to ``handler``; see the module docstring for the rules."""
    reader = _Reader(response, provider, max_bytes)
    try:
        try:
            for name, data in reader.events():
                turn = handler.handle(name, data)
                if turn is not None:
                    failed = _error_event(turn)  # after an error, what follows is not judged
                    for after in reader.drain():
                        if not failed:
                            handler.after_end(*after)
                    return turn
        except FragmentCapExceeded as exc:
            return handler.cut(
                "fragment_cap",
                f"streamed fragments grew past the {exc.cap}-byte cap (index {exc.key!r}); "
                "the rest of the stream was not read",
            )
        if reader.dropped is not None:
            return handler.cut(
                "stream_incomplete",
                f"the connection dropped or timed out mid-stream ({reader.dropped})",
            )
        return handler.cut("stream_incomplete", "the event stream ended before its terminal event")
    finally:
        reader.close()


def _error_event(turn: ModelTurn) -> bool:
    """Whether ``turn`` is the failure an ``error`` event ended the stream with: what follows
    it is not read (the provider's error, retryable or not, is the answer)."""
    return turn.outcome is TurnOutcome.API_FAILURE and turn.finish_reason == "error"


def dumps_arguments(value: JSONObject) -> str:
    """The JSON text of an object-valued argument set, as the adapters record it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
