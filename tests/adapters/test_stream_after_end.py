"""What may follow a stream's terminal event, for Anthropic Messages and both Gemini APIs.

A stream ends at its terminal event (``message_stop``, the chunk with ``finishReason``,
``interaction.completed``); the turn is what the pieces before it said. Content after it means
the events came out of order, so the end they reached (and the calls it holds) cannot be
trusted: the answer is refused as malformed, as an OpenAI Responses stream with a
``response.*`` event after its terminal one is. What real streams send after the end (a
``ping``, usage alone, ``done``) is read as before. Each case changes a copy of a bundled
recorded stream.
"""

from __future__ import annotations

import pytest
from support.providers import answers, calls_of, parse, transcript

from toolloop_cli.engine.types import HttpResponse, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

#: provider option -> (frame separator, a marker of a content frame to repeat after the end,
#: the refusal, a frame real streams may send after the end)
CASES = {
    "anthropic": (
        b"\n\n",
        b"event: content_block_start",
        "content_block_start after message_stop: the events are out of order",
        b'event: ping\ndata: {"type":"ping"}',
    ),
    "gemini": (
        b"\n\n",
        b"event: step.start",
        "step.start after interaction.completed: the events are out of order",
        b'event: interaction.status_update\ndata: {"event_type":"interaction.status_update",'
        b'"status":"completed"}',
    ),
    "gemini-generate": (
        b"\r\n\r\n",
        b'"functionCall"',
        "a part after the chunk with finishReason: out of order",
        b'data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"index":0}],'
        b'"usageMetadata":{"promptTokenCount":212,"totalTokenCount":231}}',
    ),
}


def first_answer(option: str) -> HttpResponse:
    """The recorded streamed answer of the first turn (it proposes a call)."""
    return answers(transcript(option, stream=True))[0]


def with_trailer(option: str, frame: bytes) -> HttpResponse:
    separator = CASES[option][0]
    answer = first_answer(option)
    body = answer.body.rstrip(b"\r\n") + separator + frame + separator
    return HttpResponse(answer.status, dict(answer.headers), body=body)


@pytest.mark.parametrize("option", sorted(CASES))
def test_content_after_the_terminal_event_refuses_the_answer(option: str) -> None:
    separator, marker, refusal, _ = CASES[option]
    frames = first_answer(option).body.split(separator)
    (content, *_) = [frame for frame in frames if marker in frame]
    with pytest.raises(MalformedProviderPayload) as raised:
        parse(option, with_trailer(option, content))
    assert refusal in str(raised.value)


@pytest.mark.parametrize("option", sorted(CASES))
def test_what_real_streams_send_after_the_end_changes_nothing(option: str) -> None:
    plain = parse(option, first_answer(option))
    trailed = parse(option, with_trailer(option, CASES[option][3]))
    assert plain.outcome is TurnOutcome.TOOL_PROPOSALS
    assert calls_of(trailed) == calls_of(plain)
    assert (trailed.outcome, trailed.finish_reason) == (plain.outcome, plain.finish_reason)


@pytest.mark.parametrize(
    ("option", "error", "kind"),
    [
        (
            "anthropic",
            b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
            b'"message":"Overloaded"}}',
            "overloaded_error",
        ),
        (
            "openai",
            b'event: error\ndata: {"type":"error","error":{"type":"server_error",'
            b'"code":"server_error","message":"bad"}}',
            "server_error",
        ),
    ],
)
def test_an_error_event_is_the_answer_whatever_follows_it(
    option: str, error: bytes, kind: str
) -> None:
    """The events after an error event were judged as out of order: the reason spoke of a
    ``message_stop`` never sent, and the provider's retryable error became a malformed one."""
    recorded = answers(transcript(option, stream=True))[0]
    frames = recorded.body.split(b"\n\n")
    body = b"\n\n".join([*frames[:3], error, *frames[3:]])
    turn = parse(option, HttpResponse(200, recorded.headers, body=body))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None
    assert (turn.error.type, turn.error.retryable) == (kind, True)
    assert not turn.calls
