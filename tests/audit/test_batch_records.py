"""The audit log holds one batch record per transaction: each row written whole, or its changed
columns and the hash of the whole row after them, rebuilt and checked by ``verify``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.audit_log import newest_write, records, reseal
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.audit.expand import read_write
from toolloop_cli.audit.hashing import GENESIS, Write, row_sha256, seal_batch
from toolloop_cli.audit.stored import record_text
from toolloop_cli.engine.states import OpState
from toolloop_cli.errors import StoreError
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store
from toolloop_cli.store.rows import CALL_NAMES


def test_a_write_holds_only_what_it_changed_and_the_hash_of_the_whole_row(
    store_path: Path,
) -> None:
    store = open_store(store_path)
    op_id = start(store, FakeClock())
    log = records(store.conn)
    assert {r["kind"] for _, r in log} == {"batch"}
    # the commits of the run: one record each, every write of the transaction in it
    assert all(r["writes"] for _, r in log)
    # a side effect: its intent is committed before its handler runs, its result after
    (call,) = [c for c in store.calls(op_id) if c.name == "create_refund_draft"]
    seq, index = newest_write(store.conn, "call", call_id=call.call_id, column="state")
    _, changes, stated = next(r for s, r in log if s == seq)["writes"][index][1:4]
    assert changes["state"] == "SUCCEEDED"
    assert "raw_arguments" not in changes and "name" not in changes  # fixed at insert
    row = store.conn.execute(
        f"SELECT {', '.join(CALL_NAMES)} FROM calls WHERE call_id = ?", (call.call_id,)
    ).fetchone()
    assert stated == row_sha256(dict(zip(CALL_NAMES, row, strict=True)))
    assert verify_store(store).ok


def test_changes_that_do_not_add_up_to_the_stated_row_are_found(store_path: Path) -> None:
    path = store_path
    store = open_store(path)
    op_id = start(store, FakeClock())
    (call,) = [c for c in store.calls(op_id) if c.name == "create_refund_draft"]
    store.close()
    with behind_its_back(path) as conn:
        seq, index = newest_write(conn, "call", call_id=call.call_id, column="state")
        (text,) = conn.execute("SELECT record FROM audit_log WHERE seq = ?", (seq,)).fetchone()
        record = json.loads(record_text(text))
        record["writes"][index][2]["state"] = "FAILED"  # the row hash is left as it was
        conn.execute("UPDATE audit_log SET record = ? WHERE seq = ?", (json.dumps(record), seq))
    found = {(m.table, m.key, m.field) for m in verify_store(open_store(path)).mismatches}
    assert ("audit_log", f"seq {seq} write {index}", "row_sha256") in found


def test_a_row_another_process_changed_is_refused_then_written_whole(store_path: Path) -> None:
    """A delta is taken from the version this connection wrote; if another one wrote the row
    since, the compare-and-set refuses the stale write, and after a fresh read the next write
    holds the whole row."""
    mine, other = open_store(store_path), open_store(store_path)
    op_id = start(mine, FakeClock())  # waits for approval: the row mine wrote last
    op = mine.get_operation(op_id)
    theirs = other.get_operation(op_id)
    with other.transaction():
        other.save_operation(
            theirs.model_copy(update={"reason": "x", "updated_at": "2026-12-01T11:00:00.000000Z"}),
            OpState.WAITING_APPROVAL,
        )
    with pytest.raises(StoreError, match="another process changed it"):
        with mine.transaction():
            mine.save_operation(op.model_copy(update={"reason": "mine"}), op.state)
    fresh = mine.get_operation(op_id)
    with mine.transaction():
        mine.save_operation(fresh.model_copy(update={"reason": "mine"}), fresh.state)
    seq, index = newest_write(mine.conn, "operation", operation_id=op_id)
    record = next(r for s, r in records(mine.conn) if s == seq)
    write = read_write(record, record["writes"][index])
    assert write is not None
    # whole: no version this connection wrote is the row's last
    assert write.stated is None and "task" in write.changes
    assert verify_store(mine).ok


def test_new_rows_are_written_whole_without_a_row_hash_or_their_operation_id(
    store_path: Path,
) -> None:
    store = open_store(store_path)
    op_id = start(store, FakeClock())
    for _, record in records(store.conn):
        assert record["v"] == 4 and record["operation_id"] == op_id
        for entry in record["writes"]:
            assert op_id not in json.dumps(entry), "the record's own operation id repeated"
            if entry[0] == "transition":  # an event: always whole, its hash implied
                assert isinstance(entry[1], dict) and len(entry) == 2
    (call,) = [c for c in store.calls(op_id) if c.name == "get_order"]
    first = next(
        w
        for _, r in records(store.conn)
        for w in (read_write(r, e) for e in r["writes"])
        if w is not None and w.kind == "call" and w.key[-1] == call.call_id
    )
    # the call's insert: every column, the operation id put back by the reader
    assert first.stated is None
    assert first.key == [op_id, call.response_id, call.call_id]
    assert first.changes["operation_id"] == op_id and first.changes["name"] == "get_order"
    assert verify_store(store).ok


def _forge_write(path: Path, kind: str, forge: object) -> tuple[int, int]:
    """Apply ``forge(entry)`` to the newest ``kind`` write (for a call: a change), the record
    and links re-sealed."""
    with behind_its_back(path) as conn:
        seq, index, record = next(
            (seq, i, r)
            for seq, r in reversed(records(conn))
            for i, e in enumerate(r["writes"])
            if e[0] == kind and (kind != "call" or isinstance(e[1], list))
        )
        assert callable(forge)
        record["writes"][index] = forge(record["writes"][index])
        conn.execute("UPDATE audit_log SET record = ? WHERE seq = ?", (json.dumps(record), seq))
        reseal(conn, seq)
    return seq, index


@pytest.mark.parametrize(
    ("kind", "forge"),
    [
        # a whole row that names an operation again: whose it is would depend on the reader
        ("transition", lambda e: [e[0], {**e[1], "operation_id": "op_someone_else"}]),
        # a whole row without its key
        ("transition", lambda e: [e[0], {c: v for c, v in e[1].items() if c != "id"}]),
        # a change whose key still spells out the record's operation
        ("operation", lambda e: [e[0], ["op_someone_else", *e[1]], *e[2:]]),
        # a change with a key too short for its kind
        ("call", lambda e: [e[0], e[1][:1], *e[2:]]),
    ],
    ids=[
        "whole-row-names-an-operation",
        "whole-row-without-key",
        "key-with-operation",
        "short-key",
    ],
)
def test_a_malformed_version_4_write_is_reported_not_read(
    store_path: Path, kind: str, forge: object
) -> None:
    store = open_store(store_path)
    start(store, FakeClock())
    store.close()
    seq, index = _forge_write(store_path, kind, forge)
    found = {(m.table, m.key, m.field) for m in verify_store(open_store(store_path)).mismatches}
    assert ("audit_log", f"seq {seq} write {index}", "writes") in found


def test_a_row_of_another_operation_is_never_sealed_into_a_record() -> None:
    theirs = Write("transition", [7], {"id": 7, "operation_id": "op_b", "target": "X"})
    with pytest.raises(ValueError, match="another operation"):
        seal_batch(1, GENESIS, "op_a", [theirs])
    change = Write("call", ["op_b", "r", "c"], {"state": "SUCCEEDED"}, "sha256:" + "0" * 64)
    with pytest.raises(ValueError, match="another operation"):
        seal_batch(1, GENESIS, "op_a", [change])
