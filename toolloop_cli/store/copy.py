"""Copying a whole store between backends (SQLite ⇄ PostgreSQL), rows unchanged.

Every audited row, blob, conversation entry, state-log row and audit record is copied as it
is stored (a record deflated in SQLite goes to PostgreSQL as its text, which its hash is
over), in one transaction of the destination: a copy is all of the source or none of it.
Nothing is re-hashed or re-chained, so the copy verifies with the source's head, and a row
changed on the way would be a mismatch there. Leases are not copied: they belong to the
processes running the source's operations, not to its history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolloop_cli.audit.stored import record_text
from toolloop_cli.errors import StoreError

from .repo import Store

#: the tables, parents before children (foreign keys), with the order rows are copied in
TABLES: tuple[tuple[str, str], ...] = (
    ("operations", "rowid"),
    ("blobs", "sha256"),
    ("conversation", "operation_id, seq"),
    ("turns", "operation_id, idx"),
    ("calls", "operation_id, turn_idx, seq"),
    ("approvals", "rowid"),
    ("transitions", "id"),
    ("audit_log", "seq"),
)
_BATCH = 500


@dataclass
class Copied:
    """How many rows of each table went across."""

    rows: dict[str, int] = field(default_factory=dict)


def copy_store(source: Store, target: Store) -> Copied:
    """Copy every row of ``source`` into ``target``, which must hold no operation and no
    audit record (two chains cannot be joined); all in one transaction of ``target``."""
    for table in ("operations", "audit_log"):
        if target.conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
            raise StoreError(
                f"store {target.location} already holds {table} rows: a copy goes into an "
                "empty store only (its audit chain starts from the source's)"
            )
    copied = Copied()
    with target.transaction():
        for table, order in TABLES:
            copied.rows[table] = _copy_table(source, target, table, order)
        if target.postgres:  # ids copied by value: the next transition continues after them
            target.conn.execute(
                "SELECT setval(pg_get_serial_sequence('transitions', 'id'),"
                " (SELECT coalesce(max(id), 0) + 1 FROM transitions), false)"
            )
    return copied


def _copy_table(source: Store, target: Store, table: str, order: str) -> int:
    cur = source.conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
    names = [d[0] for d in cur.description if d[0] != "rowid"]
    wanted = [i for i, d in enumerate(cur.description) if d[0] != "rowid"]
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
    count = 0
    batch: list[tuple[Any, ...]] = []
    # PostgreSQL keeps a record as text (its TOAST compresses it): a deflated one is inflated
    texts = names.index("record") if table == "audit_log" and target.postgres else None
    for row in cur.fetchall():
        values = [_portable(row[i]) for i in wanted]
        if texts is not None:
            values[texts] = _as_text(values[texts], row)
        batch.append(tuple(values))
        if len(batch) >= _BATCH:
            count += _insert(target, sql, batch)
            batch = []
    return count + _insert(target, sql, batch)


def _insert(target: Store, sql: str, rows: list[tuple[Any, ...]]) -> int:
    if rows:
        target.conn.executemany(sql, rows)
    return len(rows)


def _as_text(record: Any, row: Any) -> Any:
    text = record_text(record)
    if isinstance(text, bytes):
        raise StoreError(
            f"audit record {row[0]} is neither text nor a deflated record: the source store "
            "was changed; run `toolloop verify` on it"
        )
    return text


def _portable(value: Any) -> Any:
    """A value as both drivers write it (PostgreSQL hands ``bytea`` back as ``memoryview``
    under some settings; SQLite takes only ``bytes``)."""
    return bytes(value) if isinstance(value, memoryview) else value
