"""Row writes an open transaction holds back until it needs them: each row once, in batches.

A turn writes a call four times (proposed, allowed, started, answered), its operation as
often, and a transition row per move. Inside one transaction only the last version of each
row has to reach the table, so the store keeps the calls, operations and transitions it
writes here and puts them in the table when the transaction commits, or before any read that
could see them: one ``executemany`` per kind instead of a statement per write.

A row changed (not new) is updated in the columns that differ from the version this
connection last wrote of it (``base``), or in every column it may change when there is none:
an index whose columns did not change is not rewritten (a call's result leaves the indexes of
its arguments and key alone), so a commit writes fewer pages. A column changed around
toolloop in between stays as it was found, where the audit log and the checks that read the
table back see it, rather than being written over.

The compare-and-set stays what it was. A row's first held write carries the version it
expects in the table (the call's state; the operation's state and ``updated_at``), checked
when the batch is written; each later write of the same row is checked against the held
version. The transaction holds the store's write lock from its first statement, so nothing
else can change the rows in between. Transition ids are taken when they are written: after
the table's last id on SQLite (read once per transaction, under the write lock), from the
table's sequence on PostgreSQL. A read flushes only the table it reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from toolloop_cli.errors import StoreError

from .connection import Connection
from .rows import CALL_COLUMNS, CALL_NAMES, OP_NAMES, TRANSITION_NAMES

#: the call columns a write may change (the rest are its identity, fixed at insert)
_CALL_CHANGING = tuple(range(6, len(CALL_NAMES)))
_CALL_INSERT = f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({', '.join('?' for _ in CALL_NAMES)})"
#: the operation columns a write may change (all but its id)
_OP_CHANGING = tuple(range(1, len(OP_NAMES)))
_TRANSITION_INSERT = (
    f"INSERT INTO transitions ({', '.join(TRANSITION_NAMES)})"
    f" VALUES ({', '.join('?' for _ in TRANSITION_NAMES)})"
)
_STATE = CALL_NAMES.index("state")
_TURN = CALL_NAMES.index("turn_idx")
_OP_STATE = OP_NAMES.index("state")

#: a held row: its latest version, what the table must hold for it to be written, and the
#: version it changes (None: a new row, or one this connection holds no version of)
_Held = list[Any]


@lru_cache(maxsize=256)
def _call_update(columns: tuple[int, ...]) -> str:
    sets = ", ".join(f"{CALL_NAMES[i]} = ?" for i in columns)
    return (
        f"UPDATE calls SET {sets} WHERE operation_id = ? AND response_id = ? AND call_id = ?"
        " AND state = ?"
    )


@lru_cache(maxsize=256)
def _op_update(columns: tuple[int, ...], checks_updated_at: bool) -> str:
    sets = ", ".join(f"{OP_NAMES[i]} = ?" for i in columns)
    sql = f"UPDATE operations SET {sets} WHERE operation_id = ? AND state = ?"
    return sql + " AND updated_at = ?" if checks_updated_at else sql


def _changes(
    row: Sequence[Any], base: Sequence[Any] | None, changing: tuple[int, ...], state: int
) -> tuple[int, ...]:
    """The columns of ``row`` to set: those that differ from ``base`` (all that may change
    when there is none; the state alone when nothing did, so the write still checks it)."""
    if base is None:
        return changing
    first = changing[0]  # the columns that may change are the row's last ones
    pairs = zip(changing, row[first:], base[first:], strict=True)
    return tuple([i for i, now, was in pairs if now != was]) or (state,)


#: the tables a flush can be limited to (a read writes only the held rows it could see)
CALLS, OPERATIONS, TRANSITIONS = "calls", "operations", "transitions"
ALL = frozenset((CALLS, OPERATIONS, TRANSITIONS))


class HeldWrites:
    """The calls, operations and transitions an open transaction has not written yet."""

    def __init__(self, conn: Connection, postgres: bool) -> None:
        self.conn = conn
        self.postgres = postgres
        #: (operation, response, call id) -> [row, expected state (None: a new row)]
        self._calls: dict[tuple[str, str, str], _Held] = {}
        #: operation id -> [row, expected state, expected updated_at (None: not checked)]
        self._ops: dict[str, _Held] = {}
        #: transition rows without their id
        self._transitions: list[tuple[Any, ...]] = []
        #: SQLite: the next transition id of the open transaction (None: not read yet)
        self._next_id: int | None = None

    def __bool__(self) -> bool:
        return bool(self._calls or self._ops or self._transitions)

    def insert_call(self, row: tuple[Any, ...]) -> None:
        key = (row[0], row[3], row[4])
        if key in self._calls:
            raise StoreError(f"call {row[4]} of response {row[3]} is already recorded")
        self._calls[key] = [row, None, None]

    def save_call(
        self, row: tuple[Any, ...], expected: str, base: tuple[Any, ...] | None = None
    ) -> None:
        """Hold a changed call; ``base``: the version of it in the table, if known."""
        key = (row[0], row[3], row[4])
        held = self._calls.get(key)
        if held is None:
            self._calls[key] = [row, expected, base]
            return
        if held[0][_STATE] != expected:
            raise _changed(f"call {row[4]}", expected)
        held[0] = row

    def save_operation(
        self,
        operation_id: str,
        row: tuple[Any, ...],
        expected: str,
        updated_at: str | None,
        base: tuple[Any, ...] | None = None,
    ) -> None:
        """Hold a changed operation; ``base``: the version of it in the table, if known."""
        held = self._ops.get(operation_id)
        if held is None:
            self._ops[operation_id] = [row, expected, updated_at, base]
            return
        if held[0][1] != expected:
            raise _changed(f"operation {operation_id}", expected)
        held[0] = row

    def transition(self, values: tuple[Any, ...]) -> None:
        self._transitions.append(values)

    def holds(self, tables: frozenset[str]) -> bool:
        """Whether a flush of ``tables`` has anything to write."""
        return bool(
            (CALLS in tables and self._calls)
            or (OPERATIONS in tables and self._ops)
            or (TRANSITIONS in tables and self._transitions)
        )

    def holds_calls_before(self, operation_id: str, turn_idx: int) -> bool:
        """Whether a held call could be one a read of calls before ``turn_idx`` of
        ``operation_id`` finds (a held call of another operation counts)."""
        return any(
            key[0] != operation_id or held[0][_TURN] < turn_idx for key, held in self._calls.items()
        )

    def clear(self) -> None:
        """Forget the transaction's held rows (it committed, or rolled back)."""
        self._calls.clear()
        self._ops.clear()
        self._transitions.clear()
        self._next_id = None

    def flush(
        self, audit: Callable[[str, dict[str, Any]], None], tables: frozenset[str] = ALL
    ) -> None:
        """Write the held rows of ``tables`` (inside the open transaction); each transition,
        now that it has its id, goes to ``audit`` (calls and operations were audited as they
        were held)."""
        if CALLS in tables and self._calls:
            self._flush_calls()
        if OPERATIONS in tables and self._ops:
            self._flush_operations()
        if TRANSITIONS in tables and self._transitions:
            self._flush_transitions(audit)

    def _flush_operations(self) -> None:
        for operation_id, (row, expected, updated_at, base) in self._ops.items():
            columns = _changes(row, base, _OP_CHANGING, _OP_STATE)
            sql = _op_update(columns, updated_at is not None)
            args = (*(row[i] for i in columns), operation_id, expected)
            if updated_at is not None:
                args = (*args, updated_at)
            if self.conn.execute(sql, args).rowcount != 1:
                raise _changed(f"operation {operation_id}", expected)
        self._ops.clear()

    def _flush_transitions(self, audit: Callable[[str, dict[str, Any]], None]) -> None:
        ids = self._ids(len(self._transitions))
        rows = [(n, *t) for n, t in zip(ids, self._transitions, strict=True)]
        self._transitions.clear()
        self.conn.executemany(_TRANSITION_INSERT, rows)
        for row in rows:
            audit("transition", dict(zip(TRANSITION_NAMES, row, strict=True)))

    def _flush_calls(self) -> None:
        new = [row for row, expected, _ in self._calls.values() if expected is None]
        changed: dict[tuple[int, ...], list[tuple[Any, ...]]] = {}
        for row, expected, base in self._calls.values():
            if expected is not None:
                columns = _changes(row, base, _CALL_CHANGING, _STATE)
                changed.setdefault(columns, []).append(
                    (*(row[i] for i in columns), row[0], row[3], row[4], expected)
                )
        self._calls.clear()
        if new:
            try:
                self.conn.executemany(_CALL_INSERT, new)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"a call of this turn is already recorded: {exc}") from exc
        written = sum(
            self.conn.executemany(_call_update(columns), rows).rowcount
            for columns, rows in changed.items()
        )
        if written != sum(len(rows) for rows in changed.values()):
            raise StoreError(
                "a call of this turn is no longer in the state it was read in: "
                "another process changed it"
            )

    def _ids(self, count: int) -> Sequence[int]:
        """``count`` new transition ids, in order."""
        if self.postgres:
            rows = self.conn.execute(
                "SELECT nextval(pg_get_serial_sequence('transitions', 'id'))"
                " FROM generate_series(1, ?)",
                (count,),
            ).fetchall()
            return [int(r[0]) for r in rows]
        if self._next_id is None:
            (last,) = self.conn.execute("SELECT coalesce(max(id), 0) FROM transitions").fetchone()
            self._next_id = int(last) + 1
        first, self._next_id = self._next_id, self._next_id + count
        return range(first, first + count)


def _changed(what: str, expected: str) -> StoreError:
    return StoreError(f"{what} is no longer {expected}: another process changed it")
