"""Reads and writes of the store. Writes happen inside ``Store.transaction()``.

One transaction per state change: the engine opens it, makes every write of that change
(the turn, its calls, the operation's new state and the transition log) and commits before
its next side effect. Conversation items are stored once, content-addressed, and each
operation keeps an append-only list of item hashes, so no turn copies the history.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from toolloop_cli.audit.canonical import canonical_text, sha256_hex
from toolloop_cli.engine.records import CallRecord, OperationRecord, TurnRecord
from toolloop_cli.engine.states import CallState, OpState
from toolloop_cli.engine.types import MAX_BODY_BYTES, JSONObject, ToolSpec
from toolloop_cli.errors import OperationNotFound, StoreError, TamperedStore

from .approvals import ApprovalStore
from .audit_writer import bindings_in
from .held import CALLS, OPERATIONS, TRANSITIONS
from .migrations import OPEN_CALLS_WHERE
from .rows import (
    CALL_COLUMNS,
    CALL_NAMES,
    LOGGED_NAMES,
    OP_COLUMNS,
    OP_NAMES,
    TURN_COLUMNS,
    as_row,
    call_from_row,
    call_row,
    dump,
    op_from_row,
    op_row,
    response_body_from,
    transition_from_row,
    turn_from_row,
)
from .unreadable import unreadable

#: what a read of one table writes first of the open transaction's held rows
_CALLS, _OPS, _TRANSITIONS = (frozenset((t,)) for t in (CALLS, OPERATIONS, TRANSITIONS))


class Store(ApprovalStore):
    """The operations store: operations, their transitions, conversations, turns, calls
    and approvals over one connection (``transactions.py``). Not thread-safe: one Store per
    thread or process."""

    # -- operations -------------------------------------------------------------------------

    def insert_operation(self, op: OperationRecord) -> None:
        row = op_row(op)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT INTO operations ({OP_COLUMNS}) VALUES ({marks})", row)
        self.audit("operation", dict(zip(OP_NAMES, row, strict=True)))

    def get_operation(self, operation_id: str, tenant: str | None = None) -> OperationRecord:
        return op_from_row(self._operation_row(operation_id, tenant))

    def get_logged_operation(self, operation_id: str, tenant: str | None = None) -> OperationRecord:
        """``get_operation``, refused (``TamperedStore``) when the row is not what the audit
        log last recorded (``logged.py``): read before a process loads the operation's
        registry and steps it, so a row written around toolloop (a state set back, a
        registry path pointed elsewhere) runs nothing and imports nothing."""
        try:
            return self._logged_operation(operation_id, tenant)
        except TamperedStore:
            if self.conn.in_transaction:
                raise
        # Read outside a transaction, the row and its last record are two statements, and
        # another process may commit a step of the operation between them: that is not a
        # write around toolloop. Both are read again under the writers' lock, where nothing
        # commits in between; a mismatch there is one.
        with self.transaction():
            return self._logged_operation(operation_id, tenant)

    def _logged_operation(self, operation_id: str, tenant: str | None) -> OperationRecord:
        row = self._operation_row(operation_id, tenant)
        named = dict(zip(OP_NAMES, row, strict=True))
        self._check_logged("operation", [operation_id], named, f"operation {operation_id}")
        return op_from_row(row)

    def _operation_row(self, operation_id: str, tenant: str | None) -> tuple[Any, ...]:
        self._write_held(_OPS)
        row: tuple[Any, ...] | None = self._read_one(
            "operations",
            f"SELECT {OP_COLUMNS} FROM operations WHERE operation_id = ?",
            (operation_id,),
        )
        if row is None or (tenant is not None and row[8] != tenant):
            raise OperationNotFound(
                f"no operation {operation_id or repr('')} in store {self.location}"
            )
        self._audit.read("operation", dict(zip(OP_NAMES, row, strict=True)))
        return row

    def list_operations(
        self, tenant: str | None = None, limit: int | None = 50
    ) -> list[OperationRecord]:
        """The newest operations first, at most ``limit`` of them (None: every one)."""
        self._write_held(_OPS)
        sql = f"SELECT {OP_COLUMNS} FROM operations"
        args: list[Any] = []
        if tenant is not None:
            sql += " WHERE tenant = ?"
            args.append(tenant)
        sql += " ORDER BY created_at DESC, rowid DESC"
        if limit is not None:  # PostgreSQL has no LIMIT -1 for "no limit"
            sql += " LIMIT ?"
            args.append(limit)
        return [op_from_row(r) for r in self._read("operations", sql, args)]

    def operations_in_state(
        self, state: OpState, tenant: str | None = None
    ) -> list[OperationRecord]:
        self._write_held(_OPS)
        sql = f"SELECT {OP_COLUMNS} FROM operations WHERE state = ?"
        args: list[Any] = [state.value]
        if tenant is not None:
            sql += " AND tenant = ?"
            args.append(tenant)
        sql += " ORDER BY updated_at, rowid"
        return [op_from_row(r) for r in self._read("operations", sql, args)]

    def save_operation(self, op: OperationRecord, expected_state: OpState) -> None:
        """Write ``op`` if the stored state is still ``expected_state`` (compare-and-set,
        checked when the held write reaches the table)."""
        row = op_row(op)
        known = self._audit.expected_updated_at(op.operation_id)
        # the version the audit record's changes are taken from must be the table's
        updated_at = known if isinstance(known, str) else None
        base = self._audit.last_version("operation", [op.operation_id])
        self._rows.save_operation(
            op.operation_id, row, expected_state.value, updated_at, as_row(base, OP_NAMES)
        )
        self.audit("operation", dict(zip(OP_NAMES, row, strict=True)))
        self._unless_held()

    def log_transition(
        self,
        operation_id: str,
        kind: str,
        source: str | None,
        target: str,
        at: str,
        reason: str | None = None,
        call_id: str | None = None,
        response_id: str | None = None,
    ) -> None:
        """One state change; a call's (or approval's) is named by (response id, call id).
        Held with the transaction's other writes; audited once it has its id."""
        self._rows.transition(
            (operation_id, kind, call_id, source, target, reason, at, response_id)
        )
        self._unless_held()

    def transitions(self, operation_id: str) -> list[dict[str, Any]]:
        """The state log in order; ``response_id`` is None in rows from before it was kept."""
        self._write_held(_TRANSITIONS)
        rows = self._read(
            "transitions",
            f"SELECT {', '.join(LOGGED_NAMES)} FROM transitions WHERE operation_id = ? ORDER BY id",
            (operation_id,),
        )
        return [transition_from_row(operation_id, r) for r in rows]

    # -- conversation ------------------------------------------------------------------------

    def conversation(self, operation_id: str) -> list[JSONObject]:
        """The operation's conversation items, in order (cached after the first read)."""
        cached = self._conversations.get(operation_id)
        if cached is None:
            rows = self._read(
                "blobs",
                "SELECT c.seq, c.item_sha256, b.body FROM conversation c"
                " LEFT JOIN blobs b ON b.sha256 = c.item_sha256"
                " WHERE c.operation_id = ? ORDER BY c.seq",
                (operation_id,),
            )
            cached = [self._item(operation_id, n, row) for n, row in enumerate(rows)]
            self._conversations[operation_id] = cached
        return cached

    def _item(self, operation_id: str, n: int, row: Sequence[Any]) -> JSONObject:
        """Conversation item ``n`` as stored: its body must be there, hash to the digest its
        position names, and be a JSON object (what is sent to a model is what was stored)."""
        seq, digest, body = row
        where = f"tampered store: conversation item {n} of operation {operation_id}"
        if seq != n:
            raise TamperedStore(f"{where}: the conversation has no item at position {n}")
        if not isinstance(body, str):
            raise TamperedStore(f"{where}: blobs holds no body for {digest!r}")
        if sha256_hex(body.encode("utf-8")) != digest:
            raise TamperedStore(f"{where}: blobs.body does not hash to {digest!r}")
        try:
            item = json.loads(body)
        except ValueError:
            item = None
        if not isinstance(item, dict):
            raise TamperedStore(f"{where}: blobs.body is not a JSON object")
        return item

    def append_items(self, operation_id: str, items: Sequence[JSONObject]) -> None:
        if not items:
            return
        conversation = self.conversation(operation_id)
        start = len(conversation)
        bodies = [canonical_text(item) for item in items]
        digests = [sha256_hex(body.encode("utf-8")) for body in bodies]
        # one statement each for the bodies and the positions, in item order (a body that
        # repeats within the items is added by its first row and found by the next)
        self.conn.executemany(self._add_blob, list(zip(digests, bodies, strict=True)))
        self.conn.executemany(
            "INSERT INTO conversation (operation_id, seq, item_sha256) VALUES (?, ?, ?)",
            [(operation_id, start + n, digest) for n, digest in enumerate(digests)],
        )
        conversation.extend(items)
        self.audit("items", {"operation_id": operation_id, "start": start, "items": digests})

    # -- turns ----------------------------------------------------------------------------------

    def insert_turn(
        self,
        turn: TurnRecord,
        request_items: int,
        response_body: bytes,
        tools: Sequence[ToolSpec] | None = None,
    ) -> None:
        """Record a turn; ``tools`` (as declared in its request) lets verify rebuild it.

        A body over ``MAX_BODY_BYTES`` is refused here, before SQLite sees it (the engine keeps
        at most that much of an answer), so no size reaches SQLite's own limits.
        """
        if len(response_body) > MAX_BODY_BYTES:
            raise StoreError(
                f"turn {turn.idx} of {turn.operation_id}: a response body of "
                f"{len(response_body)} bytes is over the {MAX_BODY_BYTES}-byte cap"
            )
        row = {
            "operation_id": turn.operation_id,
            "idx": turn.idx,
            "response_id": turn.response_id,
            "outcome": turn.outcome.value,
            "finish_reason": turn.finish_reason,
            "text": turn.text,
            "detail": turn.detail,
            "request_sha256": turn.request_sha256,
            "request_items": request_items,
            "response_sha256": turn.response_sha256,
            "usage_json": dump(turn.usage.model_dump()),
            "error_json": dump(turn.error.model_dump() if turn.error else None),
            "created_at": turn.created_at,
            "tools_sha256": None if tools is None else self._tools_blob(tools),
        }
        self.conn.execute(
            f"INSERT INTO turns ({', '.join(row)}, response_body)"
            f" VALUES ({', '.join('?' for _ in row)}, ?)",
            (*row.values(), response_body),
        )
        self.audit("turn", row)

    def _tools_blob(self, tools: Sequence[ToolSpec]) -> str:
        """Store the declared tools once (content-addressed); the same list is hashed once."""
        cached = self._tools_cache
        if cached is not None and cached[0] is tools:
            digest = cached[1]
        else:
            body = canonical_text([t.model_dump() for t in tools])
            digest = sha256_hex(body.encode("utf-8"))
            self._tools_cache = (tools, digest)
        held = f"SELECT 1 FROM {self._blob_hashes} WHERE sha256 = ?"
        if self.conn.execute(held, (digest,)).fetchone() is None:
            body = canonical_text([t.model_dump() for t in tools])
            self.conn.execute("INSERT INTO blobs (sha256, body) VALUES (?, ?)", (digest, body))
        return digest

    def turns(self, operation_id: str) -> list[TurnRecord]:
        sql = f"SELECT {TURN_COLUMNS} FROM turns WHERE operation_id = ? ORDER BY idx"
        return [turn_from_row(r) for r in self._read("turns", sql, (operation_id,))]

    def response_bodies(self, operation_id: str) -> dict[int, bytes]:
        """The provider's answer bytes of each turn, as received (by turn index)."""
        sql = "SELECT idx, response_body FROM turns WHERE operation_id = ? ORDER BY idx"
        rows = self._read("turns", sql, (operation_id,))
        return {idx: response_body_from(operation_id, idx, body) for idx, body in rows}

    # -- calls ----------------------------------------------------------------------------------

    def insert_call(self, call: CallRecord) -> None:
        row = call_row(call)
        self._rows.insert_call(row)
        self.audit("call", dict(zip(CALL_NAMES, row, strict=True)))
        self._unless_held()

    def save_call(self, call: CallRecord, expected_state: CallState) -> None:
        """Write ``call`` if its stored state is still ``expected_state`` (checked when the
        held write reaches the table)."""
        row = call_row(call)
        base = self._audit.last_version("call", [call.operation_id, call.response_id, call.call_id])
        self._rows.save_call(row, expected_state.value, as_row(base, CALL_NAMES))
        self.audit("call", dict(zip(CALL_NAMES, row, strict=True)))
        self._unless_held()

    def calls(self, operation_id: str, turn_idx: int | None = None) -> list[CallRecord]:
        self._write_held(_CALLS)
        sql = f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ?"
        args: list[Any] = [operation_id]
        if turn_idx is not None:
            sql += " AND turn_idx = ?"
            args.append(turn_idx)
        sql += " ORDER BY turn_idx, seq"
        rows = self._read("calls", sql, args)
        for r in rows:
            self._audit.read("call", dict(zip(CALL_NAMES, r, strict=True)))
        return [call_from_row(r) for r in rows]

    def check_call_logged(self, call: CallRecord) -> None:
        """Refuse a call written around toolloop: ``call`` (as read from its table, or as
        this process wrote it) must be what the audit log last recorded (``logged.py``).
        Asked before a decision is applied to it and before a side effect's intent is
        committed, so a call set APPROVED by hand, or its key or arguments changed, runs
        nothing and is never written back as toolloop's own. The record in hand is compared,
        not read again: a step reads the calls table once."""
        key = [call.operation_id, call.response_id, call.call_id]
        named = dict(zip(CALL_NAMES, call_row(call), strict=True))
        self._check_logged(
            "call", key, named, f"call {call.call_id} of operation {call.operation_id}"
        )

    def turn_and_unsettled_calls(
        self, operation_id: str, turn_idx: int
    ) -> tuple[list[CallRecord], list[CallRecord]]:
        """The calls of one turn in order, and the operation's calls of other turns still in
        a state they may leave (in turn order): one statement, two index seeks, the second
        through the partial index ``calls_open``, whose condition it repeats word for word."""
        self._write_held(_CALLS)
        rows = self._read("calls", TURN_AND_UNSETTLED, (operation_id, turn_idx) * 2)
        for r in rows:
            self._audit.read("call", dict(zip(CALL_NAMES, r[1:], strict=True)))
        turn = [call_from_row(r[1:]) for r in rows if r[0] == 0]
        others = [call_from_row(r[1:]) for r in rows if r[0] == 1]
        return sorted(turn, key=lambda c: c.seq), sorted(others, key=lambda c: (c.turn_idx, c.seq))

    def get_call(self, operation_id: str, response_id: str, call_id: str) -> CallRecord | None:
        """The one call a (response id, call id) pair names: call ids are unique per response."""
        self._write_held(_CALLS)
        row = self._read_one(
            "calls",
            f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND response_id = ?"
            " AND call_id = ?",
            (operation_id, response_id, call_id),
        )
        return None if row is None else call_from_row(row)

    def calls_of_response(
        self, operation_id: str, response_id: str, call_ids: Sequence[str]
    ) -> list[CallRecord]:
        """The calls of one response with any of these call ids (one query, the unique key)."""
        self._write_held(_CALLS)
        if not call_ids:
            return []
        marks = ", ".join("?" for _ in call_ids)
        # sorted here: ordered in SQL, SQLite walked every call of the operation in order
        # (``calls_turn``) instead of seeking the key
        rows = self._read(
            "calls",
            f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND response_id = ?"
            f" AND call_id IN ({marks})",
            (operation_id, response_id, *call_ids),
        )
        return sorted((call_from_row(r) for r in rows), key=lambda c: (c.turn_idx, c.seq))

    def earlier_calls(
        self,
        operation_id: str,
        before_turn: int,
        intents: Sequence[tuple[str, str]],
        keys: Sequence[str] = (),
    ) -> list[CallRecord]:
        """Calls of earlier turns sharing an idempotency key or an intent (tool and argument
        digest) with a new turn's calls: what validation compares it with, in one statement
        (in one per ``LOOKUPS_PER_QUERY`` of them for an answer with very many calls).

        A ``UNION`` of one indexed seek per key and per intent (``calls_key``,
        ``calls_intent``), so the cost does not grow with the calls the operation has made.
        """
        if not intents and not keys:
            return []
        if self._rows.holds_calls_before(operation_id, before_turn):
            self._write_held(_CALLS)  # the new turn's own held calls cannot match: not yet
        lookups = [*((k, None) for k in keys), *intents]
        if len(lookups) <= LOOKUPS_PER_QUERY:
            sql, args = earlier_calls_query(operation_id, before_turn, intents, keys)
            return [call_from_row(r) for r in self._read("calls", sql, args)]
        # an answer with many calls: SQLite takes at most 500 terms in one compound SELECT
        found: dict[tuple[int, int], tuple[Any, ...]] = {}
        for start in range(0, len(lookups), LOOKUPS_PER_QUERY):
            chunk = lookups[start : start + LOOKUPS_PER_QUERY]
            sql, args = earlier_calls_query(
                operation_id,
                before_turn,
                [(name, digest) for name, digest in chunk if digest is not None],
                [name for name, digest in chunk if digest is None],
            )
            for row in self._read("calls", sql, args):
                found[(row[_TURN], row[_SEQ])] = row
        return [call_from_row(found[at]) for at in sorted(found)]

    # -- audit ------------------------------------------------------------------------------------

    def audited_binding(self, operation_id: str, response_id: str, call_id: str) -> str | None:
        """The ``call_binding_sha256`` the audit log last recorded for a call (or None)."""
        return self.audited_bindings(operation_id, [(response_id, call_id)]).get(
            (response_id, call_id)
        )

    def audited_bindings(
        self, operation_id: str, calls: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], str | None]:
        """The binding the audit log last recorded for each (response id, call id) given.

        The operation's records are read newest first, and only until every call is found:
        a turn's results were written in its last few transactions.
        """
        wanted = set(calls)
        found = self._audit.unsealed_bindings(operation_id, wanted)
        rest = wanted - set(found)
        if not rest:
            return found
        try:
            cur = self.conn.execute(
                "SELECT record FROM audit_log WHERE operation_id = ? ORDER BY seq DESC",
                (operation_id,),
            )
            return {**found, **bindings_in((text for (text,) in cur), rest)}
        except sqlite3.Error as exc:  # a record SQLite cannot decode: not one toolloop wrote
            raise unreadable("audit_log", self.location, exc) from exc


#: ``Store.turn_and_unsettled_calls``: rows tagged 0 (the turn's) and 1 (unsettled elsewhere)
TURN_AND_UNSETTLED = (
    f"SELECT 0, {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND turn_idx = ?"
    f" UNION ALL SELECT 1, {CALL_COLUMNS} FROM calls"
    f" WHERE operation_id = ? AND {OPEN_CALLS_WHERE} AND turn_idx <> ?"
)
#: keys and intents looked up by one statement (each is a term of its compound SELECT)
LOOKUPS_PER_QUERY = 200
_TURN, _SEQ = CALL_NAMES.index("turn_idx"), CALL_NAMES.index("seq")


def earlier_calls_query(
    operation_id: str,
    before_turn: int,
    intents: Sequence[tuple[str, str]],
    keys: Sequence[str],
) -> tuple[str, list[Any]]:
    """The statement ``Store.earlier_calls`` runs: one indexed seek per key and per intent."""
    parts: list[str] = []
    args: list[Any] = []
    head = f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND turn_idx < ?"
    for key in keys:  # one equality each: with ``IN (…)`` SQLite scanned every earlier call
        parts.append(f"{head} AND idempotency_key = ?")
        args += [operation_id, before_turn, key]
    for name, digest in intents:
        parts.append(f"{head} AND name = ? AND arguments_sha256 = ?")
        args += [operation_id, before_turn, name, digest]
    return " UNION ".join(parts) + " ORDER BY turn_idx, seq", args
