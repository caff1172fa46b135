"""Where a harness case keeps its store: a SQLite file in the case's own folder, or a fresh
PostgreSQL database whose handlers keep their data (the refund ledger) in that folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.postgres import PgLocation, Server
from toolloop_cli.store.connection import Connection
from toolloop_cli.store.db import DATA_DIR_ENV
from toolloop_cli.store.postgres import connect_postgres, is_postgres_url


@dataclass(frozen=True)
class StoreMaker:
    """``make(folder)``: a new, empty store location for one case.

    On PostgreSQL it also points ``TOOLLOOP_DATA_DIR`` at ``folder`` for this process and the
    children it forks (a test sets the variable with ``monkeypatch`` first, so it is undone)."""

    server: Server | None = None

    @property
    def backend(self) -> str:
        return "sqlite" if self.server is None else "postgresql"

    def __call__(self, folder: Path) -> Path:
        if self.server is None:
            return folder / "store.db"
        os.environ[DATA_DIR_ENV] = str(folder)
        return PgLocation(self.server.fresh_database("crash"), folder)  # type: ignore[return-value]


def is_postgres(location: str | Path) -> bool:
    return is_postgres_url(str(location))


def present(location: str | Path) -> bool:
    """The store is there to read: a file that exists, or any PostgreSQL database."""
    return is_postgres(location) or Path(location).exists()


@contextmanager
def reading(location: str | Path) -> Iterator[Connection]:
    """A plain connection to the store's database (read-only on SQLite)."""
    if is_postgres(location):
        pg: Connection = connect_postgres(str(location))
        try:
            yield pg
        finally:
            pg.close()
        return
    import sqlite3

    conn = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def rows_of(location: str | Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects from the store; none when it is not there yet (or the table
    was never created)."""
    if not present(location):
        return []
    import sqlite3

    with reading(location) as conn:
        try:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc) or "does not exist" in str(exc):
                return []
            raise
