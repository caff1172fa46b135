"""The pieces of a replay: reading results from requests, comparing them, splitting cassettes."""

from __future__ import annotations

import json
from typing import Any

from toolloop_cli.replay.divergence import (
    RecordedResult,
    compare_requests,
    result_list,
    results_in_request,
)
from toolloop_cli.replay.recorded_tools import execution_of
from toolloop_cli.replay.split import split_conversations
from toolloop_cli.transcripts import Cassette, Interaction, RecordedRequest, RecordedResponse

OPENAI = ("openai", "responses")
OK = '{"ok":true,"result":{"n":1}}'


def test_results_are_read_from_every_provider_request_shape() -> None:
    openai = {"input": [{"type": "function_call_output", "call_id": "call_1", "output": OK}]}
    anthropic = {
        "messages": [
            {"role": "user", "content": "task"},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": OK},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "no such order"}],
                    },
                ],
            },
        ]
    }
    gemini = {"input": [{"type": "function_result", "call_id": "g1", "result": {"n": 1}}]}
    generate = {
        "contents": [
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_order", "response": {"n": 1}}}],
            }
        ]
    }
    assert results_in_request(OPENAI, openai) == {
        "call_1": RecordedResult("call_1", {"ok": True, "result": {"n": 1}})
    }
    assert results_in_request(("anthropic", "messages"), anthropic) == {
        "toolu_1": RecordedResult("toolu_1", {"ok": True, "result": {"n": 1}}, False),
        "toolu_2": RecordedResult("toolu_2", "no such order", True),
    }
    assert results_in_request(("gemini", "interactions"), gemini) == {
        "g1": RecordedResult("g1", {"n": 1}, None)
    }
    assert results_in_request(("gemini", "generate_content"), generate) == {
        "get_order": RecordedResult(None, {"n": 1}, None, "get_order")
    }


def request(*outputs: tuple[str, Any]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for call_id, output in outputs:
        text = output if isinstance(output, str) else json.dumps(output)
        items.append({"type": "function_call_output", "call_id": call_id, "output": text})
    return {"model": "m", "input": items}


def test_missing_extra_and_changed_results_are_named_once_each() -> None:
    recorded = [
        request(),
        request(("a", {"ok": True, "result": 1}), ("b", {"ok": True, "result": 2})),
    ]
    sent = [
        request(),
        request(
            ("a", {"ok": False, "error": {"code": "x", "message": "m"}}),
            ("c", {"ok": True, "result": 3}),
        ),
    ]
    found = [(d.kind, d.call_id, d.path) for d in compare_requests(OPENAI, sent, recorded)]
    assert found == [
        ("result", "a", "$.ok"),
        ("result", "a", "$.result"),
        ("result", "a", "$.error"),
        ("missing_result", "b", "$"),
        ("extra_result", "c", "$"),
    ]


def test_a_recorded_result_answering_no_call_or_one_again_is_named_as_such() -> None:
    """The calls of each answer known: a second recorded result for call ``a`` is not "a
    result for call a this run did not send" (it sent one), but one that answers no call."""
    twice = request(("a", {"ok": True, "result": 1}), ("a", {"ok": True, "result": 1}))
    recorded, sent = [request(), twice], [request(), request(("a", {"ok": True, "result": 1}))]
    (extra,) = compare_requests(OPENAI, sent, recorded, calls=[["a"]])
    assert (extra.kind, extra.call_id) == ("missing_result", "a#")
    assert extra.message == (
        "the recording sent a result (a#) that answers no call of the answer before it, "
        "or answers one a second time; this run did not"
    )
    missing = request(("a", {"ok": True, "result": 1}), ("b", {"ok": True, "result": 2}))
    (plain,) = compare_requests(OPENAI, sent, [request(), missing], calls=[["a", "b"]])
    assert plain.message == "the recording sent a result for call b; this run did not"


def test_results_already_compared_are_not_reported_again_on_later_turns() -> None:
    recorded = [
        request(),
        request(("a", {"ok": True, "result": 1})),
        request(("a", {"ok": True, "result": 1}), ("b", {"ok": True, "result": 2})),
    ]
    sent = [
        request(),
        request(("a", {"ok": True, "result": 9})),
        request(("a", {"ok": True, "result": 9}), ("b", {"ok": True, "result": 2})),
    ]
    found = [(d.turn, d.call_id) for d in compare_requests(OPENAI, sent, recorded)]
    assert found == [(1, "a")]


def test_a_foreign_bare_result_compares_with_the_envelope_payload() -> None:
    recorded = [request(("a", "Potato City"))]
    assert (
        compare_requests(OPENAI, [request(("a", {"ok": True, "result": "Potato City"}))], recorded)
        == []
    )
    (changed,) = compare_requests(
        OPENAI, [request(("a", {"ok": True, "result": "Paris"}))], recorded
    )
    assert (changed.path, changed.recorded, changed.replayed) == ("$", "Potato City", "Paris")


def test_a_foreign_error_text_compares_with_the_message_a_replay_sends_back() -> None:
    """Another tool records a tool error as its text with ``is_error``; the replay sends
    that text back as a tool error, so the recording matches itself (it was a divergence:
    the text against ``{"code": "tool_error", "message": …}``). Another text still differs."""
    api = ("anthropic", "messages")

    def body(content: Any, flag: bool) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": "t", "content": content, "is_error": flag}
        return {"messages": [{"role": "user", "content": [block]}]}

    def replayed(message: str) -> dict[str, Any]:
        error = {"ok": False, "error": {"code": "tool_error", "message": message}}
        return body(json.dumps(error), True)

    recorded = [body("Incorrect passphrase. Try again.", True)]
    assert compare_requests(api, [replayed("Incorrect passphrase. Try again.")], recorded) == []
    as_json = [body('{"reason": "locked"}', True)]
    assert compare_requests(api, [replayed('{"reason":"locked"}')], as_json) == []
    (changed,) = compare_requests(api, [replayed("Try later.")], recorded)
    assert (changed.kind, changed.recorded, changed.replayed) == (
        "result",
        "Incorrect passphrase. Try again.",
        "Try later.",
    )


def test_an_explicit_error_flag_change_is_a_divergence() -> None:
    api = ("anthropic", "messages")

    def body(flag: bool) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": "t", "content": "same", "is_error": flag}
        return {"messages": [{"role": "user", "content": [block]}]}

    (divergence,) = compare_requests(api, [body(True)], [body(False)])
    assert (divergence.kind, divergence.recorded, divergence.replayed) == (
        "error_flag",
        False,
        True,
    )


def test_recorded_envelopes_turn_back_into_the_handler_outcome_that_made_them() -> None:
    def outcome(value: Any, flag: bool | None = None) -> tuple[str, Any]:
        execution = execution_of(RecordedResult("c", value, flag))
        return execution.status, execution.value if execution.status == "ok" else execution.error

    assert outcome({"ok": True, "result": {"n": 1}}) == ("ok", {"n": 1})
    assert outcome({"ok": False, "error": {"code": "tool_error", "message": "nope"}}) == (
        "tool_error",
        "nope",
    )
    assert outcome({"ok": False, "error": {"code": "timeout", "message": "slow"}}) == (
        "timed_out",
        "slow",
    )
    assert outcome("Potato City") == ("ok", "Potato City")
    assert outcome("boom", True) == ("tool_error", "boom")
    status, error = outcome({"ok": False, "error": {"code": "denied", "message": "no"}})
    assert status == "failed" and "no handler produces" in error
    assert execution_of(None).status == "failed"


def interaction(body: dict[str, Any], status: int = 200) -> Interaction:
    return Interaction.of(
        RecordedRequest(
            "POST", "https://api.openai.com/v1/responses", body=json.dumps(body).encode()
        ),
        RecordedResponse(status, body=b"{}"),
    )


def test_a_retry_continues_a_conversation_and_a_fresh_start_splits_it() -> None:
    first, longer = request(), request(("a", OK))
    cassette = Cassette(
        "c.yaml",
        [
            interaction(first, 500),  # retried: same conversation
            interaction(first),
            interaction(longer),
            interaction(first),  # the same start after a success: a new conversation
            interaction(
                {**request(), "previous_response_id": "resp_1"}
            ),  # continues provider state
        ],
    )
    split = split_conversations(cassette)
    assert [c.indices for c in split.conversations] == [(0, 1, 2), (3, 4)]


def test_result_list_keeps_order_and_repeats() -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_order", "response": {"n": 1}}},
                    {"functionResponse": {"name": "get_order", "response": {"n": 2}}},
                ],
            }
        ]
    }
    assert [r.value for r in result_list(("gemini", "generate_content"), body)] == [
        {"n": 1},
        {"n": 2},
    ]
