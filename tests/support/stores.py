"""Stores that the audit and security tests start from: refund operations in known states."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.clock import FakeClock
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import Store, open_store


def sqlite_of(store: Store) -> sqlite3.Connection:
    """The SQLite connection of a file store, for a test that uses what only SQLite has."""
    assert isinstance(store.conn, sqlite3.Connection), f"{store.location} is not a SQLite store"
    return store.conn


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
