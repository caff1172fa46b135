"""Where a harness case keeps its store: a SQLite file in the case's own folder, or a fresh
PostgreSQL database whose handlers keep their data (the refund ledger) in that folder."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.postgres import PgLocation, Server
from support.stores import behind_its_back
from toolloop_cli.store.db import DATA_DIR_ENV, store_exists
from toolloop_cli.store.postgres import is_postgres_url


@dataclass(frozen=True)
class StoreMaker:
    """``make(folder)``: a new, empty store location for one case.

    On PostgreSQL it also points ``TOOLLOOP_DATA_DIR`` at ``folder`` for this process and the
    children it forks (a test sets the variable with ``monkeypatch`` first, so it is undone)."""

    server: Server | None = None

    def __call__(self, folder: Path) -> Path:
        if self.server is None:
            return folder / "store.db"
        os.environ[DATA_DIR_ENV] = str(folder)
        return PgLocation(self.server.fresh_database("crash"), folder)  # type: ignore[return-value]


def is_postgres(location: str | Path) -> bool:
    return is_postgres_url(str(location))


def rows_of(location: str | Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects from the store; none when it is not there yet (or the table
    was never created)."""
    if not store_exists(location):
        return []
    import sqlite3

    with behind_its_back(location, read_only=True) as conn:
        try:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
        except sqlite3.OperationalError:  # a file killed before its first migration
            return []
