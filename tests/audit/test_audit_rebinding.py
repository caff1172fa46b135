"""Before results go back to a model, each is re-bound to its call; a bad set is never sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from support.clock import FakeClock
from support.paths import FIXTURES, REGISTRY, TASK
from support.stores import behind_its_back

from toolloop_cli.audit.binding import call_binding_sha256, check_result_set, result_sha256
from toolloop_cli.engine.context import call_binding_inputs, op_binding
from toolloop_cli.engine.records import CallRecord
from toolloop_cli.engine.types import HttpRequest, HttpResponse, ResultForModel
from toolloop_cli.service import operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store

PARALLEL = FIXTURES / "openai" / "parallel.yaml"  # two get_order calls of the same shape


class Paused(Exception):
    """Raised from the event sink to leave an operation where a test wants it."""


def pause_at(state: str) -> Any:
    def sink(kind: str, data: dict[str, object]) -> None:
        if kind == "transition" and data["target"] == state:
            raise Paused(state)

    return sink


class NoSend:
    """A transport that records every request it is asked to send, and answers none."""

    name = "no-send"

    def __init__(self) -> None:
        self.sent: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.sent.append(request)
        raise AssertionError("a request was sent")


def results_ready(store: Store, clock: FakeClock) -> str:
    """An operation whose two get_order results are committed, not yet sent."""
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=PARALLEL)
    with pytest.raises(Paused):
        operations.start(store, options, clock=clock, on_event=pause_at("RESULTS_READY"))
    (op,) = store.list_operations()
    assert op.state.value == "RESULTS_READY"
    return op.operation_id


def swap(path: Path, operation_id: str, columns: tuple[str, ...]) -> None:
    """Swap ``columns`` between the operation's two calls, in the store file."""
    with behind_its_back(path) as conn:
        names = ", ".join(columns)
        (a, *va), (b, *vb) = conn.execute(
            f"SELECT call_id, {names} FROM calls WHERE operation_id = ? ORDER BY seq",
            (operation_id,),
        ).fetchall()
        sets = ", ".join(f"{c} = ?" for c in columns)
        for call_id, values in ((a, vb), (b, va)):
            conn.execute(
                f"UPDATE calls SET {sets} WHERE operation_id = ? AND call_id = ?",
                (*values, operation_id, call_id),
            )


def resume_refused(store: Store, operation_id: str, clock: FakeClock) -> str:
    transport = NoSend()
    turns = len(store.turns(operation_id))
    result = operations.resume(store, operation_id, clock=clock, transport=transport)
    assert result.operation.state.value == "ESCALATED"
    assert transport.sent == [] and len(store.turns(operation_id)) == turns
    return str(result.operation.reason)


@pytest.mark.parametrize(
    "columns",
    [
        ("model_result_json",),
        ("model_result_json", "result_sha256"),
        ("model_result_json", "result_sha256", "call_binding_sha256"),
    ],
)
def test_swapped_results_of_two_same_shape_calls_are_not_sent(
    store_path: Path, clock: FakeClock, columns: tuple[str, ...]
) -> None:
    store = open_store(store_path)
    op_id = results_ready(store, clock)
    swap(store_path, op_id, columns)
    reason = resume_refused(store, op_id, clock)
    assert reason.startswith("results not sent: integrity check failed")
    assert "call_" in reason
    assert not verify_store(store).ok


def test_a_swap_with_bindings_recomputed_is_caught_by_the_audit_log(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = results_ready(store, clock)
    swap(store_path, op_id, ("model_result_json",))
    op = op_binding(store.get_operation(op_id))
    with behind_its_back(store_path) as conn:  # the attacker re-derives both row hashes
        for call in store.calls(op_id):
            digest = result_sha256(call.model_result, call.protected_audit)
            binding = call_binding_sha256(op, call_binding_inputs(call), digest)
            conn.execute(
                "UPDATE calls SET result_sha256 = ?, call_binding_sha256 = ?"
                " WHERE operation_id = ? AND call_id = ?",
                (digest, binding, op_id, call.call_id),
            )
    reason = resume_refused(store, op_id, clock)
    assert "the audit log holds another binding" in reason


def test_a_missing_result_is_not_sent(store_path: Path, clock: FakeClock) -> None:
    store = open_store(store_path)
    op_id = results_ready(store, clock)
    first = store.calls(op_id)[0].call_id
    with behind_its_back(store_path) as conn:
        conn.execute(
            "UPDATE calls SET model_result_json = NULL WHERE operation_id = ? AND call_id = ?",
            (op_id, first),
        )
    assert f"no result for call {first}" in resume_refused(store, op_id, clock)


def test_an_untouched_result_set_is_sent_and_completes(store_path: Path, clock: FakeClock) -> None:
    store = open_store(store_path)
    op_id = results_ready(store, clock)
    assert operations.resume(store, op_id, clock=clock).operation.state.value == "COMPLETED"
    assert verify_store(store).ok


# -- the results table, as a pure check ----------------------------------------------------


def turn_calls(store_path: Path, clock: FakeClock) -> tuple[dict[str, Any], list[CallRecord]]:
    store = open_store(store_path)
    op_id = results_ready(store, clock)
    return op_binding(store.get_operation(op_id)), store.calls(op_id)


def result_of(call: CallRecord, **change: Any) -> ResultForModel:
    assert call.model_result is not None
    fields: dict[str, Any] = {
        "response_id": call.response_id,
        "call_id": call.call_id,
        "name": call.name,
        "is_error": False,
        "content": call.model_result,
    }
    return ResultForModel(**{**fields, **change})


@pytest.fixture
def table(store_path: Path, clock: FakeClock) -> tuple[dict[str, Any], list[CallRecord]]:
    return turn_calls(store_path, clock)


def problems(table: tuple[dict[str, Any], list[CallRecord]], results: list[Any]) -> list[str]:
    op, calls = table
    return check_result_set(op, [call_binding_inputs(c) for c in calls], results)


def test_the_true_set_in_any_order_is_accepted(table: Any) -> None:
    _, (a, b) = table
    assert problems(table, [result_of(a), result_of(b)]) == []
    assert problems(table, [result_of(b), result_of(a)]) == []


def test_missing_duplicated_unknown_and_misbound_results_are_refused(table: Any) -> None:
    _, (a, b) = table
    cases = {
        "no result for call": [result_of(a)],
        "two results for call": [result_of(a), result_of(a), result_of(b)],
        "unknown call": [result_of(a), result_of(b), result_of(a, call_id="call_forged")],
        "unknown call ": [result_of(a, response_id="resp_other"), result_of(b)],
        "names tool": [result_of(a, name="submit_refund"), result_of(b)],
        "not the result committed": [result_of(a, content=b.model_result), result_of(b)],
    }
    for needle, results in cases.items():
        found = problems(table, results)
        assert any(needle.strip() in p for p in found), (needle, found)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the fixture is only read: one store for every example
@given(st.data())
def test_a_set_is_accepted_iff_it_is_a_bijection_on_the_calls(
    table: Any, data: st.DataObject
) -> None:
    _, calls = table
    pool = [result_of(c) for c in calls] + [
        result_of(calls[0], call_id="call_unknown"),
        result_of(calls[1], response_id="resp_elsewhere"),
    ]
    picked = data.draw(st.lists(st.sampled_from(range(len(pool))), max_size=5))
    results = [pool[i] for i in picked]
    exact = sorted(picked) == list(range(len(calls)))
    assert (problems(table, results) == []) == exact
