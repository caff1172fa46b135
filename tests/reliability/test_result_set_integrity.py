"""Result-set integrity: results go back only as a bijection onto the turn's calls.

Sets are generated from the true results of a real turn: drop k, duplicate k, add an
unknown call id, take an id from another response, rename the tool, reorder. The check
accepts exactly the reorderings; when the stored table itself is wrong the operation stops
ESCALATED and nothing is sent, the calls and the conversation byte for byte unchanged.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from support.paths import FIXTURES
from support.scripted import call, final, turn

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.audit.binding import check_result_set
from toolloop_cli.engine.context import call_binding_inputs, op_binding
from toolloop_cli.engine.states import CALL_HAS_RESULT, OpState
from toolloop_cli.engine.types import ResultForModel
from toolloop_cli.service import operations
from toolloop_cli.store import Store, open_store

GUARDS = FIXTURES / "registries" / "guards.yaml"
SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"


def _results_ready(store: Store) -> str:
    """A finished operation whose first turn had four calls (one of an unknown tool)."""
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="scripted", model="scripted-model"
    )
    calls = [call("echo", {"n": 1}), call("echo", {"n": 2}), call("slow", {"ms": 1}), call("nope")]
    transport = ScriptedTransport([turn(*calls), final()])
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.COMPLETED
    return result.operation.operation_id


@pytest.fixture(scope="module")
def turn_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[Any], list[Any]]:
    """(operation binding, the first turn's call table, its true results)."""
    store = open_store(tmp_path_factory.mktemp("results") / "store.db")
    op_id = _results_ready(store)
    op = store.get_operation(op_id)
    calls = [c for c in store.calls(op_id) if c.turn_idx == 0]
    results = [
        ResultForModel(
            response_id=c.response_id,
            call_id=c.call_id,
            name=c.name,
            is_error=c.model_result.get("ok") is not True if c.model_result else True,
            content=c.model_result,
        )
        for c in calls
        if c.state in CALL_HAS_RESULT and c.model_result is not None
    ]
    return op_binding(op), [call_binding_inputs(c) for c in calls], results


@st.composite
def perturbed(draw: st.DrawFn, true: list[ResultForModel]) -> tuple[list[ResultForModel], bool]:
    """A result list made from the true one, and whether it is still a bijection."""
    out = list(true)
    changes = draw(
        st.lists(
            st.sampled_from(["drop", "duplicate", "unknown", "foreign", "rename", "content"]),
            max_size=3,
        )
    )
    for change in changes:
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        r = out[i]
        match change:
            case "drop":
                del out[i]
            case "duplicate":
                out.insert(draw(st.integers(0, len(out))), r)
            case "unknown":
                out.append(r.model_copy(update={"call_id": r.call_id + "x"}))
            case "foreign":
                out[i] = r.model_copy(update={"response_id": "resp_other"})
            case "rename":
                out[i] = r.model_copy(update={"name": r.name + "_"})
            case "content":
                out[i] = r.model_copy(update={"content": {"ok": True, "result": "forged"}})
    out = draw(st.permutations(out))
    key = lambda r: (r.response_id, r.call_id, r.name, repr(r.content))  # noqa: E731
    return out, sorted(map(key, out)) == sorted(map(key, true))


@settings(max_examples=20_000 if SOAK else 1000, deadline=None, derandomize=not SOAK)
@given(data=st.data())
def test_results_are_accepted_iff_they_are_the_calls_results_in_any_order(
    turn_table: tuple[Any, list[Any], list[Any]], data: st.DataObject
) -> None:
    op, calls, true = turn_table
    results, bijection = data.draw(perturbed(true))
    assert (check_result_set(op, calls, results) == []) == bijection


#: the order rows are dumped in: insertion, or the key of a table kept in its key's order
_ORDER = {"conversation": "operation_id, seq", "blobs": "sha256"}


def _dump(path: Path, *tables: str) -> list[Any]:
    with closing(sqlite3.connect(path)) as conn:
        return [
            list(conn.execute(f"SELECT * FROM {t} ORDER BY {_ORDER.get(t, 'rowid')}"))
            for t in tables
        ]


def test_a_wrong_stored_table_escalates_and_changes_no_call_or_conversation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    store = open_store(path)
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="scripted", model="scripted-model"
    )
    transport = ScriptedTransport([turn(call("echo", {"n": 1}), call("echo", {"n": 2})), final()])
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.COMPLETED
    second = result.operation.operation_id
    # put it back to RESULTS_READY through the store (an audited write: a row set back around
    # toolloop is refused before anything runs), then make its stored call table wrong
    done = store.get_operation(second)
    with store.transaction():
        back = done.model_copy(update={"state": OpState.RESULTS_READY, "current_turn": 0})
        store.save_operation(back, done.state)
    with closing(sqlite3.connect(path)) as conn:  # a result moved to the other call
        conn.execute(
            "UPDATE calls SET call_id = call_id || 'x' WHERE operation_id = ? AND seq = 1",
            (second,),
        )
        conn.commit()
    before = _dump(path, "calls", "conversation", "blobs", "turns")
    sent = ScriptedTransport([final()])
    stepped = operations.step(store, second, transport=sent)
    assert stepped.target is OpState.ESCALATED
    assert "integrity" in (stepped.operation.reason or "")
    assert sent.requests == []
    assert _dump(path, "calls", "conversation", "blobs", "turns") == before
