"""Is a row what the audit log last recorded for it? Asked before acting on a row that a person
or another process wrote: an approval, before it is decided and before its decision is applied;
an operation, before a process that did not write it last loads its registry and steps it.

Every write toolloop makes to an operation or an approval is recorded in the audit log in the
transaction that makes it, so a row that differs from its last record was written around
toolloop (by whoever can write the database file). ``toolloop verify`` finds such rows after
the fact; this check refuses to run a side effect on one. The row as last recorded is rebuilt
from the operation's records, newest first, back to the last write that holds it whole (each
process's first write of a row does; ``store/audit_writer.py``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from toolloop_cli.audit.canonical import CanonicalJSONError
from toolloop_cli.audit.expand import read_write
from toolloop_cli.audit.hashing import BATCH, BATCH_VERSIONS, row_sha256
from toolloop_cli.audit.stored import record_text
from toolloop_cli.errors import TamperedStore

from .connection import Connection
from .unreadable import unreadable

__all__ = ["refuse_unlogged", "unlogged_columns"]

_ABSENT = object()


def unlogged_columns(
    conn: Connection, operation_id: str, kind: str, key: Sequence[Any], row: Mapping[str, Any]
) -> list[str]:
    """The columns of ``row`` (the ``kind`` row ``key`` of ``operation_id`` as its table holds
    it) that are not what the audit log last recorded; ``[]`` when it is.

    Usually one record answers: the row's last write holds it whole, or states the hash of the
    whole row after it. Otherwise (a hash that differs, or a column a migration added since)
    the row is rebuilt from its writes back to a whole one and compared column by column.
    """
    changes: list[dict[str, Any]] = []
    cur = conn.execute(
        "SELECT record FROM audit_log WHERE operation_id = ? ORDER BY seq DESC", (operation_id,)
    )
    for (text,) in cur:
        found = _write_of(_parsed(text), kind, list(key))
        if found is None:
            continue
        columns, stated = found
        if stated is not None:
            if not changes and _hash(row) == stated:
                return []
            changes.append(columns)
            continue
        logged = dict(columns)
        for change in reversed(changes):
            logged.update(change)
        return _differ(row, logged)
    return sorted(row)  # never recorded whole: nothing vouches for any of it


def refuse_unlogged(
    conn: Connection,
    location: str,
    kind: str,
    key: Sequence[Any],
    row: Mapping[str, Any],
    name: str,
) -> None:
    """A ``TamperedStore`` naming the columns of ``row`` (a ``kind`` row, its table's columns
    by name; ``name`` says which, as a message does) that are not as the audit log last
    recorded them; nothing when they are."""
    try:
        differ = unlogged_columns(conn, str(row["operation_id"]), kind, key, row)
    except sqlite3.Error as exc:  # a record SQLite cannot decode: not one toolloop wrote
        raise unreadable("audit_log", location, exc) from exc
    if differ:
        raise TamperedStore(
            f"{name} in store {location}: {', '.join(differ)} not as the audit log last"
            " recorded (the row was written around toolloop); nothing was run: run"
            " `toolloop verify`"
        )


def _hash(row: Mapping[str, Any]) -> str | None:
    try:
        return row_sha256(row)
    except CanonicalJSONError:
        return None


def _differ(row: Mapping[str, Any], logged: Mapping[str, Any]) -> list[str]:
    """Columns that differ; one added since the record was made counts only when it holds a
    value, as in ``verify``."""
    differ = [c for c, v in logged.items() if row.get(c, _ABSENT) != v]
    differ += [c for c, v in row.items() if c not in logged and v is not None]
    return sorted(differ)


def _parsed(text: object) -> dict[str, Any]:
    try:
        text = record_text(text)
        record = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_of(
    record: Mapping[str, Any], kind: str, key: list[Any]
) -> tuple[dict[str, Any], str | None] | None:
    """The write of the row in ``record``: its columns, and the hash it states of the whole
    row after it (None: the columns are the whole row)."""
    if record.get("kind") != BATCH or record.get("v") not in BATCH_VERSIONS:  # one row each
        row = record.get("row")
        if record.get("kind") == kind and record.get("key") == key and isinstance(row, dict):
            return row, None
        return None
    writes = record.get("writes")
    for write in reversed(writes) if isinstance(writes, list) else ():
        if not isinstance(write, list) or not write or write[0] != kind:
            continue
        parsed = read_write(record, write)
        if parsed is not None and parsed.key == key:
            return parsed.changes, parsed.stated
    return None
