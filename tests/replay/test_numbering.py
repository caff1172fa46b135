"""Everything a replay or a diff numbers is counted from 0, as its ``--json`` indices are.

Interactions (``skipped[].index``, ``operations[].interactions``, "interaction N" in an
error), conversations ("conversation N", ``$.conversations[N]``, a cassette's runs in a diff,
``FILE#N``), turns, Anthropic messages (``messages[N]``, as the API itself counts them) and a
result repeated under one call id (``call_1#1`` for the second).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recordings import ANTHROPIC, an_message, an_result, an_text, an_use, exchange, write
from support.cli import Invoke, json_out

from toolloop_cli.engine.types import RecordedResult
from toolloop_cli.replay.divergence import keyed
from toolloop_cli.service.diff import run_views

BODY = {"model": "claude-3", "max_tokens": 500}
USER: dict[str, Any] = {"role": "user", "content": "Weather in Oslo?"}


def two_conversations(tmp_path: Path, second: list[dict[str, Any]]) -> Path:
    """Conversation 0 (interaction 0) is fine; conversation 1 (interaction 1) starts from
    ``second``."""
    done = an_message("m1", [an_text("Cold.")], "end_turn")
    return write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**BODY, "messages": [USER]}, done),
            exchange(ANTHROPIC, {**BODY, "messages": second}, done),
        ],
    )


def test_a_diff_of_a_cassette_labels_its_runs_from_0(tmp_path: Path) -> None:
    path = two_conversations(tmp_path, [{"role": "user", "content": "And in Rome?"}])
    assert [view.label for view in run_views(None, str(path))] == [f"{path}#0", f"{path}#1"]


def test_a_conversation_whose_history_toolloop_would_not_send_is_named_from_0(
    cli: Invoke, tmp_path: Path
) -> None:
    """The second conversation (conversation 1) opens with a tool_use its next message does
    not answer: the whole cassette is refused, naming conversation 1 and messages[1]."""
    broken: list[dict[str, Any]] = [
        USER,
        {"role": "assistant", "content": [an_use("toolu_a", "get_weather", {"city": "Oslo"})]},
        {"role": "user", "content": "never mind"},
        {"role": "assistant", "content": [an_text("OK.")]},
        {"role": "user", "content": [an_result("toolu_a", "cold")]},
    ]
    result = cli("replay", str(two_conversations(tmp_path, broken)), "--json")
    assert result.exit_code == 2
    error = json_out(result)["error"]
    assert ": conversation 1: its first request holds a history toolloop would not send" in error
    assert "messages[2] must open with one tool_result for each tool_use of messages[1]" in error


def test_a_result_repeated_under_one_call_id_is_numbered_from_0() -> None:
    first, again, third = (RecordedResult(call_id="call_1", value=n) for n in range(3))
    assert list(keyed([first, again, third])) == ["call_1", "call_1#1", "call_1#2"]
