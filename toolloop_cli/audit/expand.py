"""Batch records read back as row writes: each write's row rebuilt from the records before it.

A batch record (``hashing.BATCH_VERSIONS``) holds a row whole or only the columns a write
changed, so the whole row after a write is the row it holds, or the row after the previous
write of the same key with those columns applied. A write that names the states its row went
through first (``via``) passes them on, for the history to check each move. Each rebuilt row
of a change must hash to the ``row_sha256`` its write states: a record whose changes do not
add up to the row the writer had is a mismatch, never repaired. Records of the older layout
(one full row per record) pass through unchanged and are the base for batch writes after
them.

The output has the older layout, one record per row write, so the history and snapshot
checks read both layouts the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .canonical import CanonicalJSONError
from .hashing import BATCH, BATCH_VERSION, BATCH_VERSIONS, KINDS, Kind, hashable_key, row_sha256
from .mismatch import Mismatch

__all__ = ["RowWrite", "expand", "expand_each", "read_write"]

_Key = tuple[str, tuple[Any, ...]]


def expand(records: Iterable[dict[str, Any]], found: list[Mismatch]) -> list[dict[str, Any]]:
    """Every row write of ``records`` (in ``seq`` order), each with its whole row."""
    return list(expand_each(records, found))


def expand_each(
    records: Iterable[dict[str, Any]], found: list[Mismatch]
) -> Iterator[dict[str, Any]]:
    """``expand``, one row write at a time, as ``records`` come (they may be a stream)."""
    rows: dict[_Key, dict[str, Any]] = {}
    for record in records:
        if record.get("v") not in BATCH_VERSIONS or record.get("kind") != BATCH:
            key, row = record.get("key"), record.get("row")
            if record.get("kind") in KINDS and isinstance(key, list) and isinstance(row, dict):
                rows[(str(record["kind"]), hashable_key(key))] = row
            yield record
            continue
        writes = record.get("writes")
        for index, write in enumerate(writes if isinstance(writes, list) else []):
            expanded = _write(record, index, write, rows, found)
            if expanded is not None:
                yield expanded


@dataclass(frozen=True)
class RowWrite:
    """One write of a batch record, read: the row's kind and whole key, its columns (every
    column when ``stated`` is None, the row written whole; else the changed ones and the hash
    the row must have after them) and the states it went through first."""

    kind: str
    key: list[Any]
    changes: dict[str, Any]
    stated: str | None
    via: list[str] | None


#: what a batch write looks like, for a malformed one's report
SHAPE = "[kind, columns(, states)] or [kind, key, changed columns, row sha256(, states)]"


def read_write(record: Mapping[str, Any], write: object) -> RowWrite | None:
    """``write`` of batch ``record`` as a ``RowWrite``; None when it is malformed.

    Version 4 leaves the record's own ``operation_id`` out of keys and columns: it is put
    back, and a write that names it again is malformed.
    """
    if not isinstance(write, list) or not write or write[0] not in KINDS:
        return None
    kind = KINDS[write[0]]
    version = record.get("v")
    via: object = None
    if version == BATCH_VERSION and 2 <= len(write) <= 3 and isinstance(write[1], dict):
        if len(write) == 3:
            via = write[2]
        return _whole(record.get("operation_id"), kind, write[1], via)
    if not (
        len(write) in ((4, 5) if version in _WITH_PATHS else (4,))
        and isinstance(write[1], list)
        and isinstance(write[2], dict)
        and isinstance(write[3], str)
    ):
        return None
    if len(write) == 5:
        via = write[4]
        if not _states(via):
            return None
    key, changes = write[1], write[2]
    op = record.get("operation_id")
    if version == BATCH_VERSION and isinstance(op, str):
        if "operation_id" in changes:
            return None
        if kind.key[0] == "operation_id":
            key = [op, *key]
    if version == BATCH_VERSION and len(key) != len(kind.key):
        return None
    return RowWrite(kind.name, key, changes, write[3], via if isinstance(via, list) else None)


def _whole(op: object, kind: Kind, columns: dict[str, Any], via: object) -> RowWrite | None:
    """A version 4 row written whole: its columns, the record's operation id put back."""
    if via is not None and not _states(via):
        return None
    if isinstance(op, str):
        if "operation_id" in columns:
            return None
        columns = {**columns, "operation_id": op}
    if not all(c in columns for c in kind.key):
        return None
    key = [columns[c] for c in kind.key]
    return RowWrite(kind.name, key, columns, None, via if isinstance(via, list) else None)


def _states(via: object) -> bool:
    """The states a row went through: a non-empty list of strings (an empty one is never
    written)."""
    return isinstance(via, list) and bool(via) and all(isinstance(s, str) for s in via)


#: batch versions whose writes may end with the states their row went through
_WITH_PATHS = (3, BATCH_VERSION)


def _write(
    record: dict[str, Any],
    index: int,
    write: object,
    rows: dict[_Key, dict[str, Any]],
    found: list[Mismatch],
) -> dict[str, Any] | None:
    seq = record.get("seq")
    op = record.get("operation_id")
    where = f"seq {seq} write {index}"
    parsed = read_write(record, write)
    if parsed is None:
        found.append(
            Mismatch.of(
                op if isinstance(op, str) else None,
                None,
                "audit_log",
                where,
                "writes",
                SHAPE,
                write,
            )
        )
        return None
    kind, key, changes, stated = parsed.kind, parsed.key, parsed.changes, parsed.stated
    slot = (kind, hashable_key(key))
    base = rows.get(slot)
    row = dict(changes) if base is None or stated is None else {**base, **changes}
    rows[slot] = row
    call = row.get("call_id")
    if stated is not None:
        try:
            actual: str | None = row_sha256(row)
        except CanonicalJSONError:
            actual = None
        if actual != stated:
            found.append(
                Mismatch.of(
                    op if isinstance(op, str) else None,
                    call if isinstance(call, str) else None,
                    "audit_log",
                    where,
                    "row_sha256",
                    stated,
                    actual,
                )
            )
    row_op = row.get("operation_id")
    out = {
        "v": record.get("v"),
        "seq": seq,
        "kind": kind,
        "operation_id": row_op if isinstance(row_op, str) else op,
        "call_id": call if isinstance(call, str) else None,
        "key": key,
        "row": row,
    }
    if parsed.via is not None:
        out["via"] = parsed.via
    return out
