"""Stores that the audit and security tests start from: refund operations in known states."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.clock import FakeClock
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from toolloop_cli.audit.stored import pack_record, record_text
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import Store, open_store
from toolloop_cli.store.connection import Connection, Cursor
from toolloop_cli.store.postgres import connect_postgres, is_postgres_url


def submitted_refund(location: str) -> str:
    """The id of a refund operation submitted to the store at ``location`` (not run yet)."""
    store = open_store(location)
    try:
        options = operations.RunOptions(TASK, REGISTRY, transcript=REFUND_OPENAI)
        return operations.submit(store, options).operation_id
    finally:
        store.close()


def tampered_copy(source: Path, path: Path, tamper: str | None) -> Path:
    """A copy of the SQLite store ``source`` at ``path``, with one SQL statement run on it
    behind toolloop's back (none: an untouched copy)."""
    shutil.copy(source, path)
    if tamper is not None:
        conn = sqlite3.connect(path)
        record_functions(conn)
        conn.execute(tamper)
        conn.commit()
        conn.close()
    return path


def record_functions(conn: sqlite3.Connection) -> None:
    """``inflate(record)`` and ``deflate(text)`` in SQL: a forger who knows how a SQLite
    store keeps its audit records (``audit.stored``) edits their text in place, e.g.
    ``UPDATE audit_log SET record = deflate(replace(inflate(record), 'a', 'b'))``."""
    conn.create_function("inflate", 1, record_text, deterministic=True)
    conn.create_function("deflate", 1, pack_record, deterministic=True)


def sqlite_of(store: Store) -> sqlite3.Connection:
    """The SQLite connection of a file store, for a test that uses what only SQLite has."""
    assert isinstance(store.conn, sqlite3.Connection), f"{store.location} is not a SQLite store"
    return store.conn


@contextmanager
def behind_its_back(location: str | Path, *, read_only: bool = False) -> Iterator[Connection]:
    """A plain connection to a store's database, SQLite file or PostgreSQL URL, for writing
    what toolloop never would (an attacker, a broken tool, an old version), or for reading
    it as toolloop does not (``read_only``: a SQLite file is opened read-only, never made):
    ``?`` placeholders on both; every change is committed when the block ends."""
    if is_postgres_url(str(location)):
        conn: Connection = connect_postgres(str(location))  # autocommit: each statement
        try:
            yield conn
        finally:
            conn.close()
        return
    raw = (
        sqlite3.connect(f"file:{location}?mode=ro", uri=True)
        if read_only
        else sqlite3.connect(location)
    )
    record_functions(raw)
    try:
        with raw:
            yield raw
    finally:
        raw.close()


def one_row(cursor: Cursor) -> dict[str, Any]:
    """The cursor's one row by column name (on either backend)."""
    row = cursor.fetchone()
    assert row is not None, "no row"
    return dict(zip([d[0] for d in cursor.description], row, strict=True))


def start(store: Store, clock: FakeClock) -> str:
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    return operations.start(store, options, clock=clock).operation.operation_id


def approval_of(store: Store, operation_id: str) -> str:
    (apr,) = [a for a in store.approvals(operation_id) if a.status == "PENDING"]
    return apr.approval_id


def demo_store(path: Path, clock: FakeClock) -> dict[str, str]:
    """A store holding a completed, a paused, a denied and an expired refund operation."""
    store = open_store(path)
    ops: dict[str, str] = {}
    ops["completed"] = start(store, clock)
    approvals.approve(store, approval_of(store, ops["completed"]), "ops-lead", clock=clock)
    operations.resume(store, ops["completed"], clock=clock)
    ops["denied"] = start(store, clock)
    apr = approval_of(store, ops["denied"])
    approvals.approve(store, apr, "finance", deny=True, reason="customer is abroad", clock=clock)
    operations.resume(store, ops["denied"], clock=clock)
    ops["expired"] = start(store, clock)
    clock.advance(3600)
    operations.resume(store, ops["expired"], clock=clock)
    ops["paused"] = start(store, clock)
    states = {name: store.get_operation(op).state.value for name, op in ops.items()}
    assert states == {
        "completed": "COMPLETED",
        "denied": "COMPLETED",
        "expired": "COMPLETED",
        "paused": "WAITING_APPROVAL",
    }
    store.close()
    return ops
