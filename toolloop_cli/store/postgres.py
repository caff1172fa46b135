"""The PostgreSQL backend's connection: psycopg 3, speaking the store's SQL.

The store's statements are written once, in the SQL both engines accept (``ON CONFLICT``,
``RETURNING``, ``?`` placeholders); ``PgConnection`` turns the placeholders into psycopg's,
runs them in autocommit mode as the SQLite connection does, and reports a database error as
the ``sqlite3`` exception of the same kind, so the store has one set of error paths.

Writers are serialised as SQLite serialises them: ``BEGIN IMMEDIATE`` becomes ``BEGIN`` plus
a transaction-scoped advisory lock. The audit chain is one sequence across the store, so its
head may only move under one writer at a time; the lock also makes every read-then-write of
a transaction see what the last writer committed. Model requests and handlers run outside
transactions, so workers still run their operations side by side.

psycopg is imported only when a PostgreSQL store is opened: SQLite users never pay for it.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from toolloop_cli.errors import StoreBusy, StoreError

if TYPE_CHECKING:
    import psycopg

#: the advisory lock every write transaction holds (any constant the store alone uses)
WRITE_LOCK_KEY = 0x746F6F6C6F6F70  # "toolloop"
#: the channel workers LISTEN on: an operation id, once it may be stepped again
RUNNABLE_CHANNEL = "toolloop_runnable"
_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: str) -> bool:
    """``--store`` names a PostgreSQL database (a libpq URL), not a file."""
    return location.startswith(_SCHEMES)


#: query parameters of a URL that hold a secret (libpq's ``?password=…`` and its TLS key's)
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


def redacted(url: str) -> str:
    """The URL as shown in messages: a password in it (``user:password@``, ``?password=``,
    ``?sslpassword=``) is replaced by ``***``; a URL that does not parse (a bracket left
    open, a port out of range) is not shown at all, since where its password is cannot be
    told."""
    try:
        parts = urlsplit(url)
        password, _ = parts.password, parts.port
    except ValueError:
        return "postgresql://(a URL that does not parse)"
    netloc = parts.netloc
    if password:
        user = parts.username or ""
        netloc = f"{user}:***@{netloc.rpartition('@')[2]}"
    query = _redacted_query(parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redacted_query(query: str) -> str:
    """``query`` with the value of each secret parameter replaced by ``***``."""
    pieces = []
    for piece in query.split("&"):
        key, equals, _ = piece.partition("=")
        if equals and unquote(key).strip().lower() in _SECRET_PARAMETERS:
            piece = f"{key}=***"
        pieces.append(piece)
    return "&".join(pieces)


class PgCursor:
    """A psycopg cursor seen through the DB-API subset ``store.connection.Cursor`` names."""

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    @property
    def description(self) -> list[tuple[str, None, None, None, None, None, None]]:
        return [(c.name, None, None, None, None, None, None) for c in self._cur.description or ()]

    def fetchone(self) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._cur.fetchone() if self._cur.description else None
        return row

    def fetchall(self) -> list[Any]:
        return list(self._cur.fetchall()) if self._cur.description else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConnection:
    """One psycopg connection in autocommit mode, as the store uses a connection."""

    def __init__(
        self, raw: psycopg.Connection[Any], *, owned: bool = True, location: str = "the store"
    ) -> None:
        raw.autocommit = True
        self.raw = raw
        self.owned = owned
        #: the store as messages name it (its URL, password redacted)
        self.location = location
        self._sql: dict[str, str] = {}
        #: the transaction this connection opened and has not ended: "write" (``BEGIN
        #: IMMEDIATE``, a lease's ``BEGIN``), "read" (a ``verify`` snapshot), or None
        self._open: str | None = None
        if owned:
            # a store dropped unclosed closes its connection, as a sqlite3 one does (psycopg
            # would warn instead); a transaction left open is rolled back by the server
            weakref.finalize(self, raw.close)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        # UNKNOWN: the connection is gone, and its transaction with it (the server rolled
        # it back); there is nothing left to roll back or commit
        status = self.raw.info.transaction_status
        return status not in (TransactionStatus.IDLE, TransactionStatus.UNKNOWN)

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        import psycopg

        try:
            if sql.startswith("BEGIN"):
                self._open = "read" if "READ" in sql.upper() else "write"
            if sql == "BEGIN IMMEDIATE":
                self.raw.execute("BEGIN")
                try:
                    return PgCursor(
                        self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                    )
                except psycopg.Error:
                    self._abandon()  # no transaction is left open without its lock
                    raise
            return PgCursor(self.raw.execute(self._translated(sql), tuple(parameters)))
        except psycopg.Error as exc:
            raise self._failure(exc, sql) from exc
        finally:
            if sql in ("COMMIT", "ROLLBACK"):
                self._open = None

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> PgCursor:
        """One statement for many rows; the cursor's ``rowcount`` is their sum."""
        import psycopg

        try:
            cur = self.raw.cursor()
            cur.executemany(self._translated(sql), [tuple(r) for r in rows])
        except psycopg.Error as exc:
            raise self._failure(exc, sql) from exc
        return PgCursor(cur)

    def _failure(self, exc: Exception, sql: str) -> Exception:
        """What a failed statement raises: a ``StoreError`` when the connection is lost
        (saying whether the change was stored), or when the statement waited for a lock
        longer than ``lock_timeout`` (the store is busy); else the ``sqlite3`` error."""
        from psycopg import errors

        if self.raw.broken or self.raw.closed:
            opened, self._open = self._open, None
            return StoreError(
                f"lost the connection to store {self.location} ({first_line(exc)}); "
                + _outcome(sql, opened)
            )
        if isinstance(exc, errors.LockNotAvailable):
            return StoreBusy(
                f"store is busy: another process holds a lock on {self.location} longer "
                "than lock_timeout allows; nothing was written by this change, try again"
            )
        return as_sqlite_error(exc)

    def _abandon(self) -> None:
        """Roll back the open transaction, if the connection can still say so."""
        import psycopg

        self._open = None
        if self.in_transaction:
            try:
                self.raw.execute("ROLLBACK")
            except psycopg.Error:
                pass

    def close(self) -> None:
        """Close the connection; a pooled one (not ``owned``) goes back to its pool instead."""
        if self.owned:
            self.raw.close()

    def _translated(self, sql: str) -> str:
        """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled), cached."""
        done = self._sql.get(sql)
        if done is None:
            done = sql.replace("%", "%%").replace("?", "%s")
            self._sql[sql] = done
        return done


def _outcome(sql: str, opened: str | None) -> str:
    """What a statement cut off by a lost connection did to the store, as far as is known:
    a write transaction the server rolled back stored nothing, a read changed nothing, but a
    ``COMMIT`` or a write outside a transaction may have been applied before the loss."""
    if sql == "COMMIT":
        return "whether the change it was committing was stored is unknown: look with toolloop show"
    if opened == "write":
        return "the change in progress was not stored (the server rolled it back)"
    if opened == "read" or sql.lstrip()[:6].upper() == "SELECT":
        return "it was reading, and nothing was written"
    return "whether the write it was making was stored is unknown: look with toolloop show"


def first_line(exc: Exception) -> str:
    """The first line of PostgreSQL's (or libpq's) message, else the error's type."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def as_sqlite_error(exc: Exception) -> sqlite3.Error:
    """The ``sqlite3`` exception of the same kind, with PostgreSQL's first message line."""
    import psycopg

    message = first_line(exc)
    if isinstance(exc, psycopg.IntegrityError):
        return sqlite3.IntegrityError(message)
    if isinstance(exc, psycopg.DataError):
        return sqlite3.DataError(message)
    if isinstance(exc, psycopg.OperationalError):
        return sqlite3.OperationalError(message)
    return sqlite3.DatabaseError(message)


def connect_postgres(
    url: str, *, synchronous_commit: bool = True, read_only: bool = False
) -> PgConnection:
    """A connection to the database ``url`` names (psycopg's connection string rules), with
    the session settings of ``pg_settings`` (``synchronous_commit`` off when False,
    read-only transactions when ``read_only``)."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            f"store {redacted(url)} is a PostgreSQL database, and the PostgreSQL backend needs "
            "psycopg: pip install 'toolloop[postgresql]'"
        ) from None

    from .pg_settings import check_encoding, connect_kwargs

    settings = connect_kwargs(url, synchronous_commit=synchronous_commit, read_only=read_only)
    try:
        raw = psycopg.connect(url, autocommit=True, **settings)
    except psycopg.Error as exc:
        raise as_sqlite_error(exc) from exc
    check_encoding(raw, redacted(url))
    return PgConnection(raw, location=redacted(url))
