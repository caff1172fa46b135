"""The refund example: tool handlers over a small payments ledger in its own SQLite file.

It plays the downstream system a payments team would call, and behaves like a careful one:
``submit_refund`` is idempotent on ``context.idempotency_key`` (a retry returns the saved
result, never a second refund), needs an open draft, never refunds more than was paid, and
commits the draft and the refund in one transaction. ``lookup_refund`` answers the dispatcher's
reconcile question: what became of this idempotency key?

The ledger lives at ``context.data_dir / "payments.db"`` (``TOOLLOOP_LEDGER`` overrides it) and
is created and seeded on first use. ``TOOLLOOP_REFUND_DELAY_MS`` makes ``submit_refund`` sleep
after committing, to stage a timeout whose side effect did happen.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from toolloop_cli.tools.context import ToolContext, ToolError

__all__ = [
    "create_refund_draft",
    "get_order",
    "ledger_path",
    "ledger_refunds",
    "lookup_refund",
    "submit_refund",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY, status TEXT NOT NULL, amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL, customer_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS drafts (
    draft_id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(order_id),
    amount_cents INTEGER NOT NULL, reason TEXT, status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refunds (
    refund_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE,
    order_id TEXT NOT NULL REFERENCES orders(order_id), amount_cents INTEGER NOT NULL,
    draft_id TEXT NOT NULL REFERENCES drafts(draft_id), result_json TEXT NOT NULL
);
"""
_SEED = [
    ("ord_1001", "delivered", 4999, "USD", "cus_42"),
    ("ord_1002", "delivered", 1250, "USD", "cus_7"),
    ("ord_1003", "shipped", 30000, "USD", "cus_42"),
]
_LEDGER_VERSION = 1
_BUSY_TIMEOUT_MS = 5000


def ledger_path(context: ToolContext) -> Path:
    """Where this context's ledger lives: ``TOOLLOOP_LEDGER`` or ``data_dir/payments.db``."""
    override = os.environ.get("TOOLLOOP_LEDGER")
    return Path(override) if override else context.data_dir / "payments.db"


def get_order(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Read one order."""
    with closing(_open(ledger_path(context))) as conn:
        return _order(conn, arguments["order_id"])


def create_refund_draft(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Open a refund draft: nothing moves until ``submit_refund``."""
    order_id, amount = arguments["order_id"], arguments["amount_cents"]
    with closing(_open(ledger_path(context))) as conn, _write(conn):
        order = _order(conn, order_id)
        _check_refundable(conn, order, amount)
        count = conn.execute("SELECT count(*) FROM drafts WHERE order_id = ?", (order_id,))
        draft_id = f"drf_{_digits(order_id)}_{count.fetchone()[0] + 1}"
        conn.execute(
            "INSERT INTO drafts (draft_id, order_id, amount_cents, reason, status)"
            " VALUES (?, ?, ?, ?, 'draft')",
            (draft_id, order_id, amount, arguments.get("reason")),
        )
    return {"draft_id": draft_id, "order_id": order_id, "amount_cents": amount, "status": "draft"}


def submit_refund(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Submit the refund of an open draft, at most once per idempotency key."""
    order_id, amount = arguments["order_id"], arguments["amount_cents"]
    key = context.idempotency_key
    if not key:
        raise ValueError("submit_refund needs an idempotency key")
    delay_ms = int(os.environ.get("TOOLLOOP_REFUND_DELAY_MS") or 0)
    with closing(_open(ledger_path(context))) as conn:
        with _write(conn):
            saved = conn.execute(
                "SELECT order_id, amount_cents, result_json FROM refunds WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
            if saved is not None:
                if (saved[0], saved[1]) != (order_id, amount):
                    raise ToolError("idempotency key reused with different parameters")
                result: dict[str, Any] = json.loads(saved[2])
                return result
            result = _insert_refund(conn, key, order_id, amount)
    if delay_ms > 0:
        time.sleep(delay_ms / 1000)
    return result


def lookup_refund(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any] | None:
    """The saved result of the refund made under ``context.idempotency_key``, or ``None``."""
    with closing(_open(ledger_path(context))) as conn:
        row = conn.execute(
            "SELECT result_json FROM refunds WHERE idempotency_key = ?",
            (context.idempotency_key,),
        ).fetchone()
    if row is None:
        return None
    result: dict[str, Any] = json.loads(row[0])
    return result


def ledger_refunds(path: str | Path) -> list[dict[str, Any]]:
    """Every refund in the ledger at ``path``, oldest first; ``[]`` when there is no ledger."""
    if not Path(path).exists():
        return []
    with closing(_open(Path(path))) as conn:
        rows = conn.execute(
            "SELECT refund_id, idempotency_key, order_id, amount_cents, draft_id, result_json"
            " FROM refunds ORDER BY rowid"
        ).fetchall()
    names = ("refund_id", "idempotency_key", "order_id", "amount_cents", "draft_id")
    return [
        {**dict(zip(names, row[:5], strict=True)), "result": json.loads(row[5])} for row in rows
    ]


def _insert_refund(
    conn: sqlite3.Connection, key: str, order_id: str, amount: int
) -> dict[str, Any]:
    """Consume an open draft and record the refund; runs inside the caller's transaction."""
    order = _order(conn, order_id)
    draft = conn.execute(
        "SELECT draft_id FROM drafts WHERE order_id = ? AND amount_cents = ? AND status = 'draft'"
        " ORDER BY rowid LIMIT 1",
        (order_id, amount),
    ).fetchone()
    if draft is None:
        raise ToolError(f"no open refund draft for {order_id} of {amount} cents")
    _check_refundable(conn, order, amount)
    count = conn.execute("SELECT count(*) FROM refunds WHERE order_id = ?", (order_id,))
    refund_id = f"rf_{_digits(order_id)}_{count.fetchone()[0] + 1}"
    result = {
        "refund_id": refund_id,
        "order_id": order_id,
        "amount_cents": amount,
        "status": "submitted",
    }
    conn.execute("UPDATE drafts SET status = 'submitted' WHERE draft_id = ?", (draft[0],))
    conn.execute(
        "INSERT INTO refunds (refund_id, idempotency_key, order_id, amount_cents, draft_id,"
        " result_json) VALUES (?, ?, ?, ?, ?, ?)",
        (refund_id, key, order_id, amount, draft[0], json.dumps(result, sort_keys=True)),
    )
    return result


def _order(conn: sqlite3.Connection, order_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT order_id, status, amount_cents, currency, customer_id FROM orders"
        " WHERE order_id = ?",
        (order_id,),
    ).fetchone()
    if row is None:
        raise ToolError(f"order {order_id} not found")
    names = ("order_id", "status", "amount_cents", "currency", "customer_id")
    return dict(zip(names, row, strict=True))


def _check_refundable(conn: sqlite3.Connection, order: dict[str, Any], amount: int) -> None:
    """Only delivered orders, and never more than was paid minus what was already refunded."""
    if order["status"] != "delivered":
        raise ToolError(
            f"order {order['order_id']} is {order['status']}; only delivered orders can be refunded"
        )
    refunded = conn.execute(
        "SELECT coalesce(sum(amount_cents), 0) FROM refunds WHERE order_id = ?",
        (order["order_id"],),
    ).fetchone()[0]
    left = order["amount_cents"] - refunded
    if amount > left:
        raise ToolError(
            f"amount {amount} cents is over the refundable {left} cents of {order['order_id']}"
        )


def _digits(order_id: str) -> str:
    return order_id.removeprefix("ord_")


def _open(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), the ledger created if new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if conn.execute("PRAGMA user_version").fetchone()[0] < _LEDGER_VERSION:
            _create(conn)
    except Exception:
        conn.close()
        raise
    return conn


def _create(conn: sqlite3.Connection) -> None:
    with _write(conn):
        # re-checked under the write lock: another process may have created it meanwhile
        if conn.execute("PRAGMA user_version").fetchone()[0] >= _LEDGER_VERSION:
            return
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.executemany("INSERT OR IGNORE INTO orders VALUES (?, ?, ?, ?, ?)", _SEED)
        conn.execute(f"PRAGMA user_version = {_LEDGER_VERSION}")


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction; ``BEGIN IMMEDIATE`` takes the lock up front (no upgrade deadlock)."""
    conn.execute("BEGIN IMMEDIATE")
    committed = False
    try:
        yield
        conn.execute("COMMIT")
        committed = True
    finally:
        if not committed and conn.in_transaction:
            conn.execute("ROLLBACK")
