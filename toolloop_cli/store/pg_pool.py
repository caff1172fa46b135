"""Stores over pooled PostgreSQL connections (psycopg-pool), for a worker's threads.

Each thread borrows a connection for one operation's run and gives it back. The pool checks
a connection before lending it and replaces one the server dropped (a restart, a fail-over,
an administrator's ``pg_terminate_backend``), so a long-lived worker outlasts its
connections; a run that loses its connection mid-step stops with a ``StoreError`` at its
last commit, and its lease lets the next run take it over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolloop_cli.errors import StoreError

from .db import DATA_DIR_ENV, open_store
from .durability import Durability, durability_from
from .pg_settings import connect_kwargs
from .postgres import PgConnection, connect_postgres, first_line, redacted
from .repo import Store

if TYPE_CHECKING:
    import psycopg


#: the pool reports each failed reconnection as a warning; with no logging configured Python
#: would print them on stderr, around the one line a command prints: kept for those who
#: configure logging
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


class PgStorePool:
    """``size`` connections to the store at ``url``, migrated once when the pool opens."""

    def __init__(self, url: str, size: int, *, durability: str | None = None) -> None:
        from psycopg_pool import ConnectionPool

        open_store(url, durability=durability).close()  # migrates, or says why it cannot
        self.url = url
        self.durability = durability_from(durability)
        data_dir = os.environ.get(DATA_DIR_ENV)
        self.data_dir = Path(data_dir) if data_dir else None
        full = self.durability is Durability.FULL
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=size,
            max_size=size,
            # the settings open_store's connection has (pg_settings.py)
            kwargs={"autocommit": True, **connect_kwargs(url, synchronous_commit=full)},
            check=ConnectionPool.check_connection,
            open=True,
        )

    @contextmanager
    def store(self) -> Iterator[Store]:
        """A store over a borrowed connection, returned to the pool at the end of the block.

        No connection within the pool's timeout (the server down, or refusing connections,
        longer than that) is a ``StoreError``: one line, not the pool's traceback."""
        from psycopg_pool import PoolTimeout

        borrowed = ExitStack()
        try:
            raw = borrowed.enter_context(self.pool.connection())
        except PoolTimeout as exc:
            raise StoreError(
                f"cannot reach store {redacted(self.url)}: no connection could be made in "
                f"{self.pool.timeout:g} s ({first_line(exc)})"
            ) from exc
        with borrowed:
            yield Store(
                PgConnection(raw, owned=False, location=redacted(self.url)),
                redacted(self.url),
                self.durability,
                data_dir=self.data_dir,
                reconnect=lambda: connect_postgres(self.url),
            )

    def close(self) -> None:
        self.pool.close()
