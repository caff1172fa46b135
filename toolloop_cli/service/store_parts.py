"""Reading a store for ``verify`` a few operations at a time, in one read snapshot.

A store grows with every operation it runs; holding all of its rows (and the last record of
each) to check them needs memory in proportion to everything the store ever did. Every row
and every audit record belongs to one operation (``audit_writer`` seals one record per
operation and transaction), so the check reads a part, some operations with about
``PART_CALLS`` calls between them, checks it and lets it go. Rows and records that name no
operation of the store make a last part of their own. Everything is read inside one read
transaction, so a writer committing meanwhile is not seen half-way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping, Set
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from typing import Any

from toolloop_cli.audit.rows import Row, StoreRows
from toolloop_cli.audit.stored import record_text
from toolloop_cli.errors import StoreError
from toolloop_cli.store import Store
from toolloop_cli.store.copy import TABLES as AUDITED_TABLES

__all__ = [
    "DAMAGE_SHOWN",
    "PART_CALLS",
    "Part",
    "blob_count",
    "damage",
    "log_of",
    "missing_tables",
    "part_log",
    "parts",
    "read_part",
    "read_snapshot",
    "rows_of",
    "unreferenced_blobs",
    "values_of",
]

#: about how many calls one part holds (an operation is never split; a part holds at most
#: ``_PART_OPERATIONS`` operations)
PART_CALLS = 2000
_PART_OPERATIONS = 500

TABLES = ("operations", "turns", "calls", "approvals", "transitions", "conversation")


@dataclass(frozen=True)
class Part:
    """Some operations of a store: an SQL condition on ``operation_id`` and its parameters."""

    where: str
    params: tuple[Any, ...]


#: rows and records of no operation the store holds (a tampered or foreign id)
STRAYS = Part(
    "operation_id IS NULL OR operation_id NOT IN (SELECT operation_id FROM operations)", ()
)


def parts(store: Store, operation_id: str | None = None) -> list[Part]:
    """The parts to check: ``operation_id`` alone, or every operation, then the strays."""
    if operation_id is not None:
        return [Part("operation_id = ?", (operation_id,))]
    return [*_chunks(store), STRAYS]


def _chunks(store: Store) -> Iterator[Part]:
    """The store's operations, in parts of about ``PART_CALLS`` calls."""
    sizes = dict(values_of(store, "SELECT operation_id, count(*) FROM calls GROUP BY operation_id"))
    ops = [op for (op,) in values_of(store, "SELECT operation_id FROM operations ORDER BY 1")]
    chunk: list[Any] = []
    weight = 0
    for op in ops:
        chunk.append(op)
        weight += 1 + int(sizes.get(op, 0))
        if weight >= PART_CALLS or len(chunk) >= _PART_OPERATIONS:
            yield _of(chunk)
            chunk, weight = [], 0
    if chunk:
        yield _of(chunk)


def read_part(store: Store, part: Part) -> StoreRows:
    """The part's rows of every audited table, and the blobs they refer to."""
    rows = StoreRows()
    for table in TABLES:
        setattr(
            rows,
            table,
            list(rows_of(store, f"SELECT * FROM {table} WHERE {part.where}", part.params)),
        )
    refs = (
        f"SELECT item_sha256 FROM conversation WHERE {part.where}"
        f" UNION SELECT tools_sha256 FROM turns WHERE {part.where}"
        f" UNION SELECT policy_sha256 FROM approvals WHERE {part.where}"
    )
    sql = f"SELECT sha256, body FROM blobs WHERE sha256 IN ({refs})"
    rows.blobs = dict(values_of(store, sql, part.params * 3))
    return rows


def part_log(
    store: Store, part: Part, moved: Mapping[int, object], known: Set[Any]
) -> Iterator[Row]:
    """The part's audit records in ``seq`` order, as the query steps through them.

    ``moved`` (seq -> operation) names records whose ``operation_id`` column is not the
    operation the record names (``ChainWalk.moved``): each is read with the part of the
    operation it names, as a check of the whole store reads it (``known``: the operations
    of every part but the strays).
    """
    if not moved and part is not STRAYS:
        # one operation after another, each in seq order, straight from the index (history
        # and expansion follow each row's records, and a row belongs to one operation)
        tail = "WHERE operation_id = ? ORDER BY seq"
        return chain.from_iterable(log_of(store, tail, (op,)) for op in part.params)
    mine = set(part.params)
    theirs = {seq for seq, op in moved.items() if _in_part(op, part, mine, known)}
    if len(moved) > _MOVED_IN_SQL:  # a log rewritten wholesale: filtered here, not in SQL
        return _filtered_log(store, part, moved, theirs, (mine, known))
    where, params = f"({part.where})", part.params
    if moved:
        where = f"({where} AND seq NOT IN ({_marks(moved)}))"
        params = (*params, *moved)
    if theirs:
        where = f"({where} OR seq IN ({_marks(theirs)}))"
        params = (*params, *theirs)
    return log_of(store, f"WHERE {where} ORDER BY seq", params)


#: at most this many moved records are named in a query (each is one SQL parameter)
_MOVED_IN_SQL = 500


def _filtered_log(
    store: Store,
    part: Part,
    moved: Mapping[int, object],
    theirs: Set[int],
    ops: tuple[Set[Any], Set[Any]],
) -> Iterator[Row]:
    """``part_log`` read from the whole log: the part's rows by column, moved ones by the
    operation their record names (``ops``: the part's operations, every part's)."""
    for row in log_of(store, "ORDER BY seq"):
        seq = row.get("seq")
        if seq in theirs or (seq not in moved and _in_part(row.get("operation_id"), part, *ops)):
            yield row


def unreferenced_blobs(store: Store) -> Iterator[tuple[Any, Any]]:
    """Blobs no row refers to (each part hashes the blobs its rows refer to)."""
    sql = (
        "SELECT sha256, body FROM blobs WHERE sha256 NOT IN (SELECT item_sha256 FROM"
        " conversation WHERE item_sha256 IS NOT NULL) AND sha256 NOT IN (SELECT tools_sha256"
        " FROM turns WHERE tools_sha256 IS NOT NULL) AND sha256 NOT IN (SELECT policy_sha256"
        " FROM approvals WHERE policy_sha256 IS NOT NULL)"
    )
    yield from values_of(store, sql)


def blob_count(store: Store) -> int:
    for (count,) in values_of(store, "SELECT count(*) FROM blobs"):
        return int(count)
    return 0


@contextmanager
def read_snapshot(store: Store) -> Iterator[None]:
    """One read transaction around the check (nothing is written; it is rolled back)."""
    conn = store.conn
    if conn.in_transaction:  # the caller's transaction already is one snapshot
        yield
        return
    sqlite = isinstance(conn, sqlite3.Connection)
    for _ in values_of(store, "BEGIN" if sqlite else "BEGIN ISOLATION LEVEL REPEATABLE READ"):
        pass
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def rows_of(store: Store, sql: str, params: tuple[Any, ...] = ()) -> Iterator[Row]:
    """Rows as dicts, as the query steps through them; ``rowid`` is left out: on PostgreSQL
    it is the column that stands in for SQLite's implicit rowid (an order, never part of a
    row's content)."""
    try:
        cur = store.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        drop = "rowid" in names
        for values in cur:
            row = dict(zip(names, values, strict=True))
            if drop:
                del row["rowid"]
            yield row
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read store {store.location}: {exc}") from exc


#: at most this many of SQLite's integrity problems are named (the first says what is wrong)
DAMAGE_SHOWN = 5


def damage(store: Store) -> list[str]:
    """What SQLite's ``integrity_check`` finds wrong with the store file (none: ``[]``).

    Every read of ``verify`` goes through the file's B-trees, most through an index: a page
    overwritten or an index that no longer matches its table (a file edited around SQLite)
    hides rows and records from those reads while other commands, scanning the table, still
    show them. Such a file is a finding before anything it answers is believed. About 3% of a
    check's time. PostgreSQL keeps its own files: nothing is asked there.
    """
    if store.postgres:
        return []
    problems = [
        line
        for (text,) in values_of(store, "PRAGMA integrity_check")
        for line in str(text).splitlines()
        if line.strip() and not line.startswith("*** in database")  # a header, not a finding
    ]
    return [] if problems == ["ok"] else problems


def missing_tables(store: Store) -> list[str]:
    """The audited tables the store no longer has (dropped around toolloop), in copy order."""
    sql = (
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        if store.postgres
        else "SELECT name FROM sqlite_master WHERE type = 'table'"
    )
    present = {str(name) for (name,) in values_of(store, sql)}
    return [table for table, _ in AUDITED_TABLES if table not in present]


#: the audit log's columns as a SQLite check reads them: a record's text as its bytes, so a
#: record that is not UTF-8 is a finding of the check (``record_text``), not a failed read
_SQLITE_LOG_COLUMNS = (
    "seq, operation_id, kind, call_id,"
    " CASE typeof(record) WHEN 'text' THEN CAST(record AS BLOB) ELSE record END AS record,"
    " record_sha256, prev_sha256, chain_sha256"
)


def log_of(store: Store, tail: str, params: tuple[Any, ...] = ()) -> Iterator[Row]:
    """The audit log's rows ``tail`` (its ``WHERE`` and ``ORDER BY``) selects, as ``rows_of``
    reads them, each record as its text (``audit.stored``: inflated when kept deflated)."""
    columns = "*" if store.postgres else _SQLITE_LOG_COLUMNS
    for row in rows_of(store, f"SELECT {columns} FROM audit_log {tail}", params):
        row["record"] = record_text(row.get("record"))
        yield row


def values_of(store: Store, sql: str, params: tuple[Any, ...] = ()) -> Iterator[Any]:
    try:
        yield from store.conn.execute(sql, params)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read store {store.location}: {exc}") from exc


def _of(operations: list[Any]) -> Part:
    return Part(f"operation_id IN ({_marks(operations)})", tuple(operations))


def _marks(values: Collection[Any]) -> str:
    return ", ".join("?" * len(values))


def _in_part(op: object, part: Part, mine: Set[Any], known: Set[Any]) -> bool:
    """Whether operation id ``op`` (a column, or what a record names) belongs to ``part``:
    one of its operations, or for the strays none of ``known`` (a value no column holds
    as an id, such as a list a record names, is a stray's)."""
    if not (op is None or isinstance(op, str | int | float | bool)):
        return part is STRAYS
    return op not in known if part is STRAYS else op in mine
