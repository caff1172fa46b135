"""What must hold after any crash, resume or fault: each check returns a list of problems.

- a SQLite file is sound (``PRAGMA integrity_check``; a PostgreSQL store's pages are its
  server's to check);
- ``toolloop verify`` recomputes every hash (``verify_problems``: the library behind the
  command when present, else the integrity check alone);
- at most one effect per intent in the downstream ledger, and no effect without an intent;
- every approved submission that the store says happened has exactly one effect;
- no approval decided before a crash is lost or changed after it.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

from support.harness.stores import is_postgres, rows_of
from toolloop_cli.store import open_store
from toolloop_cli.store.db import store_exists

DONE = ("SUCCEEDED", "RECONCILED")


def integrity_problems(path: Path) -> list[str]:
    if is_postgres(path) or not path.exists():
        return []
    with closing(sqlite3.connect(path)) as conn:
        result = conn.execute("PRAGMA integrity_check").fetchall()
    return [] if result == [("ok",)] else [f"integrity_check: {result}"]


def verify_problems(path: Path) -> list[str]:
    """The ``toolloop verify`` hook: every mismatch it reports, as text."""
    problems = integrity_problems(path)
    if not store_exists(path):
        return problems
    try:
        from toolloop_cli.service.verify import verify_store
    except ImportError:  # pragma: no cover - before the verify command existed
        return problems
    store = open_store(path)
    try:
        report = verify_store(store)
    finally:
        store.close()
    return problems + [f"verify: {m.line()}" for m in report.mismatches]


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of the downstream ledger (a SQLite file beside the store, or in its data dir)."""
    if not path.exists():
        return []
    with closing(sqlite3.connect(path)) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the ledger was never created
            return []


def ledger_problems(store_path: Path) -> list[str]:
    """Effects in the refund ledger beside the store, against the intents in the store."""
    ledger = store_path.parent / "payments.db"
    problems = []
    refunds = _rows(ledger, "SELECT idempotency_key, order_id, amount_cents FROM refunds")
    drafts = _rows(ledger, "SELECT order_id, amount_cents FROM drafts")
    for (key,), n in Counter((r[0],) for r in refunds).items():
        if n > 1:
            problems.append(f"{n} refunds under key {key}")
    for intent, n in Counter((r[1], r[2]) for r in refunds).items():
        if n > 1:
            problems.append(f"{n} refunds of {intent} (a retry under a new key)")
    for intent, n in Counter(drafts).items():
        if n > 1:
            problems.append(f"{n} drafts of {intent}")
    calls = rows_of(
        store_path,
        "SELECT c.call_id, c.name, c.state, c.idempotency_key, a.status FROM calls c"
        " LEFT JOIN approvals a ON a.approval_id = c.approval_id",
    )
    keys = {c[3] for c in calls if c[3]}
    problems += [f"refund {r[0]} has no intent in the store" for r in refunds if r[0] not in keys]
    applied = Counter(r[0] for r in refunds)
    for call_id, name, state, key, approval in calls:
        if name == "submit_refund" and state in DONE and applied[key] != 1:
            problems.append(f"{call_id} is {state} with {applied[key]} refunds for its key")
        if name == "submit_refund" and approval != "APPROVED" and applied[key]:
            problems.append(f"{call_id} has a refund without an approval ({approval})")
    return problems


def decisions(path: Path) -> dict[str, tuple[str, str | None]]:
    """approval id → (status, decided_by) of every decided approval."""
    rows = rows_of(path, "SELECT approval_id, status, decided_by FROM approvals")
    return {r[0]: (r[1], r[2]) for r in rows if r[1] in ("APPROVED", "DENIED")}


def lost_decisions(before: dict[str, tuple[str, str | None]], path: Path) -> list[str]:
    after = decisions(path)
    return [
        f"approval {apr} was {was} before the crash, {after.get(apr)} after"
        for apr, was in before.items()
        if after.get(apr) != was
    ]


def operation_state(path: Path) -> str | None:
    rows = rows_of(path, "SELECT state FROM operations")
    return str(rows[0][0]) if rows else None


def all_problems(path: Path) -> list[str]:
    """Every oracle that needs nothing but the store and the ledger beside it."""
    return verify_problems(path) + ledger_problems(path)
