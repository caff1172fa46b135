"""Audit records and the hash chain that links them.

Every transaction that writes to an audited table appends one record per operation it
touched: the batch of its writes, each row once, as the transaction left it, sealed into a
chain:

    {"v": 4, "seq": N, "kind": "batch", "operation_id": OP, "call_id": null,
     "writes": [[K, {...every column...}],                       # a row written whole
                [K, [...the row's identity...], {...changed columns...}, "sha256:..."]]}

A row written whole (a new row, an event, a row whose last version this writer does not
hold) is its columns: the record, chained, holds all of it, so no row hash is stated. A row
changed since a version the log holds lists the columns that changed and the hash of the
whole row after the change. Inside a record of operation OP every row is OP's: keys leave out
their leading ``operation_id`` and columns leave out ``operation_id``, and readers put both
back. When a row's state moved more than once in the transaction, its write ends with the
states it went through first (``[..., ["PROPOSED", "APPROVED"]]``), each move checked as if
written alone. So ``verify`` rebuilds every row from its records and checks each rebuilt row
against its stated hash and against the table.

Older layouts stay readable: version 3 stated a row hash for every write and spelled out
every key and ``operation_id``; version 2 listed a row once per write in the transaction;
stores written before batches hold one record per row write, the row as it then stood
(version 1):

    {"v": 1, "seq": N, "kind": K, "operation_id": OP, "call_id": CALL|null,
     "key": [...the row's identity...], "row": {...every column...}}

and its audit-log row carries three hashes:

    record_sha256 = sha256(record bytes)
    prev_sha256   = chain_sha256 of record N-1 (GENESIS for N = 1)
    chain_sha256  = sha256(canonical [N, prev_sha256, record_sha256])

so a record cannot be edited, dropped, inserted or moved without breaking every link after
it, and the last ``chain_sha256`` (the head) stands for the whole log. Hashes are written
``sha256:<hex>`` over RFC 8785 canonical JSON (``canonical``); each costs O(size of one
record), never O(history).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .canonical import MAX_SAFE_INT, fast_canonical_bytes, sha256_hex

__all__ = [
    "GENESIS",
    "KINDS",
    "RECORD_VERSION",
    "BATCH",
    "BATCH_VERSION",
    "BATCH_VERSIONS",
    "Kind",
    "Sealed",
    "Write",
    "chain_link",
    "hashable_key",
    "key_text",
    "record_key",
    "row_sha256",
    "seal",
    "seal_batch",
]

#: Version of the one-record-per-row-write layout (stores written before batches).
RECORD_VERSION = 1
#: Version of the batch layout: one record per transaction and operation, each row written
#: once in it (whole, or the columns it changed and its hash) and, when its state moved more
#: than once, the states it went through.
BATCH_VERSION = 4
#: Batch layouts ``verify`` reads: 3 stated a hash and a full key for every write; 2 wrote a
#: row once per write, so a row could appear twice.
BATCH_VERSIONS = (2, 3, BATCH_VERSION)
#: The ``kind`` of a batch record.
BATCH = "batch"

#: The ``prev_sha256`` of the first record of every store.
GENESIS = "sha256:" + "0" * 64

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Kind:
    """One kind of audit record: the table whose rows it snapshots and their key columns."""

    name: str
    table: str
    key: tuple[str, ...]


#: Every record kind. ``items`` records an append to an operation's conversation.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("operation", "operations", ("operation_id",)),
        Kind("turn", "turns", ("operation_id", "idx")),
        Kind("call", "calls", ("operation_id", "response_id", "call_id")),
        Kind("approval", "approvals", ("approval_id",)),
        Kind("transition", "transitions", ("id",)),
        Kind("items", "conversation", ("operation_id", "start")),
    )
}


@dataclass(frozen=True)
class Sealed:
    """A record ready to append: its canonical text and its three hashes."""

    seq: int
    kind: str
    operation_id: str | None
    call_id: str | None
    record: str
    record_sha256: str
    prev_sha256: str
    chain_sha256: str


def chain_link(seq: int, prev_sha256: str, record_sha256: str) -> str:
    """The chain hash of record ``seq``: binds its position, its predecessor and its bytes."""
    if (
        _DIGEST.fullmatch(prev_sha256)
        and _DIGEST.fullmatch(record_sha256)
        and 0 < seq <= MAX_SAFE_INT
    ):
        # canonical JSON of [int, "sha256:<hex>", "sha256:<hex>"]: nothing to escape or sort
        return sha256_hex(f'[{seq},"{prev_sha256}","{record_sha256}"]'.encode("ascii"))
    return sha256_hex(fast_canonical_bytes([seq, prev_sha256, record_sha256]))


def record_key(kind: Kind, row: Mapping[str, Any]) -> list[Any]:
    """The row's identity in its table, as the record stores it."""
    return [row[column] for column in kind.key]


def seal(seq: int, prev_sha256: str, kind_name: str, row: Mapping[str, Any]) -> Sealed:
    """Build and hash record ``seq`` of kind ``kind_name`` over ``row`` (every column)."""
    kind = KINDS[kind_name]
    operation_id = row.get("operation_id")
    call_id = row.get("call_id")
    record = {
        "v": RECORD_VERSION,
        "seq": seq,
        "kind": kind.name,
        "operation_id": operation_id,
        "call_id": call_id,
        "key": record_key(kind, row),
        "row": dict(row),
    }
    body = fast_canonical_bytes(record)
    record_sha256 = sha256_hex(body)
    return Sealed(
        seq=seq,
        kind=kind.name,
        operation_id=operation_id,
        call_id=call_id,
        record=body.decode("utf-8"),
        record_sha256=record_sha256,
        prev_sha256=prev_sha256,
        chain_sha256=chain_link(seq, prev_sha256, record_sha256),
    )


@dataclass(frozen=True)
class Write:
    """One row's write in a batch: the row whole (``row_sha256`` None), or the columns the
    transaction changed and the hash of the row as it committed; and the states it passed
    through first (``via``: empty when its state moved at most once in the transaction)."""

    kind: str
    key: list[Any]
    changes: dict[str, Any]
    row_sha256: str | None = None
    via: tuple[str, ...] = ()

    def entry(self, operation_id: str | None) -> list[Any]:
        """The write as a batch record of ``operation_id`` lists it (its own id left out)."""
        changes, key = self.changes, self.key
        if operation_id is not None:
            if changes.get("operation_id", operation_id) != operation_id:
                raise ValueError(f"a {self.kind} row of another operation in {operation_id}'s")
            if "operation_id" in changes:
                changes = {c: v for c, v in changes.items() if c != "operation_id"}
            if KINDS[self.kind].key[0] == "operation_id":
                if key[0] != operation_id:
                    raise ValueError(f"a {self.kind} key of another operation in {operation_id}'s")
                key = key[1:]
        if self.row_sha256 is None:
            head: list[Any] = [self.kind, changes]
        else:
            head = [self.kind, key, changes, self.row_sha256]
        return [*head, list(self.via)] if self.via else head


def row_sha256(row: Mapping[str, Any]) -> str:
    """The hash of a whole row (every column) as a batch write states it."""
    return sha256_hex(fast_canonical_bytes(row))


def seal_batch(
    seq: int, prev_sha256: str, operation_id: str | None, writes: Sequence[Write]
) -> Sealed:
    """Build and hash batch record ``seq``: the writes of one transaction, in order."""
    record = {
        "v": BATCH_VERSION,
        "seq": seq,
        "kind": BATCH,
        "operation_id": operation_id,
        "call_id": None,
        "writes": [w.entry(operation_id) for w in writes],
    }
    body = fast_canonical_bytes(record)
    record_sha256 = sha256_hex(body)
    return Sealed(
        seq=seq,
        kind=BATCH,
        operation_id=operation_id,
        call_id=None,
        record=body.decode("utf-8"),
        record_sha256=record_sha256,
        prev_sha256=prev_sha256,
        chain_sha256=chain_link(seq, prev_sha256, record_sha256),
    )


def hashable_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """A record key as a dict key (lists and objects in it by their repr)."""
    for v in values:
        if isinstance(v, list | dict):
            return tuple(repr(x) if isinstance(x, list | dict) else x for x in values)
    return tuple(values)


def key_text(values: Sequence[Any]) -> str:
    """A row key for messages: ``a/b/c``."""
    return "/".join("" if v is None else str(v) for v in values)
