"""Opening a store: the file, its PRAGMAs and its schema."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlite_utils import Database

from toolloop_cli.errors import StoreError

from . import migrations
from .durability import Durability, durability_from
from .repo import Store

#: How long a writer waits for another writer's lock before giving up (ms).
BUSY_TIMEOUT_MS = 5000
#: A new store holds tasks, tool results and model text: readable by its owner only.
STORE_MODE = 0o600


def connect(path: Path, durability: Durability = Durability.BARRIERS) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN IMMEDIATE ourselves), WAL.

    ``synchronous=NORMAL`` under barriers (the store fsyncs the WAL itself at each barrier),
    ``FULL`` under full durability.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(path)
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")
        sync = "FULL" if durability is Durability.FULL else "NORMAL"
        conn.execute(f"PRAGMA synchronous={sync}")
        conn.execute("PRAGMA foreign_keys=ON")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    return conn


def _create_private(path: Path) -> None:
    """Create a missing store file as 0600 whatever the umask; an existing one is left alone.

    SQLite gives the ``-wal`` and ``-shm`` files it creates the database file's mode.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, STORE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, STORE_MODE)
    finally:
        os.close(fd)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write (``mode=ro``): no file created, no journal mode set."""
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise StoreError(f"cannot open store {path} read-only: {exc}") from exc
    return conn


def open_store(
    path: str | Path, *, read_only: bool = False, durability: str | None = None
) -> Store:
    """Open (creating and migrating if needed) the store at ``path``.

    ``read_only`` (for ``verify``) changes nothing: a missing file, or one whose schema needs
    migrations, is a ``StoreError`` instead. ``durability``: see ``Durability`` (None: the
    ``TOOLLOOP_DURABILITY`` variable, else barriers).
    """
    store_path = Path(path)
    chosen = durability_from(durability)
    conn = connect_read_only(store_path) if read_only else connect(store_path, chosen)
    db = Database(conn)
    try:
        pending = migrations.migrations.pending(db)
        if pending and read_only:
            names = ", ".join(m.name for m in pending)
            raise StoreError(
                f"store {store_path} is not at the current schema ({len(pending)} migration(s) "
                f"pending: {names}); it is opened read-only here, so nothing is migrated"
            )
        if pending:
            # one writer migrates; a concurrent opener waits, then finds nothing pending
            conn.execute("BEGIN IMMEDIATE")
            try:
                migrations.apply(db)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot open store {store_path}: {exc}") from exc
    except StoreError:
        conn.close()
        raise
    return Store(db, store_path, chosen)
