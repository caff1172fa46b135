"""A row written several times in one commit is one write of its batch record: the columns the
commit changed, the hash of the row as it committed, and the states it went through first.

``verify`` checks every move of that path as if each state had been written alone: a forged
path (a skipped state, a move out of a final state, a first state that is not the initial
one) is found. Logs written before (every key and row hash spelled out, version 3; a row once
per write, version 2) still verify.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.audit_log import records, reseal, row_writes, writes_of
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.audit.canonical import canonical_text
from toolloop_cli.audit.expand import RowWrite, read_write
from toolloop_cli.audit.hashing import row_sha256
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


def test_each_row_is_written_once_per_record_with_the_states_it_went_through(
    store_path: Path,
) -> None:
    store = open_store(store_path)
    op_id = start(store, FakeClock())  # the refund run, up to its approval
    log = records(store.conn)
    assert {r["v"] for _, r in log} == {4}
    for _, record in log:
        keys = [
            json.dumps([w.kind, w.key])
            for w in (read_write(record, entry) for entry in record["writes"])
            if w is not None and w.kind != "transition"
        ]
        assert len(keys) == len(set(keys)), "a row written twice in one record"
    # a side effect (a read's intent may be held until its result: one write)
    (draft,) = [c for c in store.calls(op_id) if c.name == "create_refund_draft"]
    paths = [
        [*(w.via or []), w.changes.get("state")]
        for _, _, w in writes_of(log, "call")
        if w.key[-1] == draft.call_id
    ]
    # proposed, allowed and started in one commit; its result in the next
    assert paths == [["PROPOSED", "APPROVED", "EXECUTING"], ["SUCCEEDED"]]
    # the transition log still names every move
    moves = [
        (t["source"], t["target"])
        for t in store.transitions(op_id)
        if t["call_id"] == draft.call_id
    ]
    assert moves == [
        ("PROPOSED", "APPROVED"),
        ("APPROVED", "EXECUTING"),
        ("EXECUTING", "SUCCEEDED"),
    ]
    assert verify_store(store).ok
    store.close()


def _forge_path(path: Path, op_id: str, call_id: str, via: list[str] | None) -> int:
    """Give the first write of ``call_id`` the path ``via`` (None: none), re-sealed."""
    with behind_its_back(path) as conn:
        log = records(conn)
        seq, index, write = next(
            (s, i, w) for s, i, w in writes_of(log, "call") if w.key[-1] == call_id
        )
        record = next(r for s, r in log if s == seq)
        entry = record["writes"][index]
        core = entry[:2] if write.stated is None else entry[:4]  # whole, or a change
        record["writes"][index] = [*core, *([via] if via else [])]
        conn.execute("UPDATE audit_log SET record = ? WHERE seq = ?", (canonical_text(record), seq))
        reseal(conn, seq)
    return seq


def _found(path: Path) -> set[tuple[str, str]]:
    store = open_store(path)
    try:
        return {(m.table, m.field) for m in verify_store(store).mismatches}
    finally:
        store.close()


def _first_call(path: Path) -> tuple[str, str]:
    store = open_store(path)
    op_id = start(store, FakeClock())
    # a side effect: its first write (the intent) always has a path of its own
    (call,) = [c for c in store.calls(op_id) if c.name == "create_refund_draft"]
    store.close()
    return op_id, call.call_id


def test_a_path_that_skips_a_state_is_found(store_path: Path) -> None:
    op_id, call_id = _first_call(store_path)
    _forge_path(store_path, op_id, call_id, ["PROPOSED"])  # PROPOSED -> EXECUTING: no such move
    assert ("calls", "state") in _found(store_path)


def test_a_path_that_does_not_start_in_the_initial_state_is_found(store_path: Path) -> None:
    op_id, call_id = _first_call(store_path)
    _forge_path(store_path, op_id, call_id, ["APPROVED"])  # born APPROVED
    assert ("calls", "state") in _found(store_path)


def test_a_path_dropped_from_a_write_is_found(store_path: Path) -> None:
    op_id, call_id = _first_call(store_path)
    _forge_path(store_path, op_id, call_id, None)  # born EXECUTING
    assert ("calls", "state") in _found(store_path)


def test_control_the_path_as_written_verifies(store_path: Path) -> None:
    op_id, call_id = _first_call(store_path)
    _forge_path(store_path, op_id, call_id, ["PROPOSED", "APPROVED"])  # re-sealed, unchanged
    assert _found(store_path) == set()


def _relayout(path: Path, version: int) -> None:
    """Rewrite the log of the store at ``path`` in an older batch layout, re-sealed."""
    with behind_its_back(path) as conn:
        log = records(conn)
        rows = iter(row_writes(conn))  # each write's whole row, in order
        for seq, record in log:
            writes = [read_write(record, entry) for entry in record["writes"]]
            record["v"] = version
            record["writes"] = [
                w
                for write in writes
                if write is not None
                for w in _as_written_by(version, write, next(rows)["row"])
            ]
            conn.execute(
                "UPDATE audit_log SET record = ? WHERE seq = ?", (canonical_text(record), seq)
            )
        for seq, _ in log:
            reseal(conn, seq)


def test_a_version_3_log_with_every_key_and_row_hash_spelled_out_still_verifies(
    store_path: Path,
) -> None:
    store = open_store(store_path)
    start(store, FakeClock())
    store.close()
    _relayout(store_path, 3)
    assert _found(store_path) == set()


def test_a_version_2_log_with_a_write_per_state_still_verifies(store_path: Path) -> None:
    store = open_store(store_path)
    start(store, FakeClock())
    store.close()
    _relayout(store_path, 2)
    assert _found(store_path) == set()


def _as_written_by(version: int, write: RowWrite, row: dict[str, Any]) -> list[list[Any]]:
    """A write as an older layout held it: every key whole and every row hash stated;
    version 2 also wrote one write per state the row went through, each stating the row as
    it then stood (here: as it committed, in that state)."""
    kind, key, changes = write.kind, write.key, write.changes
    stated = row_sha256(row) if write.stated is None else write.stated
    if not write.via:
        return [[kind, key, changes, stated]]
    if version == 3:
        return [[kind, key, changes, stated, write.via]]
    states = [*write.via, row["state"]]
    out = [[kind, key, {**changes, "state": states[0]}, row_sha256({**row, "state": states[0]})]]
    for state in states[1:-1]:
        out.append([kind, key, {"state": state}, row_sha256({**row, "state": state})])
    out.append([kind, key, {"state": states[-1]}, stated])
    return out
