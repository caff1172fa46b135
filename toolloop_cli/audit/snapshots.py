"""Each audited row against the latest record about it, column for column.

Rows are matched to records by key first. What is left (a row with no record under its key,
a record whose row is not under its key) is then paired by likeness, so a row whose key
column was changed is reported under the record's operation, call and that column. The two
steps are apart so that a store checked in parts (``service.verify``) can match each part
by key and pair what every part left over at the end, as one check of the whole would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .hashing import Kind, key_text
from .mismatch import Mismatch
from .rows import Row

__all__ = ["CONVERSATION", "Leftovers", "about", "conversation_records", "match", "pair"]

#: Columns kept out of audit records (each is bound by a hash column instead).
UNRECORDED = {"turns": frozenset({"response_body"})}

#: the conversation's rows, checked against the ``items`` records that appended them
CONVERSATION = Kind("items", "conversation", ("operation_id", "seq"))


@dataclass
class Leftovers:
    """Rows no record names by key, and records no row answers by key (by kind name)."""

    rows: dict[str, list[Row]] = field(default_factory=dict)
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, kind: Kind, rows: list[Row], records: list[dict[str, Any]]) -> None:
        self.rows.setdefault(kind.name, []).extend(rows)
        self.records.setdefault(kind.name, []).extend(records)


def match(
    kind: Kind,
    table: list[Row],
    records: dict[tuple[Any, ...], dict[str, Any]],
    leftovers: Leftovers,
) -> list[Mismatch]:
    """Compare each row with the latest record of its key; what has no partner by key goes
    to ``leftovers``. A key held by several rows goes to the row most like its record.
    ``records`` (the latest record of each row of this kind, by key) is used up."""
    found: list[Mismatch] = []
    skip = UNRECORDED.get(kind.table, frozenset())
    by_key: dict[tuple[Any, ...], list[Row]] = {}
    for row in table:
        by_key.setdefault(tuple(row.get(c) for c in kind.key), []).append(row)
    orphans: list[Row] = []
    for key, rows in by_key.items():
        record = records.pop(key, None)
        if record is None:
            orphans += rows
            continue
        matched: dict[str, Any] = record
        if len(rows) > 1:
            rows.sort(key=lambda r: _distance(r, matched))
        found += _compare(kind, rows[0], matched, skip)
        orphans += rows[1:]
    leftovers.add(kind, orphans, list(records.values()))
    records.clear()
    return found


def pair(kind: Kind, orphans: list[Row], unmatched: list[dict[str, Any]]) -> list[Mismatch]:
    """Pair rows and records left over by likeness; report what stays alone."""
    found: list[Mismatch] = []
    skip = UNRECORDED.get(kind.table, frozenset())
    pairs = sorted(
        (
            (_distance(row, rec), i, j)
            for i, row in enumerate(orphans)
            for j, rec in enumerate(unmatched)
        ),
    )
    used_rows: set[int] = set()
    used_records: set[int] = set()
    for distance, i, j in pairs:
        if i in used_rows or j in used_records or distance >= len(orphans[i]):
            continue
        used_rows.add(i)
        used_records.add(j)
        found += _compare(kind, orphans[i], unmatched[j], skip)
    for i, row in enumerate(orphans):
        if i not in used_rows:
            found.append(about(kind, row, "row", "a row written through toolloop", "no record"))
    for j, record in enumerate(unmatched):
        if j not in used_records:
            snapshot = record.get("row") or {}
            found.append(about(kind, snapshot, "row", key_text(record["key"]), "missing"))
    return found


def conversation_records(
    latest: Mapping[tuple[Any, ...], dict[str, Any]],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The conversation rows the ``items`` records appended, as records keyed by row."""
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in latest.values():
        snapshot = record.get("row")
        if not isinstance(snapshot, dict):
            continue
        op, start, items = (
            snapshot.get("operation_id"),
            snapshot.get("start"),
            snapshot.get("items"),
        )
        if isinstance(start, int) and isinstance(items, list):
            for offset, digest in enumerate(items):
                row = {"operation_id": op, "seq": start + offset, "item_sha256": digest}
                expected[(op, start + offset)] = {"key": [op, start + offset], "row": row}
    return expected


def _distance(row: Row, record: Mapping[str, Any]) -> int:
    """How many recorded columns of ``row`` differ from ``record``."""
    snapshot = record.get("row")
    if not isinstance(snapshot, dict):
        return len(row) + 1
    return sum(1 for c, v in snapshot.items() if row.get(c, _ABSENT) != v)


def _compare(
    kind: Kind, row: Row, record: Mapping[str, Any], skip: frozenset[str]
) -> list[Mismatch]:
    snapshot = record.get("row")
    if not isinstance(snapshot, dict):
        return [about(kind, row, "row", "a recorded row", snapshot)]
    found = []
    for column, value in snapshot.items():
        if row.get(column, _ABSENT) != value:
            found.append(about(kind, snapshot, column, value, row.get(column, "<no column>")))
    for column, value in row.items():
        if column not in snapshot and column not in skip and value is not None:
            found.append(about(kind, snapshot, column, None, value))
    return found


def about(
    kind: Kind, row: Mapping[str, Any], column: str, expected: object, found: object
) -> Mismatch:
    """A mismatch about a row of ``kind``, named by its key, operation and call."""
    key = key_text([row.get(c) for c in kind.key])
    op, call = row.get("operation_id"), row.get("call_id")
    return Mismatch.of(
        op if isinstance(op, str) else None,
        call if isinstance(call, str) else None,
        kind.table,
        key,
        column,
        expected,
        found,
    )


_ABSENT = object()
