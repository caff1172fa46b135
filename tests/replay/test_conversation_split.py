"""Which conversation a recorded request continues, when a client echoes answers its own way.

Anthropic answers name who called each tool (``caller: {"type": "direct"}``, the model
itself); clients rebuild the assistant message from their own types and may leave it out.
A client may also rewrite the answer it echoes (keep the tool call, drop the text beside it);
a request doing so still continues its conversation, even when the history it carries also
holds an earlier conversation that had finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recordings import ANTHROPIC, an_message, an_result, an_text, an_use, exchange, replay, write
from support.cli import Invoke

from toolloop_cli.adapters._messages_reader import MessagesReader

WEATHER = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    }
]
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 500, "tools": WEATHER}
DIRECT = {"type": "direct"}


def direct(block: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block as the Messages API answers it now: with its caller."""
    return {**block, "caller": DIRECT}


def asked(messages: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, Any]:
    return exchange(ANTHROPIC, {**BODY, "messages": messages}, answer)


def test_a_tool_use_echoed_without_its_direct_caller_is_the_same_block() -> None:
    reader = MessagesReader()
    use = an_use("toolu_1", "get_weather", {"location": "Oslo"})
    answered = {"role": "assistant", "content": [an_text("Checking."), direct(use)]}
    echoed = {"role": "assistant", "content": [an_text("Checking."), use]}
    assert reader.comparable(echoed) == reader.comparable(answered)
    called_by_code = {**use, "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}}
    by_code = {"role": "assistant", "content": [called_by_code]}
    assert reader.comparable({"role": "assistant", "content": [use]}) != reader.comparable(by_code)


def test_two_conversations_from_one_prompt_each_keep_their_own_answer_without_caller(
    cli: Invoke, tmp_path: Path
) -> None:
    """The same prompt sent twice (a batch, a retried test), each answered with its own call;
    each client echoes its call without ``caller``: each continuation joins its own
    conversation, not the newest one that merely starts the same way."""
    user = {"role": "user", "content": "Weather in Oslo?"}
    use_a = an_use("toolu_a", "get_weather", {"location": "Oslo"})
    use_b = an_use("toolu_b", "get_weather", {"location": "Oslo, NO"})

    def answered(use: dict[str, Any], text: str) -> list[dict[str, Any]]:
        return [
            user,
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [an_result(use["id"], text)]},
        ]

    path = write(
        tmp_path,
        [
            asked([user], an_message("m1", [direct(use_a)], "tool_use")),
            asked([user], an_message("m2", [direct(use_b)], "tool_use")),
            asked(answered(use_a, "cold"), an_message("m3", [an_text("Cold.")], "end_turn")),
            asked(answered(use_b, "freezing"), an_message("m4", [an_text("Brr.")], "end_turn")),
        ],
    )
    code, out = replay(cli, path)
    assert [op["interactions"] for op in out["operations"]] == [[0, 2], [1, 3]]
    assert (code, out["divergences"]) == (0, [])
    assert [(c["call_id"], c["result"]["result"]) for c in out["calls"]] == [("toolu_a", "cold")]


def test_a_finished_conversation_does_not_take_a_request_that_continues_a_later_one(
    cli: Invoke, tmp_path: Path
) -> None:
    """Conversation 0 ends on a final answer; a new user turn starts conversation 1 from its
    history. The client echoes conversation 1's answer rewritten (the text beside the call
    dropped) and answers the call: that request carries conversation 0's last request and
    answer too, but it continues conversation 1, which asked for the result it carries."""
    user = {"role": "user", "content": "Hello"}
    hello = [an_text("Hi! How can I help?")]
    again: list[dict[str, Any]] = [
        user,
        {"role": "assistant", "content": hello},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    use = an_use("toolu_1", "get_weather", {"location": "Oslo"})
    rewritten: list[dict[str, Any]] = [
        *again,
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [an_result("toolu_1", "cold")]},
    ]
    path = write(
        tmp_path,
        [
            asked([user], an_message("m1", hello, "end_turn")),
            asked(again, an_message("m2", [an_text("Let me check."), use], "tool_use")),
            asked(rewritten, an_message("m3", [an_text("Cold.")], "end_turn")),
        ],
    )
    code, out = replay(cli, path)
    assert [(op["interactions"], op["state"]) for op in out["operations"]] == [
        ([0], "COMPLETED"),
        ([1, 2], "COMPLETED"),
    ]
    assert (code, out["divergences"]) == (0, [])
