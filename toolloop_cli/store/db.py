"""Opening a store: a SQLite file (its PRAGMAs and schema) or a PostgreSQL database."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from sqlite_utils import Database

from toolloop_cli.errors import StoreError, UsageError

from . import migrations
from .durability import Durability, durability_from
from .pg_open import (
    DATA_DIR_ENV as DATA_DIR_ENV,  # where it was always imported from
    not_current,
    open_postgres,
)
from .postgres import is_postgres_url
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

    SQLite gives the ``-wal`` and ``-shm`` files it creates the database file's mode. A
    symbolic link to a file not there yet is followed: ``O_EXCL`` refuses any link, so the
    file SQLite then made through it had the umask's mode (0644), readable by everyone.
    """
    if path.is_symlink() and not path.exists():
        path = Path(os.path.realpath(path))
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


def store_exists(location: str | Path) -> bool:
    """A SQLite file that is there, or any PostgreSQL URL (opening it says if it is not).

    An empty file (as ``touch`` leaves it, with no write-ahead log beside it) holds no store:
    reading it as one would write a schema into it.
    """
    if is_postgres_url(str(location)):
        return True
    path = Path(location)
    return path.exists() and not _empty_file(path)


def _empty_file(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size != 0:
            return False  # a folder ("/" has no name to put "-wal" after) is never one
        wal = path.with_name(path.name + "-wal")
        return not wal.exists() or wal.stat().st_size == 0
    except OSError:  # unreadable: opening it says why
        return False


def store_file(location: str | Path) -> Path | None:
    """The file a store location names (None: a PostgreSQL URL, which has none)."""
    return None if is_postgres_url(str(location)) else Path(location)


def open_store(
    path: str | Path,
    *,
    read_only: bool = False,
    must_exist: bool = False,
    durability: str | None = None,
) -> Store:
    """Open (creating and migrating if needed) the store at ``path``: a file, or a
    ``postgresql://`` URL (psycopg's connection string).

    ``read_only`` (for ``verify``) changes nothing: a missing file, or one whose schema needs
    migrations, is a ``StoreError`` instead. ``must_exist`` (commands that read or act on
    what a store holds): a missing file, or an empty PostgreSQL database, is a ``UsageError``
    and nothing is created. An existing SQLite file or PostgreSQL database that holds tables
    but is not a toolloop store is refused either way, before anything is written to it
    (``pg_open.py``). ``durability``: see ``Durability`` (None: the ``TOOLLOOP_DURABILITY``
    variable, else barriers).
    """
    if not str(path).strip():  # Path("") is the working folder, never a store
        raise UsageError("the store location is empty: name a SQLite file or a postgresql:// URL")
    chosen = durability_from(durability)
    if must_exist and not store_exists(path):
        raise UsageError(
            f"no store at {path}" + (" (an empty file)" if Path(path).exists() else "")
        )
    if is_postgres_url(str(path)):
        return open_postgres(
            str(path), read_only=read_only, must_exist=must_exist, durability=chosen
        )
    store_path = Path(path)
    _refuse_special_file(store_path)
    if not read_only:
        _refuse_foreign_file(store_path)
    conn = connect_read_only(store_path) if read_only else connect(store_path, chosen)
    db = Database(conn)
    try:
        if read_only:
            _refuse_foreign(conn, store_path)
        pending = migrations.migrations.pending(db)
        if pending and read_only:
            raise not_current(str(store_path), [m.name for m in pending])
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
    return Store(
        conn,
        str(store_path),
        chosen,
        path=store_path,
        reconnect=lambda: connect(store_path, chosen),
    )


def _refuse_special_file(path: Path) -> None:
    """A path that names something other than a file (a FIFO, a device, a socket, a
    directory) is refused before SQLite opens it: opening a FIFO waits for a writer for ever."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # not there (a new store), or a path connect() reports on
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise StoreError(f"cannot open store {path}: it is {what}")


def _refuse_foreign_file(path: Path) -> None:
    """Look at an existing, non-empty file read-only before opening it for writing: a
    read-write open already sets WAL mode and adds its side files, so a SQLite file of
    another program (or anything else) is refused before it is touched."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return  # a new store, or a path connect() reports on
    except OSError:
        return
    conn = connect_read_only(path)
    try:
        _refuse_foreign(conn, path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    finally:
        conn.close()


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """A ``StoreError`` when the file holds tables but none of toolloop's migrations: its
    tables belong to something else, and toolloop's must not be added among them."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    if not tables or _has_toolloop_migrations(conn, tables):
        return
    shown = ", ".join(tables[:5]) + (", …" if len(tables) > 5 else "")
    raise StoreError(
        f"{path} is a SQLite database but not a toolloop store (it holds {shown}); "
        "refusing to add toolloop's tables to it: pass another --store"
    )


def _has_toolloop_migrations(conn: sqlite3.Connection, tables: list[str]) -> bool:
    table = migrations.migrations.migrations_table
    if table not in tables:
        return False
    found = conn.execute(
        f"SELECT 1 FROM [{table}] WHERE migration_set = ? LIMIT 1",  # the library's own name
        [migrations.migrations.name],
    ).fetchone()
    return found is not None
