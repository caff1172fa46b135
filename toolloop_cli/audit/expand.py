"""Batch records read back as row writes: each write's row rebuilt from the records before it.

A batch record (``hashing.BATCH_VERSION``) holds only the columns each write changed, so the
whole row after a write is the row after the previous write of the same key with those
columns applied (a key's first write holds every column). Each rebuilt row must hash to the
``row_sha256`` its write states: a record whose changes do not add up to the row the writer
had is a mismatch, never repaired. Records of the older layout (one full row per record)
pass through unchanged and are the base for batch writes after them.

The output has the older layout, one record per row write, so the history and snapshot
checks read both layouts the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .canonical import CanonicalJSONError
from .hashing import BATCH, BATCH_VERSION, KINDS, hashable_key, row_sha256
from .mismatch import Mismatch

__all__ = ["expand"]

_Key = tuple[str, tuple[Any, ...]]


def expand(records: Sequence[dict[str, Any]], found: list[Mismatch]) -> list[dict[str, Any]]:
    """Every row write of ``records`` (in ``seq`` order), each with its whole row."""
    rows: dict[_Key, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for record in records:
        if record.get("v") != BATCH_VERSION or record.get("kind") != BATCH:
            key, row = record.get("key"), record.get("row")
            if record.get("kind") in KINDS and isinstance(key, list) and isinstance(row, dict):
                rows[(str(record["kind"]), hashable_key(key))] = row
            out.append(record)
            continue
        writes = record.get("writes")
        for index, write in enumerate(writes if isinstance(writes, list) else []):
            expanded = _write(record, index, write, rows, found)
            if expanded is not None:
                out.append(expanded)
    return out


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
    if not (
        isinstance(write, list)
        and len(write) == 4
        and write[0] in KINDS
        and isinstance(write[1], list)
        and isinstance(write[2], dict)
        and isinstance(write[3], str)
    ):
        found.append(
            Mismatch.of(
                op if isinstance(op, str) else None,
                None,
                "audit_log",
                where,
                "writes",
                "[kind, key, changed columns, row sha256]",
                write,
            )
        )
        return None
    kind, key, changes, stated = write
    slot = (str(kind), hashable_key(key))
    base = rows.get(slot)
    row = dict(changes) if base is None else {**base, **changes}
    rows[slot] = row
    try:
        actual: str | None = row_sha256(row)
    except CanonicalJSONError:
        actual = None
    call = row.get("call_id")
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
    return {
        "v": BATCH_VERSION,
        "seq": seq,
        "kind": kind,
        "operation_id": row_op if isinstance(row_op, str) else op,
        "call_id": call if isinstance(call, str) else None,
        "key": key,
        "row": row,
    }
