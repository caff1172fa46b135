"""The audit log holds one batch record per transaction: each write's changed columns and the
hash of the whole row after it, rebuilt and checked by ``verify``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.audit_log import newest_write, records
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.audit.hashing import row_sha256
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
    (call,) = [c for c in store.calls(op_id) if c.name == "get_order"]
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
    (call,) = [c for c in store.calls(op_id) if c.name == "get_order"]
    store.close()
    with behind_its_back(path) as conn:
        seq, index = newest_write(conn, "call", call_id=call.call_id, column="state")
        (text,) = conn.execute("SELECT record FROM audit_log WHERE seq = ?", (seq,)).fetchone()
        record = json.loads(text)
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
    changes = next(r for s, r in records(mine.conn) if s == seq)["writes"][index][2]
    assert "task" in changes  # whole: no version this connection wrote is the row's last
    assert verify_store(mine).ok
