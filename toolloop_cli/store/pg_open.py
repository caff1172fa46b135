"""Opening a PostgreSQL store: what a database must be before toolloop reads or writes it.

A database is a toolloop store once it has toolloop's migration log. One without it is:
- *foreign* when the schemas on its ``search_path`` hold tables or views (not an
  extension's): every command refuses it, and nothing is written to it;
- *empty* otherwise: the commands that create a store (``run``, ``replay``, ``store copy``
  into it, a worker's pool) migrate it; those that read or act on what a store holds
  (``show``, ``runs``, ``resume``, ``approve``, ``verify`` …) say there is no store there.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from toolloop_cli.errors import StoreError, UsageError

from . import pg_migrations
from .connection import Connection
from .durability import Durability
from .postgres import connect_postgres, redacted
from .repo import Store

#: where a PostgreSQL store's handlers keep their files (a SQLite store: beside the file)
DATA_DIR_ENV = "TOOLLOOP_DATA_DIR"

#: whether the migration log is there, and the tables and views where unqualified names
#: resolve (where toolloop's would be created), an extension's own left out: one statement,
#: so both are seen as of one moment (a store being made elsewhere is seen whole, or not)
_LOOK = """
SELECT to_regclass('toolloop_migrations') IS NOT NULL, ARRAY(
  SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = ANY (current_schemas(false)) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
     AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                        AND d.objid = c.oid AND d.deptype = 'e')
   ORDER BY c.relname LIMIT 6)"""


def open_postgres(url: str, *, read_only: bool, must_exist: bool, durability: Durability) -> Store:
    """A PostgreSQL store: migrated under the write lock, or checked current when read-only
    or when it must exist already (see the module's text for a database that is no store).

    Under barriers the session commits without waiting for the WAL flush
    (``synchronous_commit=off``, set at connect: a crash of this process loses nothing, the
    server keeps every commit); a barrier transaction turns it on for its own commit.
    """
    shown = redacted(url)
    full = durability is Durability.FULL
    try:
        conn = connect_postgres(url, synchronous_commit=full, read_only=read_only)
    except sqlite3.Error as exc:  # libpq may quote the URL it could not parse, password and all
        raise StoreError(f"cannot open store {shown}: {str(exc).replace(url, shown)}") from exc
    try:
        _refuse_non_store(conn, shown, creating=not (read_only or must_exist))
        names = [m.name for m in pg_migrations.pending(conn)]
        if names and read_only:
            raise not_current(shown, names)
        if names:
            _migrate(conn, shown)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot open store {shown}: {exc}") from exc
    except (StoreError, UsageError):
        conn.close()
        raise
    data_dir = os.environ.get(DATA_DIR_ENV)
    return Store(
        conn,
        shown,
        durability,
        data_dir=Path(data_dir) if data_dir else None,
        reconnect=lambda: connect_postgres(url),
    )


def _migrate(conn: Connection, shown: str) -> None:
    """Apply the pending migrations under the write lock (a concurrent opener waits, then
    finds nothing left to do), after looking again, under the lock, that the database is
    still a store or empty."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        _refuse_non_store(conn, shown, creating=True)
        conn.execute("SET LOCAL synchronous_commit TO on")  # the schema: flushed
        pg_migrations.apply(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _refuse_non_store(conn: Connection, shown: str, *, creating: bool) -> None:
    """Nothing when the database holds a toolloop store (or is empty, and ``creating``);
    else a ``StoreError`` for a foreign database, a ``UsageError`` (no store) for an empty
    one."""
    row = conn.execute(_LOOK).fetchone()
    has_log, held = (bool(row[0]), list(row[1])) if row is not None else (False, [])
    if has_log:
        return
    if held:
        listed = ", ".join(held[:5]) + (", …" if len(held) > 5 else "")
        raise StoreError(
            f"{shown} is a PostgreSQL database but not a toolloop store (it holds {listed}); "
            "refusing to read it or add toolloop's tables to it: pass another --store"
        )
    if not creating:
        raise UsageError(
            f"no store at {shown}: the database is empty (toolloop run creates a store there, "
            "as does toolloop store copy into it)"
        )


def not_current(shown: str, names: list[str]) -> StoreError:
    return StoreError(
        f"store {shown} is not at the current schema ({len(names)} migration(s) "
        f"pending: {', '.join(names)}); it is opened read-only here, so nothing is migrated"
    )
