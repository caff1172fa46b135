"""The audit records of one store connection: a transaction's row writes sealed as one batch.

A row written several times in one transaction (joined transactions included) is one write of
the batch: the whole row when it has no known version (new rows and events), else the columns
the transaction changed since that version and the hash of the whole row as it committed;
and the states it went through before the last one. Hashes are taken at the seal, once per
changed row. A row's last known version is what this connection last
committed of it (and so logged, every column): the store changes operations, calls and
approvals only by compare-and-set on that version (the operation's ``updated_at``, a call's
state, a PENDING approval), so it is the one the log holds. A row read but not yet written
here (by another process, or in a schema a migration has since widened) is written whole;
rows that can no longer change (a final state) are forgotten, so memory stays bounded by the
rows still in flight.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from toolloop_cli.audit.expand import read_write
from toolloop_cli.audit.hashing import (
    GENESIS,
    KINDS,
    Sealed,
    Write,
    hashable_key,
    record_key,
    row_sha256,
    seal_batch,
)
from toolloop_cli.audit.stored import pack_record, record_text

from .audit_rules import HISTORY_RULES
from .connection import Connection

#: the kinds whose rows are written more than once (the others are events: written whole)
_CHANGING = frozenset({"operation", "call", "approval"})

_Slot = tuple[str, tuple[Any, ...]]
_ABSENT = object()


class _Pending:
    """A row written in the open transaction: its version before it, and as it stands now."""

    __slots__ = ("base", "key", "kind", "row", "via")

    def __init__(
        self, kind: str, key: list[Any], base: Mapping[str, Any] | None, row: dict[str, Any]
    ) -> None:
        self.kind, self.key, self.base, self.row = kind, key, base, row
        self.via: list[str] = []

    def sealed(self) -> Write:
        """The row's write: whole, or what changed since ``base`` and its hash as it stands."""
        row, base = self.row, self.base
        if base is None:
            return Write(self.kind, self.key, row, None, tuple(self.via))
        changes = {c: v for c, v in row.items() if base.get(c, _ABSENT) != v}
        return Write(self.kind, self.key, changes, row_sha256(row), tuple(self.via))


class AuditWriter:
    """Collects a transaction's row writes and appends them to the log at its commit."""

    def __init__(
        self, conn: Connection, head_source: str = "audit_log", packed: bool = False
    ) -> None:
        self.conn = conn
        #: records kept deflated (``audit.stored``: SQLite; PostgreSQL compresses them itself)
        self.packed = packed
        #: where the chain's head is read: the log, or a view of its last link (PostgreSQL,
        #: so a tenant role that sees only its own records still appends to the one chain)
        self.head_source = head_source
        self._known: dict[_Slot, dict[str, Any]] = {}
        self._open: dict[_Slot, _Pending] = {}  # rows written in the open transaction
        self._writes: list[tuple[str | None, _Pending | Write]] = []

    def write(self, kind: str, row: Mapping[str, Any]) -> None:
        """Record one row write (inside the open transaction; sealed at its commit)."""
        key = record_key(KINDS[kind], row)
        op = row.get("operation_id")
        owner = op if isinstance(op, str) else None
        if kind not in _CHANGING:
            self._writes.append((owner, Write(kind, key, dict(row))))
            return
        slot = (kind, hashable_key(key))
        pending = self._open.get(slot)
        if pending is None:
            pending = self._open[slot] = _Pending(kind, key, self._known.get(slot), dict(row))
            self._writes.append((owner, pending))
            return
        state = _STATE[kind]
        was = pending.row.get(state)
        if was != row.get(state):
            pending.via.append(str(was))
        pending.row = dict(row)

    def read(self, kind: str, row: Mapping[str, Any]) -> None:
        """A row as read from its table: a version this connection did not commit (another
        process changed the row since) is no base for a delta; the next write is whole."""
        slot = (kind, hashable_key(record_key(KINDS[kind], row)))
        known = self._known.get(slot)
        if known is not None and known != row and slot not in self._open:
            del self._known[slot]

    def writes(self, kind: str, key: list[Any]) -> bool:
        """Whether the open transaction has written this row (its records are not sealed)."""
        return (kind, hashable_key(key)) in self._open

    def last_version(self, kind: str, key: list[Any]) -> Mapping[str, Any] | None:
        """The row as this connection last wrote it to its table (in the open transaction, or
        as last committed), every column; None when it holds no version of it."""
        slot = (kind, hashable_key(key))
        pending = self._open.get(slot)
        return pending.row if pending is not None else self._known.get(slot)

    def expected_updated_at(self, operation_id: str) -> object:
        """The ``updated_at`` of the operation version the next write changes (or absent)."""
        slot = ("operation", (operation_id,))
        pending = self._open.get(slot)
        base = pending.row if pending is not None else self._known.get(slot)
        return _ABSENT if base is None else base.get("updated_at", _ABSENT)

    def unsealed_bindings(
        self, operation_id: str, wanted: set[tuple[str, str]]
    ) -> dict[tuple[str, str], str | None]:
        """The last ``call_binding_sha256`` the open transaction wrote for each wanted
        (response id, call id): writes of a held commit are not in the log yet."""
        found: dict[tuple[str, str], str | None] = {}
        writes = (
            ((w.key[1], w.key[2]), w.row)
            for op, w in reversed(self._writes)
            if op == operation_id and isinstance(w, _Pending) and w.kind == "call"
        )
        _take_bindings(writes, wanted, found)
        return found

    def seal(self, head: tuple[int, str] | None) -> None:
        """Append the open transaction's writes as one batch record per operation."""
        if not self._writes:
            return
        if head is None:
            head = self.head()
        groups: dict[str | None, list[Write]] = {}
        for op, write in self._writes:
            whole = write.sealed() if isinstance(write, _Pending) else write
            groups.setdefault(op, []).append(whole)
        seq, prev = head
        for op, writes in groups.items():
            sealed = seal_batch(seq + 1, prev, op, writes)
            append_sealed(self.conn, sealed, self.packed)
            seq, prev = sealed.seq, sealed.chain_sha256
        self._writes.clear()

    def head(self) -> tuple[int, str]:
        """``(seq, chain_sha256)`` of the last audit record; ``(0, GENESIS)`` when empty."""
        last = self.conn.execute(
            f"SELECT seq, chain_sha256 FROM {self.head_source} ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (0, GENESIS) if last is None else (int(last[0]), str(last[1]))

    def committed(self) -> None:
        """The transaction committed: its versions are now the known ones."""
        for slot, pending in self._open.items():
            if _final(slot[0], pending.row):
                self._known.pop(slot, None)
            else:
                self._known[slot] = pending.row
        self._open.clear()
        self._writes.clear()

    def rolled_back(self) -> None:
        """The transaction rolled back: nothing it wrote happened."""
        self._open.clear()
        self._writes.clear()


def append_sealed(conn: Connection, sealed: Sealed, packed: bool = False) -> None:
    """Insert one sealed record as the log's next row (its text deflated when ``packed``)."""
    conn.execute(
        "INSERT INTO audit_log (seq, operation_id, kind, call_id, record, record_sha256,"
        " prev_sha256, chain_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            sealed.seq,
            sealed.operation_id,
            sealed.kind,
            sealed.call_id,
            pack_record(sealed.record) if packed else sealed.record,
            sealed.record_sha256,
            sealed.prev_sha256,
            sealed.chain_sha256,
        ),
    )


#: the state column of each kind whose rows change
_STATE = {kind: str(HISTORY_RULES[kind].state) for kind in _CHANGING}


def _final(kind: str, row: Mapping[str, Any]) -> bool:
    """The row is in a state nothing moves out of: it is never written again."""
    rules = HISTORY_RULES[kind]
    if rules.state is None or rules.after_final:
        return False
    moves = rules.moves.get(str(row.get(rules.state)))
    return moves is not None and not moves


def bindings_in(
    records: Iterable[str | bytes], wanted: set[tuple[str, str]]
) -> dict[tuple[str, str], str | None]:
    """The last ``call_binding_sha256`` each wanted (response id, call id) has in ``records``.

    ``records`` are one operation's audit records as stored, newest first (batch or per-row
    layout, text or deflated);
    the newest write that set the column holds its value. Reading stops once every wanted
    call is found.
    """
    found: dict[tuple[str, str], str | None] = {}
    for text in records:
        record = json.loads(record_text(text))
        writes: list[tuple[Any, Any]] = []
        if record.get("kind") == "batch":
            for write in reversed(record.get("writes") or []):
                read = read_write(record, write)
                if read is not None and read.kind == "call" and len(read.key) == 3:
                    writes.append((tuple(read.key[1:]), read.changes))
        elif record.get("kind") == "call" and isinstance(record.get("row"), dict):
            row = record["row"]
            writes.append(((row.get("response_id"), row.get("call_id")), row))
        _take_bindings(writes, wanted, found)
        if len(found) == len(wanted):
            break
    return found


def _take_bindings(
    writes: Iterable[tuple[Any, Any]],
    wanted: set[tuple[str, str]],
    found: dict[tuple[str, str], str | None],
) -> None:
    """Add to ``found`` the binding of each wanted call that ``writes`` (newest first, as
    (response id, call id), changed columns) set before any found so far."""
    for pair, changes in writes:
        if pair not in wanted or pair in found or not isinstance(changes, dict):
            continue
        if "call_binding_sha256" in changes:
            value = changes["call_binding_sha256"]
            found[pair] = value if isinstance(value, str) else None
