"""The running request hash is byte for byte the hash of the whole request's canonical JSON."""

from __future__ import annotations

from typing import Any

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.audit.request_hash import RequestHasher

TOOLS = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]


def openai_body(conversation: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": list(conversation), "tools": TOOLS, **extra}


def test_growing_conversation_hashes_as_the_whole_body() -> None:
    hasher = RequestHasher()
    conversation: list[Any] = [{"role": "user", "content": "naïve ☃ task"}]
    for turn in range(6):
        body = openai_body(conversation, temperature=0.5, max_output_tokens=100)
        assert hasher.digest("op_1", body, conversation) == sha256_of(body)
        conversation.extend(
            [
                {"type": "function_call", "call_id": f"c{turn}", "arguments": '{"x": 1.5}'},
                {"type": "function_call_output", "call_id": f"c{turn}", "output": "é"},
            ]
        )


def test_conversation_key_first_last_or_middle_of_the_body() -> None:
    conversation = [{"role": "user", "content": "t"}, {"n": 2}]
    for body in (
        {"a_first": list(conversation), "model": "m"},
        {"messages": list(conversation), "max_tokens": 10, "model": "m", "tools": TOOLS},
        {"zz_last": list(conversation), "model": "m"},
        {"only": list(conversation)},
    ):
        assert RequestHasher().digest("op", body, conversation) == sha256_of(body)


def test_a_body_not_built_from_the_conversation_is_hashed_in_full() -> None:
    conversation = [{"role": "user", "content": "t"}, {"n": 1}]
    hasher = RequestHasher()
    hasher.digest("op", openai_body(conversation), conversation)
    rebuilt = openai_body([{"role": "user", "content": "t"}, {"n": True}])
    assert hasher.digest("op", rebuilt, conversation) == sha256_of(rebuilt)
    changed_model = {**openai_body(conversation), "model": "other"}
    assert hasher.digest("op", changed_model, conversation) == sha256_of(changed_model)


def test_a_replaced_conversation_list_starts_the_running_hash_again() -> None:
    hasher = RequestHasher()
    first = [{"role": "user", "content": "a"}, {"n": 1}, {"n": 2}]
    hasher.digest("op", openai_body(first), first)
    second = [{"role": "user", "content": "b"}, {"n": 3}, {"n": 4}, {"n": 5}]
    body = openai_body(second)
    assert hasher.digest("op", body, second) == sha256_of(body)
