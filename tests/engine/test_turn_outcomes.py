"""Every way a turn can end maps to its own state and exit code; nothing runs when it must not."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.clock import FakeClock
from support.paths import FIXTURES, REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.engine.records import Guards
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store

OPENAI = FIXTURES / "openai"


def run_fixture(cli: Invoke, name: str, *extra: str) -> tuple[int, dict[str, object]]:
    result = cli(
        "run",
        TASK,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(OPENAI / name),
        "--json",
        *extra,
    )
    return result.exit_code, json_out(result)


@pytest.mark.parametrize(
    ("fixture", "state", "code"),
    [
        ("incomplete.yaml", "INCOMPLETE", 12),
        ("incomplete_with_call.yaml", "INCOMPLETE", 12),
        ("refusal.yaml", "REFUSED", 11),
        ("http_400.yaml", "FAILED", 13),
        ("http_429_quota.yaml", "FAILED", 13),
        ("failed.yaml", "FAILED", 13),
    ],
)
def test_non_success_outcomes_map_to_their_state_and_run_nothing(
    cli: Invoke, store_path: Path, fixture: str, state: str, code: int
) -> None:
    exit_code, view = run_fixture(cli, fixture, "--max-retries", "0")
    assert (exit_code, view["state"]) == (code, state)
    assert view["final_text"] is None
    assert view["calls"] == []
    assert view["counters"]["tool_calls"] == 0  # type: ignore[index]


def test_a_retryable_500_is_retried_then_completes(cli: Invoke) -> None:
    exit_code, view = run_fixture(cli, "http_500.yaml", "--max-retries", "2")
    assert (exit_code, view["state"]) == (0, "COMPLETED")
    turns = view["turns"]
    assert isinstance(turns, list)
    assert [t["outcome"] for t in turns] == ["API_FAILURE", "FINAL_TEXT"]
    assert turns[0]["error"]["status"] == 500 and turns[0]["error"]["retryable"] is True


def test_a_500_with_no_retries_left_fails(cli: Invoke) -> None:
    exit_code, view = run_fixture(cli, "http_500.yaml", "--max-retries", "0")
    assert (exit_code, view["state"]) == (13, "FAILED")


@pytest.mark.parametrize(
    ("fixture", "tool", "needle"),
    [
        ("unknown_tool.yaml", "refund_everything", "there is no tool named 'refund_everything'"),
        ("invalid_args.yaml", "get_order", "not a valid JSON object"),
        ("schema_violation.yaml", "create_refund_draft", "'4999' is not of type 'integer'"),
    ],
)
def test_invalid_calls_get_an_error_envelope_and_no_handler_runs(
    cli: Invoke, store_path: Path, fixture: str, tool: str, needle: str
) -> None:
    exit_code, view = run_fixture(cli, fixture)
    assert (exit_code, view["state"]) == (0, "COMPLETED")
    calls = view["calls"]
    assert isinstance(calls, list)
    (call,) = calls
    assert call["name"] == tool and call["state"] == "INVALID"
    assert call["result"]["ok"] is False
    assert needle in call["result"]["error"]["message"]
    assert view["counters"]["tool_calls"] == 0  # type: ignore[index]
    assert not (store_path.parent / "payments.db").exists()


def test_an_extra_property_is_invalid(tmp_path: Path, store_path: Path) -> None:
    from toolloop_cli.tools.registry import load_registry

    tool = load_registry(REGISTRY).tools["get_order"]
    problems = tool.argument_violations({"order_id": "ord_1", "force": True})
    assert problems and "force" in problems[0]


def test_parallel_calls_in_one_turn_each_get_a_result(cli: Invoke) -> None:
    exit_code, view = run_fixture(cli, "parallel.yaml")
    assert exit_code == 0
    calls = view["calls"]
    assert isinstance(calls, list)
    assert [c["state"] for c in calls] == ["SUCCEEDED", "SUCCEEDED"]
    assert len({c["call_id"] for c in calls}) == 2


def test_max_turns_trips_budget_exhausted(cli: Invoke, store_path: Path) -> None:
    exit_code, view = run_fixture(
        cli, "../../../transcripts/refund-openai.yaml", "--max-turns", "2"
    )
    assert (exit_code, view["state"]) == (15, "BUDGET_EXHAUSTED")
    assert "max_turns" in str(view["reason"])
    assert view["counters"]["turns"] == 2  # type: ignore[index]


def test_max_tool_calls_trips_budget_exhausted_before_the_call_runs(
    cli: Invoke, store_path: Path
) -> None:
    result = cli(
        "run",
        TASK,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(REFUND_OPENAI),
        "--max-tool-calls",
        "1",
        "--json",
    )
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (15, "BUDGET_EXHAUSTED")
    assert "max_tool_calls" in str(view["reason"])
    calls = view["calls"]
    assert [c["state"] for c in calls] == ["SUCCEEDED", "NOT_EXECUTED"]
    assert view["counters"]["tool_calls"] == 1


def test_resume_after_expiry_marks_the_call_expired_and_runs_nothing(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    paused = operations.start(store, options, clock=clock)
    op_id = paused.operation.operation_id
    (apr,) = store.pending_approvals()
    clock.advance(3599)
    approvals.approve(store, apr.approval_id, "ops-lead", clock=clock)
    clock.advance(2)  # approved in time, resumed after expiry
    done = operations.resume(store, op_id, clock=clock)
    submit = next(c for c in store.calls(op_id) if c.name == "submit_refund")
    assert submit.state.value == "EXPIRED"
    assert submit.model_result is not None
    assert submit.model_result["error"]["code"] == "approval_expired"
    assert submit.started_at is None
    assert ledger_refunds(store_path.parent / "payments.db") == []
    assert done.operation.counters.tool_calls == 2


def test_an_undecided_approval_expires_on_resume(store_path: Path, clock: FakeClock) -> None:
    store = open_store(store_path)
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    op_id = operations.start(store, options, clock=clock).operation.operation_id
    clock.advance(3600)  # the boundary: valid while now < expires_at
    operations.resume(store, op_id, clock=clock)
    (apr,) = store.approvals(op_id)
    assert apr.status == "EXPIRED"
    with pytest.raises(Exception, match="already EXPIRED"):
        approvals.approve(store, apr.approval_id, "ops-lead", clock=clock)


def test_deciding_after_expiry_is_refused(store_path: Path, clock: FakeClock) -> None:
    store = open_store(store_path)
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    operations.start(store, options, clock=clock)
    (apr,) = store.pending_approvals()
    clock.advance(3600)
    with pytest.raises(Exception, match="expired"):
        approvals.approve(store, apr.approval_id, "ops-lead", clock=clock)


def test_guards_are_persisted_with_the_operation(store_path: Path) -> None:
    store = open_store(store_path)
    options = operations.RunOptions(
        task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI, guards=Guards(max_turns=7)
    )
    op = operations.start(store, options).operation
    assert store.get_operation(op.operation_id).guards.max_turns == 7
