"""Opening a store: the file, its PRAGMAs and its schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlite_utils import Database

from toolloop_cli.errors import StoreError

from . import migrations
from .repo import Store

#: How long a writer waits for another writer's lock before giving up (ms).
BUSY_TIMEOUT_MS = 5000


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN IMMEDIATE ourselves), WAL, FULL sync."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    return conn


def open_store(path: str | Path) -> Store:
    """Open (creating and migrating if needed) the store at ``path``."""
    store_path = Path(path)
    conn = connect(store_path)
    db = Database(conn)
    try:
        if migrations.migrations.pending(db):
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
    return Store(db, store_path)
