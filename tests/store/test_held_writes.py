"""A transaction's call, operation and transition writes are held and written once, correctly.

The store keeps a transaction's row writes until it commits (``store/held.py``): reads inside
the transaction must still see them, the compare-and-set must still refuse a row that is not
in the state the write expects (and undo the whole transaction), and the transition log must
keep its order and ids across transactions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.engine.clock import iso
from toolloop_cli.engine.records import CallRecord
from toolloop_cli.engine.states import CallState
from toolloop_cli.errors import StoreError
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store
from toolloop_cli.store.repo import Store


def _stored(store: Store, call: CallRecord) -> CallRecord:
    found = store.get_call(call.operation_id, call.response_id, call.call_id)
    assert found is not None, call.call_id
    return found


def test_reads_inside_a_transaction_see_its_held_writes(store_path: Path, clock: FakeClock) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)
    (call,) = [c for c in store.calls(op_id) if c.state == CallState.WAITING_APPROVAL]
    op = store.get_operation(op_id)
    before = len(store.transitions(op_id))
    with store.transaction():
        moved = call.model_copy(update={"state": CallState.DENIED})
        store.save_call(moved, call.state)
        store.log_transition(
            op_id, "call", call.state, "DENIED", iso(clock.now()), "test", call.call_id
        )
        store.save_operation(op.model_copy(update={"reason": "held"}), op.state)
        assert _stored(store, call).state == CallState.DENIED
        assert [c.state for c in store.calls(op_id) if c.call_id == call.call_id] == ["DENIED"]
        assert store.get_operation(op_id).reason == "held"
        log = store.transitions(op_id)
        assert len(log) == before + 1 and log[-1]["target"] == "DENIED"
        # written by the read, the later write of the same row is still checked and kept
        again = iso(clock.now())
        store.save_call(moved.model_copy(update={"finished_at": again}), CallState.DENIED)
    assert _stored(store, call).finished_at == again


def test_a_held_write_whose_row_moved_on_undoes_the_whole_transaction(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)
    call = store.calls(op_id)[0]
    op = store.get_operation(op_id)
    log = store.transitions(op_id)
    with behind_its_back(store_path) as conn:  # another process moved the call on
        conn.execute(
            "UPDATE calls SET state = 'EXPIRED' WHERE operation_id = ? AND call_id = ?",
            (op_id, call.call_id),
        )
    with pytest.raises(StoreError, match="no longer in the state it was read in"):
        with store.transaction():
            store.log_transition(op_id, "operation", op.state, "FAILED", iso(clock.now()), "test")
            store.save_operation(op.model_copy(update={"reason": "never"}), op.state)
            store.save_call(call.model_copy(update={"state": CallState.DENIED}), call.state)
    assert store.transitions(op_id) == log
    assert store.get_operation(op_id).reason == op.reason
    assert _stored(store, call).state == "EXPIRED"
    # the store is usable after the refusal: the next transaction commits
    with store.transaction():
        store.log_transition(op_id, "operation", op.state, op.state, iso(clock.now()), "after")
    assert store.transitions(op_id)[-1]["reason"] == "after"


def test_held_transitions_keep_their_order_and_new_ids_across_transactions(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)
    for batch in range(3):
        with store.transaction():
            for n in range(4):
                store.log_transition(
                    op_id, "operation", "EXECUTING", "EXECUTING", iso(clock.now()), f"{batch}.{n}"
                )
    reasons = [t["reason"] for t in store.transitions(op_id)][-12:]
    assert reasons == [f"{b}.{n}" for b in range(3) for n in range(4)]
    with behind_its_back(store_path) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM transitions ORDER BY id").fetchall()]
    assert len(ids) == len(set(ids))
    store.close()
    assert verify_store(open_store(store_path)).ok


class _Updates:
    """The held writes' connection, noting every UPDATE it runs with its arguments."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.seen: list[tuple[str, list[Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, args: Any = ()) -> Any:
        if sql.startswith("UPDATE"):
            self.seen.append((sql, list(args)))
        return self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        if sql.startswith("UPDATE"):
            self.seen += [(sql, list(r)) for r in rows]
        return self.conn.executemany(sql, rows)


def _set(statement: tuple[str, list[Any]]) -> dict[str, Any]:
    """The columns an UPDATE sets, with their values."""
    sql, args = statement
    names = [part.split(" = ")[0] for part in sql.split(" SET ")[1].split(" WHERE ")[0].split(", ")]
    return dict(zip(names, args, strict=False))


def test_a_changed_row_is_written_in_the_columns_that_changed(
    store_path: Path, clock: FakeClock
) -> None:
    """A call's move leaves the indexes of its arguments and key alone, an operation's the
    one of its tenant: fewer pages per commit. The rows as stored are still whole."""
    store = open_store(store_path)
    op_id = start(store, clock)
    (call,) = [c for c in store.calls(op_id) if c.state == CallState.WAITING_APPROVAL]
    op = store.get_operation(op_id)
    held = store._rows
    spy = held.conn = _Updates(held.conn)
    at = iso(clock.now())
    with store.transaction():
        moved = call.model_copy(update={"state": CallState.DENIED, "finished_at": at})
        store.save_call(moved, call.state)
        store.save_operation(op.model_copy(update={"reason": "changed"}), op.state)
    held.conn = spy.conn
    (call_sets,) = [_set(u) for u in spy.seen if u[0].startswith("UPDATE calls")]
    (op_sets,) = [_set(u) for u in spy.seen if u[0].startswith("UPDATE operations")]
    assert call_sets == {"state": "DENIED", "finished_at": at}
    assert op_sets == {"reason": "changed"}
    stored = _stored(store, call)
    assert (stored.state, stored.finished_at, stored.arguments) == ("DENIED", at, call.arguments)
    assert store.get_operation(op_id).reason == "changed"
    store.close()
    assert verify_store(open_store(store_path)).ok


def test_a_column_changed_around_toolloop_is_not_written_over(
    store_path: Path, clock: FakeClock
) -> None:
    """Arguments changed by hand while the call keeps its state stay as found, for verify to
    report, instead of being silently put back by the next write of the call."""
    store = open_store(store_path)
    op_id = start(store, clock)
    (call,) = [c for c in store.calls(op_id) if c.state == CallState.WAITING_APPROVAL]
    forged = '{"order_id": "ord_forged", "amount_cents": 1}'
    with behind_its_back(store_path) as conn:
        conn.execute(
            "UPDATE calls SET arguments_json = ? WHERE operation_id = ? AND call_id = ?",
            (forged, op_id, call.call_id),
        )
    with store.transaction():
        store.save_call(call.model_copy(update={"state": CallState.DENIED}), call.state)
    with behind_its_back(store_path, read_only=True) as conn:
        (kept,) = conn.execute(
            "SELECT arguments_json FROM calls WHERE operation_id = ? AND call_id = ?",
            (op_id, call.call_id),
        ).fetchone()
    assert kept == forged
    store.close()
    found = [(m.table, m.field) for m in verify_store(open_store(store_path)).mismatches]
    assert ("calls", "arguments_json") in found, found
