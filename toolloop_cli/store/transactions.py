"""The store's transactions: begin, hold, commit, roll back, barriers and fences.

Every state change is one transaction (``transaction()``); inside ``holding()`` the
transactions between two waits share one commit. A commit first writes the held rows
(``held.py``), then seals the transaction's audit batch (``audit_writer.py``); a barrier
commit is fsynced before anyone is told. The record reads and writes built on these live in
``repo.py`` and ``approvals.py``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolloop_cli.engine.types import JSONObject, ToolSpec
from toolloop_cli.errors import OperationBusy, StoreError

from .audit_writer import AuditWriter
from .connection import Connection
from .durability import Durability
from .held import ALL, HeldWrites
from .logged import refuse_unlogged
from .unreadable import unreadable


class TransactionalStore:
    """A store connection and its transactions (the base of ``Store``). Not thread-safe.

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
        self._audit = AuditWriter(
            self.conn, "audit_head" if self.postgres else "audit_log", packed=not self.postgres
        )
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
        something outside the store (a side effect's handler, a model request) follows, or
        the transaction is a barrier: then it commits now, with everything it joined.
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

    def _read(self, table: str, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Every row ``sql`` selects from ``table``. SQLite decodes text as rows are fetched,
        so a column holding bytes that are not UTF-8 fails the fetch: that, and any other
        failed read, is a ``StoreError`` (``store/unreadable.py``), never a raw ``sqlite3``
        one."""
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise unreadable(table, self.location, exc) from exc

    def _read_one(self, table: str, sql: str, args: Sequence[Any] = ()) -> Any:
        """The first row ``sql`` selects from ``table`` (None: none), read as ``_read`` does."""
        try:
            return self.conn.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise unreadable(table, self.location, exc) from exc

    def _check_logged(self, kind: str, key: list[Any], row: Mapping[str, Any], name: str) -> None:
        """Refuse a ``kind`` row (its columns by name; ``name`` says which) that is not what
        the audit log last recorded for it (``logged.py``): a ``TamperedStore``, nothing run.
        A row the open transaction wrote is what it logs: not compared."""
        if self.conn.in_transaction and self._audit.writes(kind, key):
            return
        refuse_unlogged(self.conn, self.location, kind, key, row, name)

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

    def _unless_held(self) -> None:
        """A write made outside a transaction (none of the engine's) is written at once."""
        if not self.conn.in_transaction:
            self._write_held()


_ADD_BLOB = "INSERT INTO blobs (sha256, body) VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING"
_ADD_BLOB_PG = (
    "INSERT INTO blobs (sha256, body) SELECT v.h, v.b"
    " FROM (VALUES (CAST(? AS TEXT), CAST(? AS TEXT))) AS v (h, b)"
    " WHERE NOT EXISTS (SELECT FROM blob_hashes x WHERE x.sha256 = v.h)"
)
