"""A row written several times in one commit is one write of its batch record: the columns the
commit changed, the hash of the row as it committed, and the states it went through first.

``verify`` checks every move of that path as if each state had been written alone: a forged
path (a skipped state, a move out of a final state, a first state that is not the initial
one) is found. Logs written before (a row once per write, version 2) still verify.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.audit_log import records, reseal, row_writes
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.audit.canonical import canonical_text
from toolloop_cli.audit.hashing import row_sha256
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


def _writes_of(log: list[tuple[int, dict[str, Any]]], kind: str) -> list[tuple[int, int, list]]:
    return [
        (seq, index, write)
        for seq, record in log
        for index, write in enumerate(record["writes"])
        if write[0] == kind
    ]


def test_each_row_is_written_once_per_record_with_the_states_it_went_through(
    store_path: Path,
) -> None:
    store = open_store(store_path)
    op_id = start(store, FakeClock())  # the refund run, up to its approval
    log = records(store.conn)
    assert {r["v"] for _, r in log} == {3}
    for _, record in log:
        keys = [json.dumps(w[:2]) for w in record["writes"] if w[0] != "transition"]
        assert len(keys) == len(set(keys)), "a row written twice in one record"
    (get_order,) = [c for c in store.calls(op_id) if c.name == "get_order"]
    paths = [
        ([*w[4], w[2].get("state")] if len(w) == 5 else [w[2].get("state")])
        for _, _, w in _writes_of(log, "call")
        if w[1][-1] == get_order.call_id
    ]
    # proposed, allowed and started in one commit; its result in the next
    assert paths == [["PROPOSED", "APPROVED", "EXECUTING"], ["SUCCEEDED"]]
    # the transition log still names every move
    moves = [
        (t["source"], t["target"])
        for t in store.transitions(op_id)
        if t["call_id"] == get_order.call_id
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
            (s, i, w) for s, i, w in _writes_of(log, "call") if w[1][-1] == call_id
        )
        record = next(r for s, r in log if s == seq)
        record["writes"][index] = [*write[:4], *([via] if via else [])]
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
    (call,) = [c for c in store.calls(op_id) if c.name == "get_order"]
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


def test_a_version_2_log_with_a_write_per_state_still_verifies(store_path: Path) -> None:
    store = open_store(store_path)
    start(store, FakeClock())
    store.close()
    with behind_its_back(store_path) as conn:
        log = records(conn)
        rows = iter(row_writes(conn))  # each write's whole row, in order
        for seq, record in log:
            record["v"] = 2
            record["writes"] = [
                w for write in record["writes"] for w in _one_per_state(write, next(rows)["row"])
            ]
            conn.execute(
                "UPDATE audit_log SET record = ? WHERE seq = ?", (canonical_text(record), seq)
            )
        for seq, _ in log:
            reseal(conn, seq)
    assert _found(store_path) == set()


def _one_per_state(write: list[Any], row: dict[str, Any]) -> list[list[Any]]:
    """A collapsed write as version 2 wrote it: one write per state the row went through,
    each stating the row as it then stood (here: as it committed, in that state)."""
    if len(write) == 4:
        return [write]
    kind, key, changes, stated, via = write
    states = [*via, row["state"]]
    out = [[kind, key, {**changes, "state": states[0]}, row_sha256({**row, "state": states[0]})]]
    for state in states[1:-1]:
        out.append([kind, key, {"state": state}, row_sha256({**row, "state": state})])
    out.append([kind, key, {"state": states[-1]}, stated])
    return out
