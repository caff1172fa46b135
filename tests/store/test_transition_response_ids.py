"""The state log names a call by (response id, call id), and stores from before still verify.

Call ids are unique per response only (a provider may name every turn's calls ``call_0``), so
each call and approval transition carries the response id of its call, in the row and in its
audit record. A store written before the column existed (``transition_response_id``) migrates
to NULLs that its records never had, and verifies as it did.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.audit_log import rewrite_as_row_records, row_writes
from support.cli import Invoke
from support.clock import FakeClock
from support.stores import approval_of, behind_its_back, start

from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


def _records(store_path: Path) -> list[dict[str, Any]]:
    with behind_its_back(store_path) as conn:
        return [w["row"] for w in row_writes(conn) if w["kind"] == "transition"]


def test_each_call_and_approval_transition_names_the_response_of_its_call(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)
    approvals.approve(store, approval_of(store, op_id), "ops-lead", clock=clock)
    operations.resume(store, op_id, clock=clock)
    calls = {c.call_id: c.response_id for c in store.calls(op_id)}
    log = store.transitions(op_id)
    named = [t for t in log if t["kind"] in ("call", "approval")]
    assert named and {t["kind"] for t in named} == {"call", "approval"}
    for entry in named:
        assert entry["response_id"] == calls[entry["call_id"]], entry
    assert all(t["response_id"] is None for t in log if t["kind"] == "operation")
    store.close()
    records = _records(store_path)
    assert len(records) == len(log)
    assert [(r["call_id"], r["response_id"]) for r in records] == [
        (t["call_id"], t["response_id"]) for t in log
    ]
    assert verify_store(open_store(store_path)).ok


def _downgrade(store_path: Path) -> None:
    """Make the store as the code before the column wrote it: no column, no migration
    record, and transition records without the key, re-sealed into the chain as written."""
    conn = sqlite3.connect(store_path)

    def without_response(kind: str, row: dict[str, Any]) -> dict[str, Any]:
        if kind == "transition":
            row.pop("response_id")
        return row

    rewrite_as_row_records(conn, without_response)  # that code wrote one record per write
    conn.execute("ALTER TABLE transitions DROP COLUMN response_id")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'transition_response_id'")
    conn.commit()
    conn.close()


@pytest.mark.sqlite_only  # the SQLite migration history; PostgreSQL's starts with the column
def test_a_store_from_before_the_column_migrates_verifies_and_goes_on(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)  # waiting for the submit's approval
    store.close()
    _downgrade(store_path)
    unmigrated = cli("verify")  # read-only: it migrates nothing, and says so
    assert unmigrated.exit_code == 2 and "transition_response_id" in unmigrated.stderr

    store = open_store(store_path)  # any other opening migrates it
    old = store.transitions(op_id)
    assert old and all(t["response_id"] is None for t in old)
    store.close()
    migrated = cli("verify")  # NULL columns where the records have no key: what was written
    assert migrated.exit_code == 0, migrated.output

    store = open_store(store_path)
    approvals.approve(store, approval_of(store, op_id), "ops-lead", clock=clock)
    operations.resume(store, op_id, clock=clock)
    new = store.transitions(op_id)[len(old) :]
    submit = next(c for c in store.calls(op_id) if c.name == "submit_refund")
    assert [
        (t["kind"], t["target"], t["response_id"]) for t in new if t["call_id"] == submit.call_id
    ] == [
        ("approval", "APPROVED", submit.response_id),
        ("call", "APPROVED", submit.response_id),
        ("call", "EXECUTING", submit.response_id),
        ("call", "SUCCEEDED", submit.response_id),
    ]
    store.close()
    assert cli("verify").exit_code == 0
