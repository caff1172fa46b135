"""Reads and writes of the store. Writes happen inside ``Store.transaction()``.

One transaction per state change: the engine opens it, makes every write of that change
(the turn, its calls, the operation's new state and the transition log) and commits before
its next side effect. Conversation items are stored once, content-addressed, and each
operation keeps an append-only list of item hashes, so no turn copies the history.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolloop_cli.audit.canonical import canonical_text, sha256_hex
from toolloop_cli.engine.records import (
    ApprovalRecord,
    CallRecord,
    OperationRecord,
    TurnRecord,
)
from toolloop_cli.engine.states import ApprovalStatus, CallState, OpState
from toolloop_cli.engine.types import (
    MAX_BODY_BYTES,
    ApiError,
    JSONObject,
    ToolSpec,
    TurnOutcome,
    Usage,
)
from toolloop_cli.errors import (
    AlreadyDecided,
    OperationBusy,
    OperationNotFound,
    StoreError,
    TamperedStore,
)

from .audit_writer import AuditWriter, bindings_in
from .connection import Connection
from .durability import Durability
from .held import ALL, CALLS, OPERATIONS, TRANSITIONS, HeldWrites
from .rows import (
    APR_COLUMNS,
    CALL_COLUMNS,
    CALL_NAMES,
    OP_COLUMNS,
    OP_NAMES,
    apr_from_row,
    call_from_row,
    call_row,
    dump,
    op_from_row,
    op_row,
)

#: what a read of one table writes first of the open transaction's held rows
_CALLS, _OPS, _TRANSITIONS = (frozenset((t,)) for t in (CALLS, OPERATIONS, TRANSITIONS))


class Store:
    """The operations store. Not thread-safe: one Store per thread or process.

    The same class runs on both backends (``store.db.open_store`` picks one): a SQLite file
    (``path`` set) or a PostgreSQL database (``postgres``); ``location`` names it in messages.
    """

    def __init__(
        self,
        conn: Connection,
        location: str,
        durability: Durability = Durability.BARRIERS,
        *,
        path: Path | None = None,
        data_dir: Path | None = None,
        reconnect: Callable[[], Connection] | None = None,
    ) -> None:
        self.conn = conn
        #: opens another connection to the same database (a lease's keeper renews over it)
        self.reconnect = reconnect
        #: (operation id, lease token): commit nothing unless that lease is still held
        self._fence: tuple[str, str] | None = None
        self.location = location
        #: the SQLite file; None for a PostgreSQL store
        self.path = path
        self.postgres = path is None
        self._data_dir = data_dir
        self.durability = durability
        #: called after each barrier commit is on disk (a power-loss test snapshots the files)
        self.on_barrier: Callable[[], None] | None = None
        self._barrier = False  # the open transaction is a barrier
        self._hold = False  # inside holding(): commits wait for the next wait or barrier
        self._held = False  # a transaction's commit is held open, to be joined
        #: conversation lengths when the open transaction began (restored on a rollback)
        self._cached: dict[str, int] = {}
        self._after_commit: list[Callable[[], None]] = []
        self._conversations: dict[str, list[JSONObject]] = {}
        self._audit = AuditWriter(self.conn, "audit_head" if self.postgres else "audit_log")
        #: calls, operations and transitions written in the open transaction, not yet put in
        #: their tables (``held.py``): written at the commit, or before a read of them
        self._rows = HeldWrites(self.conn, self.postgres)
        #: where a body's hash is looked up, and how a body is added once: on PostgreSQL
        #: through the ``blob_hashes`` view, so that under row-level security a tenant's
        #: item that another tenant stored first is found, not written again
        self._blob_hashes = "blob_hashes" if self.postgres else "blobs"
        self._add_blob = _ADD_BLOB_PG if self.postgres else _ADD_BLOB
        self._tools_cache: tuple[Sequence[ToolSpec], str] | None = None

    @property
    def data_dir(self) -> Path:
        """Where handlers keep their own files: the store's folder (a PostgreSQL store's
        ``TOOLLOOP_DATA_DIR``, else ``.toolloop``)."""
        if self._data_dir is not None:
            return self._data_dir
        return self.path.parent if self.path is not None else Path(".toolloop")

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self, *, before_wait: bool = False) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``: all of a state change, or none of it.

        Inside ``holding()`` the commit is held open and the next transaction joins it (one
        commit for the state changes between two waits), unless ``before_wait`` says that
        something outside the store (a handler, a model request) follows, or the
        transaction is a barrier: then it commits now, with everything it joined.
        """
        if not self._held:
            if self.conn.in_transaction:
                raise StoreError("nested store transaction")
            self._begin_immediate()
            self._barrier = False
            self._cached = {k: len(v) for k, v in self._conversations.items()}
        self._held = False
        try:
            yield
        except BaseException as exc:
            self._roll_back(exc)
            raise
        if self._hold and not before_wait and not self._barrier:
            self._held = True
            return
        self._commit()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold commits open across transactions until a wait, a barrier or the end.

        Only under barriers durability (``full`` commits every transaction on its own, as
        asked). A crash loses at most the held state changes: none of them had an effect
        outside the store, so they are made again from the last commit.
        """
        if self.durability is Durability.FULL or self._hold:
            yield
            return
        self._hold = True
        try:
            yield
        finally:
            self._hold = False
            self.release()

    def release(self) -> None:
        """Commit the held state changes now (nothing when none are held)."""
        if self._held:
            self._held = False
            self._commit()

    def _commit(self) -> None:
        """Seal the audit batch and commit the open transaction; then fsync a barrier and
        tell what was stored."""
        self._write_held()
        try:
            if self._fence is not None:
                self._check_fence(*self._fence)
            self._audit.seal(None)
            if self._barrier and self.postgres and self.durability is not Durability.FULL:
                # this one commit waits for its WAL flush (the session's others do not)
                self.conn.execute("SET LOCAL synchronous_commit TO on")
            self.conn.execute("COMMIT")
        except BaseException as exc:
            self._roll_back(exc)
            raise
        self._rows.clear()
        self._audit.committed()
        if self._barrier:
            self._barrier = False
            self._sync()
        pending, self._after_commit = self._after_commit, []
        for announce in pending:
            announce()

    def _write_held(self, tables: frozenset[str] = ALL) -> None:
        """Put the held row writes of ``tables`` in them (all before a commit, the one a read
        reads before it). A failure rolls the whole transaction back: none of its state
        changes happened."""
        if self._rows.holds(tables):
            try:
                self._rows.flush(self.audit, tables)
            except BaseException as exc:
                self._roll_back(exc)
                raise

    def fence(self, operation_id: str, token: str | None) -> None:
        """Commit nothing from now on unless the lease ``token`` still holds the operation
        (None: lift the fence). A runner whose lease was taken over makes no state change,
        so it starts no side effect after its takeover: the intent is one of the state
        changes."""
        self._fence = None if token is None else (operation_id, token)

    def _check_fence(self, operation_id: str, token: str) -> None:
        """Inside the transaction, just before its commit. On PostgreSQL the lease row is
        read ``FOR SHARE``: a takeover waits for this commit, and so finds what it wrote."""
        lock = " FOR SHARE" if self.postgres else ""
        held = self.conn.execute(
            f"SELECT 1 FROM leases WHERE operation_id = ? AND token = ?{lock}",
            (operation_id, token),
        ).fetchone()
        if held is None:
            raise OperationBusy(
                f"operation {operation_id}: this process lost its lease to another process "
                "(it ran past the lease's expiry); nothing more was stored or run here"
            )

    def _roll_back(self, exc: BaseException) -> None:
        """Undo the open transaction (and everything it joined); a database error becomes a
        ``StoreError`` raised from ``exc``."""
        self._held = False
        self._rows.clear()
        self._audit.rolled_back()
        self._barrier = False
        self._after_commit.clear()
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        for op_id, length in self._cached.items():
            del self._conversations[op_id][length:]
        self._cached = {}
        if isinstance(exc, sqlite3.Error | OverflowError):  # OverflowError: a value too big
            raise StoreError(f"store write failed ({self.location}): {exc}") from exc

    @contextmanager
    def lease_transaction(self) -> Iterator[None]:
        """A transaction that writes leases only (never audited): on PostgreSQL a plain
        ``BEGIN``, ordered by row locks instead of the store's write lock, so taking a lease
        never waits for another operation's step; on SQLite a write like any other.
        Held state changes are committed first."""
        self.release()
        if self.conn.in_transaction:
            raise StoreError("nested store transaction")
        try:
            if self.postgres:
                self.conn.execute("BEGIN")
            else:
                self._begin_immediate()
            yield
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"store write failed ({self.location}): {exc}") from exc
            raise

    def after_commit(self, announce: Callable[[], None]) -> None:
        """Call ``announce`` once the open transaction has committed (never if it rolls back);
        at once outside a transaction. Progress reports say what is stored, nothing else."""
        if self.conn.in_transaction:
            self._after_commit.append(announce)
        else:
            announce()

    def announce_runnable(self, operation_id: str) -> None:
        """Tell waiting workers (PostgreSQL ``NOTIFY``, delivered at commit) that the operation
        may be stepped again: submitted, or an approval of it decided. Nothing on SQLite,
        whose workers look again on a timer."""
        if self.postgres:
            from .postgres import RUNNABLE_CHANNEL

            self.conn.execute("SELECT pg_notify(?, ?)", (RUNNABLE_CHANNEL, operation_id))

    def barrier(self) -> None:
        """Make the open transaction a barrier: on disk (fsynced) once it has committed.

        Under ``Durability.FULL`` every commit already is; under barriers the WAL is fsynced
        right after this transaction's commit, which also makes every earlier commit durable.
        """
        if not self.conn.in_transaction:
            raise StoreError("a barrier is a property of a transaction: none is open")
        self._barrier = True

    def _sync(self) -> None:
        """fsync the WAL (and so every commit in it) after a barrier transaction committed.

        PostgreSQL flushed its WAL in the commit itself (``synchronous_commit`` on for it).
        """
        if self.path is not None and self.durability is not Durability.FULL:
            wal = self.path.with_name(self.path.name + "-wal")
            target = wal if wal.exists() else self.path  # no WAL left: checkpointed into the db
            try:
                fd = os.open(target, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StoreError(f"cannot sync store {self.location}: {exc}") from exc
        if self.on_barrier is not None:
            self.on_barrier()

    #: how long a writer keeps asking for the write lock before giving up (seconds)
    LOCK_WAIT_S = 60.0

    def _begin_immediate(self) -> None:
        """``BEGIN IMMEDIATE``, asked again while another writer holds the lock.

        SQLite's busy handler polls ever more slowly (up to every 100 ms), so among many
        writers one can lose every race for longer than ``busy_timeout``; one such wait is
        not a failure, so the request is repeated until ``LOCK_WAIT_S`` have passed.
        """
        deadline = time.monotonic() + self.LOCK_WAIT_S
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise StoreError(f"cannot write to store {self.location}: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write to store {self.location}: {exc}") from exc

    # -- operations -------------------------------------------------------------------------

    def insert_operation(self, op: OperationRecord) -> None:
        row = op_row(op)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT INTO operations ({OP_COLUMNS}) VALUES ({marks})", row)
        self.audit("operation", dict(zip(OP_NAMES, row, strict=True)))

    def get_operation(self, operation_id: str, tenant: str | None = None) -> OperationRecord:
        self._write_held(_OPS)
        cur = self.conn.execute(
            f"SELECT {OP_COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)
        )
        row = cur.fetchone()
        if row is None or (tenant is not None and row[8] != tenant):
            raise OperationNotFound(f"no operation {operation_id} in store {self.location}")
        self._audit.read("operation", dict(zip(OP_NAMES, row, strict=True)))
        return op_from_row(row)

    def list_operations(self, tenant: str | None = None, limit: int = 50) -> list[OperationRecord]:
        self._write_held(_OPS)
        sql = f"SELECT {OP_COLUMNS} FROM operations"
        args: list[Any] = []
        if tenant is not None:
            sql += " WHERE tenant = ?"
            args.append(tenant)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        args.append(limit)
        return [op_from_row(r) for r in self.conn.execute(sql, args)]

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
        return [op_from_row(r) for r in self.conn.execute(sql, args)]

    def save_operation(self, op: OperationRecord, expected_state: OpState) -> None:
        """Write ``op`` if the stored state is still ``expected_state`` (compare-and-set,
        checked when the held write reaches the table)."""
        row = op_row(op)
        known = self._audit.expected_updated_at(op.operation_id)
        # the version the audit record's changes are taken from must be the table's
        updated_at = known if isinstance(known, str) else None
        self._rows.save_operation(op.operation_id, row, expected_state.value, updated_at)
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

    def _unless_held(self) -> None:
        """A write made outside a transaction (none of the engine's) is written at once."""
        if not self.conn.in_transaction:
            self._write_held()

    def transitions(self, operation_id: str) -> list[dict[str, Any]]:
        """The state log in order; ``response_id`` is None in rows from before it was kept."""
        self._write_held(_TRANSITIONS)
        cur = self.conn.execute(
            "SELECT kind, call_id, source, target, reason, at, response_id FROM transitions"
            " WHERE operation_id = ? ORDER BY id",
            (operation_id,),
        )
        keys = ("kind", "call_id", "source", "target", "reason", "at", "response_id")
        return [dict(zip(keys, r, strict=True)) for r in cur]

    # -- conversation ------------------------------------------------------------------------

    def conversation(self, operation_id: str) -> list[JSONObject]:
        """The operation's conversation items, in order (cached after the first read)."""
        cached = self._conversations.get(operation_id)
        if cached is None:
            cur = self.conn.execute(
                "SELECT b.body FROM conversation c JOIN blobs b ON b.sha256 = c.item_sha256"
                " WHERE c.operation_id = ? ORDER BY c.seq",
                (operation_id,),
            )
            cached = [json.loads(r[0]) for r in cur]
            self._conversations[operation_id] = cached
        return cached

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
        cur = self.conn.execute(
            "SELECT operation_id, idx, response_id, outcome, finish_reason, text, detail,"
            " request_sha256, response_sha256, usage_json, error_json, created_at"
            " FROM turns WHERE operation_id = ? ORDER BY idx",
            (operation_id,),
        )
        return [
            TurnRecord(
                operation_id=r[0],
                idx=r[1],
                response_id=r[2],
                outcome=TurnOutcome(r[3]),
                finish_reason=r[4],
                text=r[5],
                detail=r[6],
                request_sha256=r[7],
                response_sha256=r[8],
                usage=Usage(**json.loads(r[9])),
                error=ApiError(**json.loads(r[10])) if r[10] else None,
                created_at=r[11],
            )
            for r in cur
        ]

    def response_bodies(self, operation_id: str) -> dict[int, bytes]:
        """The provider's answer bytes of each turn, as received (by turn index)."""
        cur = self.conn.execute(
            "SELECT idx, response_body FROM turns WHERE operation_id = ? ORDER BY idx",
            (operation_id,),
        )
        return {r[0]: bytes(r[1]) for r in cur}

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
        self._rows.save_call(row, expected_state.value)
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
        rows = self.conn.execute(sql, args).fetchall()
        for r in rows:
            self._audit.read("call", dict(zip(CALL_NAMES, r, strict=True)))
        return [call_from_row(r) for r in rows]

    def get_call(self, operation_id: str, response_id: str, call_id: str) -> CallRecord | None:
        """The one call a (response id, call id) pair names: call ids are unique per response."""
        self._write_held(_CALLS)
        row = self.conn.execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND response_id = ?"
            " AND call_id = ?",
            (operation_id, response_id, call_id),
        ).fetchone()
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
        cur = self.conn.execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE operation_id = ? AND response_id = ?"
            f" AND call_id IN ({marks})",
            (operation_id, response_id, *call_ids),
        )
        return sorted((call_from_row(r) for r in cur), key=lambda c: (c.turn_idx, c.seq))

    def earlier_calls(
        self,
        operation_id: str,
        before_turn: int,
        intents: Sequence[tuple[str, str]],
        keys: Sequence[str] = (),
    ) -> list[CallRecord]:
        """Calls of earlier turns sharing an idempotency key or an intent (tool and argument
        digest) with a new turn's calls: what validation compares it with, in one statement.

        A ``UNION`` of one indexed seek per key and per intent (``calls_key``,
        ``calls_intent``), so the cost does not grow with the calls the operation has made.
        """
        if not intents and not keys:
            return []
        if self._rows.holds_calls_before(operation_id, before_turn):
            self._write_held(_CALLS)  # the new turn's own held calls cannot match: not yet
        sql, args = earlier_calls_query(operation_id, before_turn, intents, keys)
        return [call_from_row(r) for r in self.conn.execute(sql, args)]

    def insert_approval(self, apr: ApprovalRecord, policy: JSONObject | None = None) -> None:
        """Record an approval request; ``policy`` is the block its ``policy_sha256`` pins."""
        if apr.policy_sha256 is not None:
            self._pin_policy(apr.policy_sha256, policy)
        values = [getattr(apr, c.strip()) for c in APR_COLUMNS.split(",")]
        marks = ", ".join("?" for _ in values)
        self.conn.execute(f"INSERT INTO approvals ({APR_COLUMNS}) VALUES ({marks})", values)
        self.audit("approval", apr.model_dump())

    def _pin_policy(self, digest: str, policy: JSONObject | None) -> None:
        body = None if policy is None else canonical_text(policy)
        if body is None or sha256_hex(body.encode("utf-8")) != digest:
            raise StoreError(f"the policy given for pin {digest} does not hash to it")
        self.conn.execute(self._add_blob, (digest, body))

    def pinned_policy(self, digest: str) -> JSONObject:
        """The policy block an approval pinned, checked against its hash."""
        row = self.conn.execute("SELECT body FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
        body = None if row is None else row[0]
        data = body.encode("utf-8") if isinstance(body, str) else None
        if data is None or sha256_hex(data) != digest:
            raise TamperedStore(f"the policy pinned as {digest} is missing or altered in the store")
        document: JSONObject = json.loads(data)
        return document

    def get_approval(self, approval_id: str, tenant: str | None = None) -> ApprovalRecord:
        row = self._approval_row(approval_id)
        if row is None or (tenant is not None and row[5] != tenant):
            raise OperationNotFound(f"no approval {approval_id} in store {self.location}")
        apr = apr_from_row(row)
        self._audit.read("approval", apr.model_dump())
        return apr

    def _approval_row(self, approval_id: str) -> tuple[Any, ...] | None:
        cur = self.conn.execute(
            f"SELECT {APR_COLUMNS} FROM approvals WHERE approval_id = ?", (approval_id,)
        )
        row: tuple[Any, ...] | None = cur.fetchone()
        return row

    def approvals(self, operation_id: str) -> list[ApprovalRecord]:
        cur = self.conn.execute(
            f"SELECT {APR_COLUMNS} FROM approvals WHERE operation_id = ?"
            " ORDER BY requested_at, rowid",
            (operation_id,),
        )
        return [apr_from_row(r) for r in cur]

    def pending_approvals(self, tenant: str | None = None) -> list[ApprovalRecord]:
        sql = f"SELECT {APR_COLUMNS} FROM approvals WHERE status = 'PENDING'"
        args: list[Any] = []
        if tenant is not None:
            sql += " AND tenant = ?"
            args.append(tenant)
        sql += " ORDER BY requested_at, rowid"
        return [apr_from_row(r) for r in self.conn.execute(sql, args)]

    def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        by: str | None,
        at: str,
        reason: str | None,
    ) -> None:
        """Record a decision (a barrier); only the first decision on a PENDING one is written."""
        self.barrier()
        cur = self.conn.execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, reason = ?"
            " WHERE approval_id = ? AND status = 'PENDING'",
            (status.value, by, at, reason, approval_id),
        )
        if cur.rowcount != 1:
            current = self.get_approval(approval_id)
            raise AlreadyDecided(
                f"approval {approval_id} is already {current.status}"
                + (f" by {current.decided_by}" if current.decided_by else "")
            )
        decided = self._approval_row(approval_id)
        assert decided is not None  # updated just now, in this transaction
        record = apr_from_row(decided)
        self.audit("approval", record.model_dump())
        self.announce_runnable(record.operation_id)  # a worker may go on with it

    # -- audit ------------------------------------------------------------------------------------

    def audit(self, kind: str, row: dict[str, Any]) -> None:
        """Record one row write for the audit log (sealed with its transaction's batch).

        A write outside a transaction (none of the engine's) is sealed at once.
        """
        self._audit.write(kind, row)
        if not self.conn.in_transaction:
            self._audit.seal(None)
            self._audit.committed()

    def audit_head(self) -> tuple[int, str]:
        """``(seq, chain_sha256)`` of the last audit record; ``(0, GENESIS)`` when empty."""
        return self._audit.head()

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
        cur = self.conn.execute(
            "SELECT record FROM audit_log WHERE operation_id = ? ORDER BY seq DESC",
            (operation_id,),
        )
        return {**found, **bindings_in((text for (text,) in cur), rest)}


_ADD_BLOB = "INSERT INTO blobs (sha256, body) VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING"
_ADD_BLOB_PG = (
    "INSERT INTO blobs (sha256, body) SELECT v.h, v.b"
    " FROM (VALUES (CAST(? AS TEXT), CAST(? AS TEXT))) AS v (h, b)"
    " WHERE NOT EXISTS (SELECT FROM blob_hashes x WHERE x.sha256 = v.h)"
)


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
