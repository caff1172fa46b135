"""An Anthropic history another client recorded, with consecutive messages of one role.

The Messages API combines consecutive user or assistant messages into one turn, so a client
may write each call of one answer as its own assistant message (pydantic-ai does, moving a
conversation begun with another provider to Anthropic) and answer them all in the user
message after them. The API answered such a request; a replay starts from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recordings import ANTHROPIC, an_message, an_result, an_text, an_use, exchange, replay, write
from support.cli import Invoke

POLICY = {"type": "object", "properties": {"order_id": {"type": "string"}}}
TOOLS = [
    {"name": "load_capability", "input_schema": {"type": "object"}},
    {"name": "search_tools", "input_schema": {"type": "object"}},
    {"name": "lookup_refund_policy", "input_schema": POLICY},
]


def test_a_first_request_with_two_assistant_messages_in_a_row_replays(
    cli: Invoke, tmp_path: Path
) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [an_text("Can I get a refund on order-123?")]},
        {"role": "assistant", "content": [an_use("call_tw", "load_capability", {"id": "r"})]},
        {"role": "assistant", "content": [an_use("auto_load", "search_tools", {"q": ["x"]})]},
        {
            "role": "user",
            "content": [an_result("call_tw", "Use the policy tool."), an_result("auto_load", "ok")],
        },
        {"role": "assistant", "content": [an_text("Yes, within 30 days.")]},
        {"role": "user", "content": [an_text("And what about order-456?")]},
    ]
    use = an_use("toolu_01", "lookup_refund_policy", {"order_id": "order-456"})
    answered = [
        *history,
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [an_result("toolu_01", "refund allowed for 30 days")]},
    ]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS}
    path = write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**body, "messages": history}, an_message("m1", [use], "tool_use")),
            exchange(
                ANTHROPIC,
                {**body, "messages": answered},
                an_message("m2", [an_text("Also eligible.")], "end_turn"),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [(c["call_id"], c["state"]) for c in out["calls"]] == [("toolu_01", "SUCCEEDED")]
