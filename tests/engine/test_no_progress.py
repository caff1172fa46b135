"""Repeats and cycles end NO_PROGRESS at exactly the threshold; distinct calls never do."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.scripted import call, final, handler_log, run_script, turn

from toolloop_cli.store import Store, open_store


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


SAME_INTENT = ['{"a": 1, "b": 2}', '{ "b":2,"a":1 }', '{"a":1,\n "b":    2}', '{"b": 2, "a": 1}']


def test_identical_calls_in_any_spelling_stop_at_the_threshold(store: Store) -> None:
    answers = [turn(call("echo", raw)) for raw in SAME_INTENT] + [final()]
    result, transport = run_script(store, answers, no_progress_after=3)
    assert result.target.value == "NO_PROGRESS"
    assert len(transport.requests) == 3  # stopped at the third identical proposal
    calls = store.calls(result.operation.operation_id)
    assert [c.state.value for c in calls] == ["SUCCEEDED", "DUPLICATE", "NOT_EXECUTED"]
    assert len(handler_log(store)) == 1  # the repeat got the earlier result, not a new run
    assert calls[1].model_result is not None
    assert calls[1].model_result["repeat_of"] == calls[0].call_id
    reason = str(result.operation.reason)
    assert "proposed 3 times" in reason and calls[0].call_id in reason
    # the stopped call keeps what validation bound it to, as the calls before it do
    stopped = calls[2]
    assert stopped.arguments_sha256 == calls[0].arguments_sha256 is not None
    assert stopped.idempotency_key is not None and stopped.tool_sha256 == calls[0].tool_sha256


def test_a_call_stopped_by_the_tool_call_budget_keeps_its_binding(store: Store) -> None:
    answers = [turn(call("echo", {"a": 1}), call("echo", {"b": 2})), final()]
    result, _ = run_script(store, answers, max_tool_calls=1)
    assert result.target.value == "BUDGET_EXHAUSTED"
    calls = store.calls(result.operation.operation_id)
    # the first was allowed in the step the second stopped: neither ran
    assert [c.state.value for c in calls] == ["NOT_EXECUTED", "NOT_EXECUTED"]
    assert all(c.arguments_sha256 and c.idempotency_key and c.tool_sha256 for c in calls)


def test_one_below_the_threshold_continues(store: Store) -> None:
    answers = [turn(call("echo", raw)) for raw in SAME_INTENT[:2]] + [final()]
    result, _ = run_script(store, answers, no_progress_after=3)
    assert result.target.value == "COMPLETED"


def test_an_a_b_a_b_cycle_stops(store: Store) -> None:
    a, b = call("echo", {"a": 1}), call("echo", {"b": 1})
    answers = [turn(a), turn(b), turn(a), turn(b), final()]
    result, transport = run_script(store, answers, no_progress_after=5)
    assert result.target.value == "NO_PROGRESS"
    assert len(transport.requests) == 4
    assert "A,B,A,B" in str(result.operation.reason)


def test_a_b_a_then_something_new_continues(store: Store) -> None:
    a, b = call("echo", {"a": 1}), call("echo", {"b": 1})
    answers = [turn(a), turn(b), turn(a), turn(call("echo", {"text": "new"})), final()]
    result, _ = run_script(store, answers, no_progress_after=5)
    assert result.target.value == "COMPLETED"


def test_varied_distinct_runs_are_never_stopped(tmp_path: Path) -> None:
    rng = random.Random(20261202)
    for run in range(100):
        store = open_store(tmp_path / f"s{run}" / "store.db")
        used: set[tuple[str, int]] = set()
        answers = []
        for _ in range(rng.randint(1, 8)):
            calls = []
            for _ in range(rng.randint(1, 3)):
                name = rng.choice(["echo", "async_echo"])
                n = rng.randint(0, 10_000)
                while (name, n) in used:
                    n += 1
                used.add((name, n))
                calls.append(call(name, {"n": n}))
            answers.append(turn(*calls))
        answers.append(final())
        result, _ = run_script(store, answers)
        assert result.target.value == "COMPLETED", (run, result.operation.reason)
        store.close()
