"""A downstream refund service that misbehaves on request, in its own SQLite file.

It keeps ``applied(idempotency_key, request_sha256, amount, result)`` and a log of every
attempt, and is idempotent like a careful payments API: a retry under a key returns the
saved result; the same key with other parameters is an ``idempotency_error``. A fault plan
(``faults.json`` beside it: amount -> mode) makes one request misbehave:

    apply_then_hang    commit, then hang past the tool's timeout
    hang_then_apply    hang past the timeout, then commit (the commit lands after toolloop
                       gave up waiting)
    apply_then_drop    commit, then lose the connection (raise)
    drop_before_apply  lose the connection before anything is committed
    mid_reply          commit, then return half an answer (not JSON)
    in_flight          answer 409 (the key is in flight elsewhere) to every try; the handler
                       retries with a bounded backoff, then gives up
    conflict           answer idempotency_error (the key was used with other parameters)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from toolloop_cli.tools.context import ToolContext, ToolError

HANG_S = 0.6  # well past the tool's 250 ms timeout, even on a busy machine
MAX_TRIES = 3


class ConnectionDropped(ConnectionError):
    """The connection to the service broke before an answer came back."""


class InFlight(Exception):
    """409: another request under this key is still being processed."""


def _db(context: ToolContext) -> sqlite3.Connection:
    conn = sqlite3.connect(Path(context.data_dir) / "service.db", timeout=10, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, request_sha256 TEXT,"
        " amount INTEGER, result TEXT)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS attempts (key TEXT, amount INTEGER, mode TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS handlers (key TEXT, state TEXT)")
    return conn


def _mode(context: ToolContext, amount: int) -> str:
    path = Path(context.data_dir) / "faults.json"
    plan = json.loads(path.read_text()) if path.exists() else {}
    return str(plan.get(str(amount), "ok"))


def _apply(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    key = context.idempotency_key
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()
    with closing(_db(context)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT request_sha256, result FROM applied WHERE key = ?", (key,))
        saved = row.fetchone()
        if saved is not None:
            conn.execute("COMMIT")
            if saved[0] != digest:
                raise ToolError("idempotency_error: key reused with other parameters")
            return dict(json.loads(saved[1]))
        result = {"refund_id": f"re_{key[-8:]}", "amount_cents": arguments["amount_cents"]}
        conn.execute(
            "INSERT INTO applied VALUES (?, ?, ?, ?)",
            (key, digest, arguments["amount_cents"], json.dumps(result)),
        )
        conn.execute("COMMIT")
    return result


def refund(arguments: dict[str, Any], context: ToolContext) -> Any:
    """Pay a refund, at most once per idempotency key, misbehaving as the fault plan says."""
    _mark(context, "started")
    try:
        return _refund(arguments, context)
    finally:
        _mark(context, "finished")


def _mark(context: ToolContext, what: str) -> None:
    with closing(_db(context)) as conn:
        conn.execute("INSERT INTO handlers VALUES (?, ?)", (context.idempotency_key, what))


def wait_for_handlers(data_dir: Path, expected: int, timeout_s: float = 30.0) -> None:
    """Return once ``expected`` handlers have started and all have finished (hung ones too).

    A handler abandoned by its timeout may not even have started on a busy machine.
    """
    path = Path(data_dir) / "service.db"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not path.exists():
            time.sleep(0.01)
            continue
        with closing(sqlite3.connect(path, timeout=10)) as conn:
            rows = dict(conn.execute("SELECT state, count(*) FROM handlers GROUP BY 1").fetchall())
        if rows.get("started", 0) == rows.get("finished", 0) == expected:
            return
        time.sleep(0.01)
    raise TimeoutError(f"handlers still running after {timeout_s} s")


def _refund(arguments: dict[str, Any], context: ToolContext) -> Any:
    amount = int(arguments["amount_cents"])
    mode = _mode(context, amount)
    for attempt in range(MAX_TRIES):
        with closing(_db(context)) as conn:
            conn.execute(
                "INSERT INTO attempts VALUES (?, ?, ?)", (context.idempotency_key, amount, mode)
            )
        if mode != "in_flight":
            break
        time.sleep(0.002 * 2**attempt)
    match mode:
        case "in_flight":
            raise InFlight(f"409 after {MAX_TRIES} tries: the key is in flight")
        case "conflict":
            raise ToolError("idempotency_error: key reused with other parameters")
        case "drop_before_apply":
            raise ConnectionDropped("connection reset before the request was sent")
        case "hang_then_apply":
            time.sleep(HANG_S)
            return _apply(context, arguments)
    result = _apply(context, arguments)
    match mode:
        case "apply_then_hang":
            time.sleep(HANG_S)
        case "apply_then_drop":
            raise ConnectionDropped("connection reset while reading the answer")
        case "mid_reply":
            return {"refund_id": object()}  # half an answer: not JSON
    return result


def lookup(arguments: dict[str, Any], context: ToolContext) -> Any:
    """Reconcile: the saved result under the key, None if unknown, an error if in flight."""
    if _mode(context, int(arguments["amount_cents"])) == "in_flight":
        raise ToolError("409: the key is still in flight")
    with closing(_db(context)) as conn:
        row = conn.execute("SELECT result FROM applied WHERE key = ?", (context.idempotency_key,))
        saved = row.fetchone()
    return None if saved is None else json.loads(saved[0])
