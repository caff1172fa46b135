"""Batch records read back as row writes: each write's row rebuilt from the records before it.

A batch record (``hashing.BATCH_VERSIONS``) holds only the columns each write changed, so the
whole row after a write is the row after the previous write of the same key with those
columns applied (a key's first write holds every column). A write that names the states its
row went through first (``via``) passes them on, for the history to check each move. Each
rebuilt row must hash to the ``row_sha256`` its write states: a record whose changes do not
add up to the row the writer had is a mismatch, never repaired. Records of the older layout
(one full row per record) pass through unchanged and are the base for batch writes after
them.

The output has the older layout, one record per row write, so the history and snapshot
checks read both layouts the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .canonical import CanonicalJSONError
from .hashing import BATCH, BATCH_VERSION, BATCH_VERSIONS, KINDS, hashable_key, row_sha256
from .mismatch import Mismatch

__all__ = ["expand"]

_Key = tuple[str, tuple[Any, ...]]


def expand(records: Sequence[dict[str, Any]], found: list[Mismatch]) -> list[dict[str, Any]]:
    """Every row write of ``records`` (in ``seq`` order), each with its whole row."""
    rows: dict[_Key, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for record in records:
        if record.get("v") not in BATCH_VERSIONS or record.get("kind") != BATCH:
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
    if not _well_formed(write, record.get("v")):
        found.append(
            Mismatch.of(
                op if isinstance(op, str) else None,
                None,
                "audit_log",
                where,
                "writes",
                "[kind, key, changed columns, row sha256(, states went through)]",
                write,
            )
        )
        return None
    assert isinstance(write, list)
    kind, key, changes, stated = write[:4]
    via = write[4] if len(write) == 5 else None
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
    out = {
        "v": record.get("v"),
        "seq": seq,
        "kind": kind,
        "operation_id": row_op if isinstance(row_op, str) else op,
        "call_id": call if isinstance(call, str) else None,
        "key": key,
        "row": row,
    }
    if via is not None:
        out["via"] = via
    return out


def _well_formed(write: object, version: object) -> bool:
    """[kind, key, changes, row hash], and in a version 3 batch maybe the states went through:
    a non-empty list of strings (an empty one is never written)."""
    if not (
        isinstance(write, list)
        and len(write) in ((4, 5) if version == BATCH_VERSION else (4,))
        and write[0] in KINDS
        and isinstance(write[1], list)
        and isinstance(write[2], dict)
        and isinstance(write[3], str)
    ):
        return False
    if len(write) == 4:
        return True
    via = write[4]
    return isinstance(via, list) and bool(via) and all(isinstance(s, str) for s in via)
