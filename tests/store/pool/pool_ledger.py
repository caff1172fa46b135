"""Handlers of ``registry.yaml``: a payments service that keeps no idempotency of its own.

Every ``pay`` inserts a payment row, whatever came before: a second run of one call would
pay twice. ``lookup_payment`` answers toolloop's reconcile question (what became of this
key?) from the rows, as a real service's lookup would.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from toolloop_cli.tools.context import ToolContext

#: how long the service takes to answer once it has applied a request (seconds)
REPLY_S = 0.05


def _db(context: ToolContext) -> sqlite3.Connection:
    return connect(Path(context.data_dir))


def connect(data_dir: Path) -> sqlite3.Connection:
    data_dir.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(data_dir / "pool.db", timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for table in ("drafts", "payments"):
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (key TEXT, operation_id TEXT, result TEXT)"
        )
    return conn


def _insert(table: str, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """One row per request, written with its answer in one statement."""
    key = context.idempotency_key
    if not key:
        raise ValueError("needs an idempotency key")
    _freeze_once()
    digits = arguments["order_id"].removeprefix("ord_")
    number = secrets.randbelow(10**9)
    if table == "drafts":
        result = {"draft_id": f"drf_{digits}_{number}", "status": "draft"}
    else:
        result = {"refund_id": f"rf_{digits}_{number}", "status": "submitted"}
    result |= {"order_id": arguments["order_id"], "amount_cents": arguments["amount_cents"]}
    conn = _db(context)
    try:
        conn.execute(
            f"INSERT INTO {table} (key, operation_id, result) VALUES (?, ?, ?)",
            (key, context.operation_id, json.dumps(result)),
        )
    finally:
        conn.close()
    time.sleep(REPLY_S)  # a slow reply: a kill lands between the effect and its answer
    return result


#: a file's path: the first request (of any process) to find it missing creates it and stops
#: its own process (SIGSTOP) before applying the effect, as a frozen runner would
FREEZE_ENV = "TOOLLOOP_POOL_FREEZE"


def _freeze_once() -> None:
    marker = os.environ.get(FREEZE_ENV)
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    # sent to this thread: it stops before it runs another line (a signal sent to the
    # process may be taken by another thread, and this one run on for a moment)
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def _lookup(table: str, context: ToolContext) -> dict[str, Any] | None:
    conn = _db(context)
    try:
        row = conn.execute(
            f"SELECT result FROM {table} WHERE key = ?",
            (context.idempotency_key,),
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else dict(json.loads(row[0]))


def get_order(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return {
        "order_id": arguments["order_id"],
        "status": "delivered",
        "amount_cents": 4999,
        "currency": "USD",
        "customer_id": "cus_42",
    }


def create_draft(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return _insert("drafts", arguments, context)


def lookup_draft(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any] | None:
    return _lookup("drafts", context)


def pay(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return _insert("payments", arguments, context)


def lookup_payment(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any] | None:
    return _lookup("payments", context)
