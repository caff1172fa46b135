"""Token usage decides BUDGET_EXHAUSTED, so every adapter reads it strictly, streamed or not.

A count that is absent or null is 0 (real answers leave counts out, or null); one that is
there but is not a whole number in 0..2**53-1 makes the answer malformed. Each case edits the
usage of a bundled recorded answer (JSON body or event stream) and parses it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke
from support.providers import PROVIDERS, adapter_for, answers, run_fixture, transcript

from toolloop_cli.adapters._stream import SSEEvent, SSEParser
from toolloop_cli.adapters.scripted import ScriptedAdapter
from toolloop_cli.engine.types import HttpResponse, ModelTurn
from toolloop_cli.errors import MalformedProviderPayload
from toolloop_cli.transcripts import load_cassette
from toolloop_cli.transcripts.cassette import dump_cassette

#: --provider name → our usage field → the provider's key for it
FIELDS: dict[str, dict[str, str]] = {
    "openai": {
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "total_tokens": "total_tokens",
    },
    "anthropic": {"input_tokens": "input_tokens", "output_tokens": "output_tokens"},
    "gemini": {
        "input_tokens": "total_input_tokens",
        "output_tokens": "total_output_tokens",
        "total_tokens": "total_tokens",
    },
    "gemini-generate": {
        "input_tokens": "promptTokenCount",
        "output_tokens": "candidatesTokenCount",
        "total_tokens": "totalTokenCount",
    },
    "scripted": {
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "total_tokens": "total_tokens",
    },
}
BAD = [-1, -500, 1.5, 510.7, True, False, "5", 2**53, 2**60, 10**30, [5], {"n": 5}]
ABSENT = object()

CASES = [
    (option, stream, field, key)
    for option in PROVIDERS
    for stream in (False, True)
    for field, key in FIELDS[option].items()
] + [("scripted", False, field, key) for field, key in FIELDS["scripted"].items()]


def case_id(case: tuple[str, bool, str, str]) -> str:
    option, stream, field, _ = case
    return f"{option}-{'stream' if stream else 'json'}-{field}"


# -- putting a value where each provider reports usage ------------------------------------------


def set_count(holder: dict[str, Any], key: str, value: Any) -> None:
    if value is ABSENT:
        holder.pop(key, None)
    else:
        holder[key] = value


def usage_holders(option: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The usage objects one answer body or stream event carries."""
    kind = data.get("type", data.get("event_type"))
    found = [
        data.get("usage") if option != "gemini-generate" else data.get("usageMetadata"),
        data.get("response", {}).get("usage") if kind == "response.completed" else None,
        data.get("message", {}).get("usage") if kind == "message_start" else None,
        data.get("interaction", {}).get("usage") if kind == "interaction.completed" else None,
    ]
    return [holder for holder in found if isinstance(holder, dict)]


def edited_json(option: str, key: str, value: Any) -> HttpResponse:
    recorded = answers(transcript(option))[0]
    body = json.loads(recorded.body)
    (holder,) = usage_holders(option, body)
    set_count(holder, key, value)
    return HttpResponse(recorded.status, dict(recorded.headers), body=json.dumps(body).encode())


def edited_stream(option: str, key: str, value: Any) -> HttpResponse:
    recorded = answers(transcript(option, stream=True))[0]
    parser = SSEParser("test")
    framed = [*parser.feed(recorded.body), *filter(None, [parser.finish()])]
    assert any(usage_holders(option, json.loads(e.data)) for e in framed if e.data != "[DONE]")
    body = b"".join(reframed(event, option, key, value) for event in framed)
    return HttpResponse(recorded.status, dict(recorded.headers), body=body)


def reframed(event: SSEEvent, option: str, key: str, value: Any) -> bytes:
    """One event again, its usage counts set."""
    if event.data == "[DONE]":
        return frame(event.event, event.data)
    data = json.loads(event.data)
    for holder in usage_holders(option, data):
        set_count(holder, key, value)
    return frame(event.event, json.dumps(data))


def frame(name: str | None, data: str) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


def scripted(key: str, value: Any) -> HttpResponse:
    usage: dict[str, Any] = {}
    set_count(usage, key, value)
    return HttpResponse(200, {}, body=json.dumps({"text": "done", "usage": usage}).encode())


def parse_with(option: str, stream: bool, key: str, value: Any) -> ModelTurn:
    if option == "scripted":
        return ScriptedAdapter().parse_response(scripted(key, value))
    response = edited_stream(option, key, value) if stream else edited_json(option, key, value)
    return adapter_for(option).parse_response(response)


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD, ids=repr)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_count_that_is_not_a_token_count_makes_the_answer_malformed(
    case: tuple[str, bool, str, str], value: Any
) -> None:
    option, stream, _, key = case
    with pytest.raises(MalformedProviderPayload, match=f"usage {key} is"):
        parse_with(option, stream, key, value)


@pytest.mark.parametrize("value", [None, ABSENT], ids=["null", "absent"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_count_left_out_or_null_is_zero(case: tuple[str, bool, str, str], value: Any) -> None:
    option, stream, field, key = case
    usage = parse_with(option, stream, key, value).usage
    assert getattr(usage, field) == 0


@pytest.mark.parametrize("value", [0, 1234, 2**53 - 1])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_reported_count_is_taken_as_it_is(case: tuple[str, bool, str, str], value: int) -> None:
    option, stream, field, key = case
    assert getattr(parse_with(option, stream, key, value).usage, field) == value


@pytest.mark.parametrize("option", list(PROVIDERS))
def test_a_usage_that_is_not_an_object_makes_the_answer_malformed(option: str) -> None:
    recorded = answers(transcript(option))[0]
    body = json.loads(recorded.body)
    body["usageMetadata" if option == "gemini-generate" else "usage"] = [212, 19]
    response = HttpResponse(200, dict(recorded.headers), body=json.dumps(body).encode())
    with pytest.raises(MalformedProviderPayload, match="usage is not an object"):
        adapter_for(option).parse_response(response)


def test_a_null_count_in_message_delta_keeps_the_count_message_start_gave() -> None:
    recorded = answers(transcript("anthropic", stream=True))[0]
    body = recorded.body.replace(b'"usage":{"output_tokens":19}', b'"usage":{"output_tokens":null}')
    assert body != recorded.body
    turn = adapter_for("anthropic").parse_response(
        HttpResponse(200, dict(recorded.headers), body=body)
    )
    assert turn.usage.output_tokens == 1  # message_start's count; null says nothing new


def test_negative_counts_cannot_defeat_a_token_budget(
    cli: Invoke, store_path: Path, tmp_path: Path
) -> None:
    interactions = list(load_cassette(transcript("openai")).interactions)
    first = interactions[0]
    body = json.loads(first.response.body)
    body["usage"].update(input_tokens=-500, output_tokens=-500, total_tokens=-500)
    edited = replace(first.response, body=json.dumps(body).encode())
    interactions[0] = replace(first, response=edited)
    path = tmp_path / "negative-usage.yaml"
    dump_cassette(interactions, path)
    _, view = run_fixture(cli, path, "--max-total-tokens", "100")
    assert view["state"] == "FAILED"
    assert view["turns"][0]["error"]["type"] == "malformed_payload"
    assert view["calls"] == [] and view["counters"]["total_tokens"] == 0
