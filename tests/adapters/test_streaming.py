"""Streamed answers for every provider: framing, re-chunking, cuts, the byte cap, error events."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from support.paths import REGISTRY, TASK
from support.providers import (
    PROVIDERS,
    adapter_for,
    answers,
    calls_of,
    chunked,
    events_of,
    parse,
    transcript,
)

from toolloop_cli.adapters import _stream
from toolloop_cli.adapters._stream import SSEEvent, SSEParser
from toolloop_cli.engine.types import HttpRequest, HttpResponse, TurnOutcome
from toolloop_cli.errors import AdapterError, MalformedProviderPayload
from toolloop_cli.service import operations
from toolloop_cli.store import open_store

OPTIONS = list(PROVIDERS)
SSE_HEADERS = {"content-type": "text/event-stream"}
DONE_SENTINEL = b"event: done\ndata: [DONE]"

# -- SSE framing -------------------------------------------------------------------------------


def feed_all(pieces: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser("test")
    events = [e for piece in pieces for e in parser.feed(piece)]
    tail = parser.finish()
    return events + ([tail] if tail else [])


def test_sse_line_ends_comments_and_multiline_data_frame_the_same() -> None:
    lf = b': keep-alive\nevent: a\ndata: {"x":\ndata: 1}\n\ndata: two\n\n'
    expected = [SSEEvent("a", '{"x":\n1}'), SSEEvent(None, "two")]
    assert feed_all([lf]) == expected
    assert feed_all([lf.replace(b"\n", b"\r\n")]) == expected
    assert feed_all([lf.replace(b"\n", b"\r")]) == expected


def test_sse_a_crlf_split_across_chunks_is_one_line_end() -> None:
    data = b"data: 1\r\n\r\ndata: 2\r\n\r\n"
    for cut in range(1, len(data)):
        assert feed_all([data[:cut], data[cut:]]) == [SSEEvent(None, "1"), SSEEvent(None, "2")]


def test_sse_a_last_event_without_its_blank_line_is_handed_back_as_the_tail() -> None:
    parser = SSEParser("test")
    assert parser.feed(b'data: 1\n\ndata: {"partial') == [SSEEvent(None, "1")]
    assert parser.finish() == SSEEvent(None, '{"partial')


def test_sse_invalid_utf8_is_malformed() -> None:
    with pytest.raises(MalformedProviderPayload, match="not UTF-8"):
        SSEParser("test").feed(b"data: \xff\xfe\n\n")


# -- every provider: streamed equals non-streamed ----------------------------------------------


def turn_pairs(option: str) -> list[tuple[HttpResponse, HttpResponse]]:
    return list(zip(answers(transcript(option, True)), answers(transcript(option)), strict=True))


PAIRS = {option: turn_pairs(option) for option in OPTIONS}


@pytest.mark.parametrize("option", OPTIONS)
def test_each_streamed_refund_turn_gives_the_calls_and_text_of_the_json_turn(option: str) -> None:
    for streamed, plain in PAIRS[option]:
        a, b = parse(option, streamed), parse(option, plain)
        assert (a.outcome, calls_of(a), a.text, a.response_id) == (
            b.outcome,
            calls_of(b),
            b.text,
            b.response_id,
        )
        assert a.outcome in (TurnOutcome.TOOL_PROPOSALS, TurnOutcome.FINAL_TEXT)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OPTIONS), st.data())
def test_any_rechunking_of_a_recorded_stream_yields_the_calls_of_the_json_answer(
    option: str, data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(PAIRS[option]) - 1))
    streamed, plain = PAIRS[option][index]
    body = streamed.body
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    turn = parse(option, streamed, pieces)
    assert calls_of(turn) == calls_of(parse(option, plain))
    assert turn.outcome is parse(option, plain).outcome


@pytest.mark.parametrize("option", OPTIONS)
def test_a_streamed_answer_leaves_exactly_the_bytes_it_read_in_the_body(option: str) -> None:
    streamed = PAIRS[option][0][0]
    response = chunked(
        streamed, [streamed.body[i : i + 5] for i in range(0, len(streamed.body), 5)]
    )
    adapter_for(option).parse_response(response)
    assert response.chunks is None and response.body == streamed.body


@pytest.mark.parametrize("option", OPTIONS)
def test_a_streaming_call_is_announced_as_being_prepared(option: str) -> None:
    seen: list[tuple[str, dict[str, object]]] = []
    streamed, plain = PAIRS[option][0]
    response = chunked(streamed, [streamed.body])
    turn = adapter_for(option).parse_response(response, on_event=lambda k, d: seen.append((k, d)))
    (call,) = turn.calls
    assert seen == [("call_streaming", {"call_id": call.call_id, "name": "get_order"})]


# -- cut streams -------------------------------------------------------------------------------


def boundaries(option: str) -> Iterator[tuple[int, int]]:
    """(turn, offset) for every event boundary short of the end of each refund stream."""
    for turn, (streamed, _) in enumerate(PAIRS[option]):
        for end in events_of(streamed.body):
            if end < len(streamed.body.rstrip()):
                yield turn, end


@pytest.mark.parametrize("option", OPTIONS)
def test_a_stream_cut_at_any_event_boundary_is_truncated_with_no_calls(option: str) -> None:
    checked = 0
    for turn, end in boundaries(option):
        streamed = PAIRS[option][turn][0]
        cut = parse(option, streamed, [streamed.body[:end]])
        if streamed.body[end:].strip() == DONE_SENTINEL:
            assert cut.outcome is not TurnOutcome.TRUNCATED  # only Gemini's [DONE] is missing
            continue
        assert cut.outcome is TurnOutcome.TRUNCATED, (turn, end)
        assert cut.calls == () and cut.finish_reason == "stream_incomplete"
        checked += 1
    assert checked >= 2 * len(PAIRS[option]) - 1


class CutTransport:
    """Answers the first request with a stream cut at ``end`` bytes."""

    name = "test"

    def __init__(self, body: bytes, end: int) -> None:
        self.body, self.end, self.sent = body, end, 0

    def send(self, request: HttpRequest) -> HttpResponse:
        self.sent += 1
        return HttpResponse(200, dict(SSE_HEADERS), chunks=iter([self.body[: self.end]]))


@pytest.mark.parametrize("option", OPTIONS)
def test_a_run_whose_first_stream_is_cut_at_any_boundary_ends_incomplete_running_nothing(
    option: str, tmp_path: Path
) -> None:
    streamed = PAIRS[option][0][0]
    body = streamed.body
    ends = [e for e in events_of(body) if body[e:].strip() not in (b"", DONE_SENTINEL)]
    model = PROVIDERS[option][3]
    for i, end in enumerate(ends):
        store = open_store(tmp_path / str(i) / "store.db")
        transport = CutTransport(streamed.body, end)
        options = operations.RunOptions(
            task=TASK, registry=REGISTRY, provider=option, model=model, stream=True
        )
        result = operations.start(store, options, transport=transport)
        assert result.operation.state.value == "INCOMPLETE", end
        op_id = result.operation.operation_id
        assert store.calls(op_id) == [] and result.operation.counters.tool_calls == 0
        assert not (tmp_path / str(i) / "payments.db").exists()
        assert transport.sent == 1


@pytest.mark.soak  # every byte offset of every stream: TOOLLOOP_SOAK=1
@pytest.mark.parametrize("option", OPTIONS)
def test_soak_a_stream_cut_at_any_byte_runs_no_call_unless_it_was_whole(option: str) -> None:
    for streamed, plain in PAIRS[option]:
        full = calls_of(parse(option, plain))
        for end in range(len(streamed.body)):
            turn = parse(option, streamed, [streamed.body[:end]])
            assert (
                turn.calls == ()
                if turn.outcome is TurnOutcome.TRUNCATED
                else calls_of(turn) == full
            )


@pytest.mark.parametrize("option", OPTIONS)
def test_a_stream_cut_at_sampled_byte_offsets_runs_no_call_unless_it_was_whole(
    option: str,
) -> None:
    rng = random.Random(option)
    for streamed, plain in PAIRS[option]:
        full = calls_of(parse(option, plain))
        for end in rng.sample(range(len(streamed.body)), 40):
            turn = parse(option, streamed, [streamed.body[:end]])
            if turn.outcome is TurnOutcome.TRUNCATED:
                assert turn.calls == ()
            else:
                assert calls_of(turn) == full


def test_a_dropped_connection_mid_stream_is_a_cut_not_a_retry() -> None:
    streamed = PAIRS["anthropic"][0][0]

    def chunks() -> Iterator[bytes]:
        yield streamed.body[:300]
        raise AdapterError("anthropic request failed: RemoteProtocolError", retryable=True)

    response = HttpResponse(200, dict(SSE_HEADERS), chunks=chunks())
    turn = adapter_for("anthropic").parse_response(response)
    assert turn.outcome is TurnOutcome.TRUNCATED and turn.calls == ()
    assert "dropped" in (turn.detail or "") and response.body == streamed.body[:300]


# -- the fragment cap --------------------------------------------------------------------------


def endless(prefix: bytes, event: bytes, pulled: list[int]) -> Iterator[bytes]:
    yield prefix
    while True:
        pulled.append(1)
        yield event


CAP_STREAMS: dict[str, tuple[bytes, bytes]] = {
    "openai": (
        b'data: {"type":"response.output_item.added","output_index":0,"item":{"type":'
        b'"function_call","id":"fc_1","call_id":"call_1","name":"get_order","arguments":""}}\n\n',
        b'data: {"type":"response.function_call_arguments.delta","output_index":0,'
        b'"item_id":"fc_1","delta":"aaaaaaaaaaaaaaaa"}\n\n',
    ),
    "anthropic": (
        b'data: {"type":"message_start","message":{"id":"msg_1","content":[]}}\n\n'
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use",'
        b'"id":"toolu_1","name":"get_order","input":{}}}\n\n',
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",'
        b'"partial_json":"aaaaaaaaaaaaaaaa"}}\n\n',
    ),
    "gemini": (
        b'data: {"event_type":"step.start","index":0,"step":{"type":"function_call",'
        b'"id":"c1","name":"get_order","arguments":{}}}\n\n',
        b'data: {"event_type":"step.delta","index":0,"delta":{"type":"arguments_delta",'
        b'"arguments":"aaaaaaaaaaaaaaaa"}}\n\n',
    ),
    "gemini-generate": (
        b"",
        b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"aaaaaaaaaaaaaaaa"}]}}],'
        b'"responseId":"r1"}\r\n\r\n',
    ),
}


@pytest.mark.parametrize("option", OPTIONS)
def test_fragments_growing_past_the_cap_end_truncated_without_reading_the_rest(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stream, "MAX_FRAGMENT_BYTES", 256)
    pulled: list[int] = []
    prefix, event = CAP_STREAMS[option]
    response = HttpResponse(200, dict(SSE_HEADERS), chunks=endless(prefix, event, pulled))
    turn = adapter_for(option).parse_response(response)
    assert (turn.outcome, turn.finish_reason, turn.calls) == (
        TurnOutcome.TRUNCATED,
        "fragment_cap",
        (),
    )
    assert "256-byte cap" in (turn.detail or "")
    assert len(pulled) <= 256 // 16 + 1  # stopped at the cap: the endless rest was never read


# -- errors inside a 200 stream ----------------------------------------------------------------

ERROR_EVENTS: list[tuple[str, dict[str, Any], bool]] = [
    ("openai", {"type": "error", "code": "server_error", "message": "boom"}, True),
    ("openai", {"type": "error", "code": "invalid_prompt", "message": "no"}, False),
    ("anthropic", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}, True),
    (
        "anthropic",
        {"type": "error", "error": {"type": "invalid_request_error", "message": "x"}},
        False,
    ),
    ("gemini", {"event_type": "error", "error": {"code": "gateway_timeout", "message": "x"}}, True),
    (
        "gemini",
        {"event_type": "error", "error": {"code": "invalid_argument", "message": "x"}},
        False,
    ),
    ("gemini-generate", {"error": {"code": 503, "status": "UNAVAILABLE", "message": "x"}}, True),
    (
        "gemini-generate",
        {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "x"}},
        False,
    ),
]


@pytest.mark.parametrize(("option", "event", "retryable"), ERROR_EVENTS)
def test_an_error_event_after_http_200_is_classified_by_its_kind(
    option: str, event: dict[str, Any], retryable: bool
) -> None:
    streamed = PAIRS[option][0][0]
    first = next(events_of(streamed.body))
    body = streamed.body[:first] + f"data: {json.dumps(event)}\n\n".encode()
    turn = parse(option, streamed, [body])
    assert turn.outcome is TurnOutcome.API_FAILURE and turn.calls == ()
    assert turn.error is not None and turn.error.retryable is retryable
    assert turn.error.status is None  # HTTP said 200; the kind decided
