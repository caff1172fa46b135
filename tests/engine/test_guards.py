"""Loop guards: every budget stops exactly at its limit, and nothing runs after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.scripted import call, final, handler_log, run_script, turn

from toolloop_cli.store import Store, open_store


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


def echo_turns(n: int) -> list[dict[str, Any]]:
    return [turn(call("echo", {"n": i})) for i in range(n)] + [final()]


@pytest.mark.parametrize(("limit", "state"), [(5, "COMPLETED"), (4, "BUDGET_EXHAUSTED")])
def test_max_turns(store: Store, limit: int, state: str) -> None:
    result, transport = run_script(store, echo_turns(4), max_turns=limit)  # needs 5 turns
    assert result.target.value == state
    assert len(transport.requests) == min(limit, 5)
    if state == "BUDGET_EXHAUSTED":
        assert "budget max_turns: limit 4" in str(result.operation.reason)


@pytest.mark.parametrize(
    ("limit", "state", "runs"), [(3, "COMPLETED", 3), (2, "BUDGET_EXHAUSTED", 2)]
)
def test_max_tool_calls(store: Store, limit: int, state: str, runs: int) -> None:
    result, transport = run_script(store, echo_turns(3), max_tool_calls=limit)
    assert result.target.value == state
    assert len(handler_log(store)) == runs
    assert result.operation.counters.tool_calls == runs
    if state == "BUDGET_EXHAUSTED":
        assert len(transport.requests) == 3  # the third proposal was never run or answered


def test_max_calls_per_tool(store: Store) -> None:
    answers = [
        turn(call("echo", {"n": 1})),
        turn(call("async_echo", {"n": 1})),
        turn(call("echo", {"n": 2})),
        final(),
    ]
    result, _ = run_script(store, answers, max_calls_per_tool={"echo": 1})
    assert result.target.value == "BUDGET_EXHAUSTED"
    assert "max_calls_per_tool.echo: limit 1" in str(result.operation.reason)
    assert [e["tool"] for e in handler_log(store)] == ["echo", "async_echo"]


@pytest.mark.parametrize(
    ("guard", "limit", "state"),
    [
        ("max_input_tokens", 301, "COMPLETED"),
        ("max_input_tokens", 300, "BUDGET_EXHAUSTED"),
        ("max_output_tokens", 31, "COMPLETED"),
        ("max_output_tokens", 30, "BUDGET_EXHAUSTED"),
        ("max_total_tokens", 331, "COMPLETED"),
        ("max_total_tokens", 330, "BUDGET_EXHAUSTED"),
    ],
)
def test_token_budgets(store: Store, guard: str, limit: int, state: str) -> None:
    usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
    answers = [turn(call("echo", {"n": i}), usage=usage) for i in range(3)] + [final(usage=usage)]
    overrides: dict[str, Any] = {guard: limit}
    result, transport = run_script(store, answers, **overrides)
    assert result.target.value == state
    if state == "BUDGET_EXHAUSTED":
        assert len(transport.requests) == 3
        assert f"budget {guard}" in str(result.operation.reason)


@pytest.mark.parametrize(("reported", "counted"), [(5, 110), (0, 110), (150, 150)])
def test_a_total_is_never_counted_below_input_plus_output(
    store: Store, reported: int, counted: int
) -> None:
    """A provider's total may count more than input and output (reasoning, cached tokens);
    one reported below their sum would let ``max_total_tokens`` be passed unnoticed."""
    usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": reported}
    answers = [turn(call("echo", {"n": i}), usage=usage) for i in range(3)] + [final(usage=usage)]
    result, transport = run_script(store, answers, max_total_tokens=3 * counted)
    assert result.operation.counters.total_tokens == 3 * counted
    assert result.target.value == "BUDGET_EXHAUSTED"
    assert len(transport.requests) == 3  # the fourth request was never sent


def test_cost_budget_uses_the_price_table(store: Store, tmp_path: Path) -> None:
    from support.scripted import GUARDS

    from toolloop_cli.adapters.scripted import ScriptedTransport
    from toolloop_cli.service import operations

    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  scripted-model: {input_per_mtok: 1000000, output_per_mtok: 0}\n")
    usage = {"input_tokens": 1, "output_tokens": 0}
    answers = [turn(call("echo", {"n": i}), usage=usage) for i in range(3)] + [final(usage=usage)]
    transport = ScriptedTransport(answers)
    options = operations.RunOptions(
        task="t",
        registry=GUARDS,
        provider="scripted",
        model="scripted-model",
        guard_overrides={"max_cost_usd": 2.0},
        prices=prices,
    )
    result = operations.start(store, options, transport=transport)
    assert result.target.value == "BUDGET_EXHAUSTED"
    assert result.operation.counters.cost_usd == pytest.approx(2.0)
    assert len(transport.requests) == 2


def test_a_cost_budget_without_a_price_is_refused(store: Store) -> None:
    from toolloop_cli.errors import UsageError

    with pytest.raises(UsageError, match="no price known"):
        run_script(store, [final()], max_cost_usd=1.0)


def test_the_deadline_stops_before_the_next_request(store: Store) -> None:
    clock = FakeClock()

    def later(answer: dict[str, Any]) -> Any:
        def respond(_: object) -> dict[str, Any]:
            clock.advance(40)
            return answer

        return respond

    answers = [later(a) for a in echo_turns(3)]
    result, transport = run_script(store, answers, deadline_s=100.0, clock=clock)
    assert result.target.value == "BUDGET_EXHAUSTED"
    assert "deadline_s" in str(result.operation.reason)
    assert len(transport.requests) == 3


def test_registry_defaults_apply_and_flags_override_them(store: Store, tmp_path: Path) -> None:
    from support.scripted import GUARDS

    registry = tmp_path / "guards.yaml"
    registry.write_text(GUARDS.read_text() + "defaults:\n  max_turns: 2\n")
    (tmp_path / "guard_tools.py").write_text((GUARDS.parent / "guard_tools.py").read_text())
    result, _ = run_script(store, echo_turns(3), registry=registry)
    assert result.target.value == "BUDGET_EXHAUSTED"
    assert result.operation.guards.max_turns == 2
    result, _ = run_script(store, echo_turns(3), registry=registry, max_turns=10)
    assert result.target.value == "COMPLETED"


def test_an_unknown_registry_default_names_its_path(store: Store, tmp_path: Path) -> None:
    from support.scripted import GUARDS

    from toolloop_cli.errors import RegistryError

    registry = tmp_path / "guards.yaml"
    registry.write_text(GUARDS.read_text() + "defaults:\n  max_turnz: 2\n")
    (tmp_path / "guard_tools.py").write_text((GUARDS.parent / "guard_tools.py").read_text())
    with pytest.raises(RegistryError) as caught:
        run_script(store, echo_turns(1), registry=registry)
    assert caught.value.problems[0][0] == "defaults.max_turnz"


@pytest.mark.parametrize(("limit", "state"), [(22, "SUCCEEDED"), (21, "FAILED")])
def test_max_result_bytes_caps_every_result(store: Store, limit: int, state: str) -> None:
    # {"echo":{"n":12345}} is 20 bytes of canonical JSON; {"echo":{"n":123456}} is 21
    answers = [turn(call("echo", {"n": 1234567})), final()]  # 22 bytes
    result, _ = run_script(store, answers, max_result_bytes=limit)
    assert result.target.value == "COMPLETED"
    (c,) = store.calls(result.operation.operation_id)
    assert c.state.value == state
    if state == "FAILED":
        assert c.model_result is not None
        assert c.model_result["error"]["code"] == "result_too_large"
        assert "over the limit of 21" in c.model_result["error"]["message"]


@pytest.mark.parametrize("parallel", [1, 3])
def test_max_parallel_bounds_concurrency(store: Store, parallel: int) -> None:
    calls = [call("slow", {"ms": 60, "n": i}) for i in range(6)]
    result, _ = run_script(store, [turn(*calls), final()], max_parallel=parallel)
    assert result.target.value == "COMPLETED"
    spans = [(e["start"], e["done"]) for e in handler_log(store)]
    most = max(sum(1 for s, d in spans if s <= moment < d) for moment, _ in spans)
    assert most <= parallel
    if parallel > 1:
        assert most > 1  # they did overlap
