"""A real PostgreSQL server for the tests: ``TOOLLOOP_TEST_POSTGRES`` when it names one, else a
private one that ``pgserver`` starts in a temporary folder (no root, no network).

Each test gets a database of its own on it (``fresh_database``), so tests never see each
other's operations and need no cleanup.
"""

from __future__ import annotations

import os
import secrets
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

#: an existing server to run the PostgreSQL tests on (a URL whose role may CREATE DATABASE)
SERVER_ENV = "TOOLLOOP_TEST_POSTGRES"


class Server:
    """A server the tests may create databases on; ``stop`` ends it if the tests started it."""

    def __init__(self, url: str, owned: object | None = None) -> None:
        self.url = url
        self._owned = owned

    def fresh_database(self, prefix: str = "t", *, encoding: str | None = None) -> str:
        """The URL of a new, empty database on this server (in ``encoding``, when given: a
        copy of ``template0`` in the C locale, which every encoding accepts)."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        how = ""
        if encoding is not None:
            how = f" ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{how}')
        return with_database(self.url, name)

    def stop(self) -> None:
        if self._owned is not None:
            self._owned.cleanup()  # type: ignore[attr-defined]


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (host, port, user and query kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def start_server(folder: Path) -> Server:
    """``TOOLLOOP_TEST_POSTGRES``, else a private server in ``folder`` (started now)."""
    named = os.environ.get(SERVER_ENV)
    if named:
        return Server(named)
    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR in a bare CI shell
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(str(folder), cleanup_mode="stop")
    return Server(server.get_uri(), owned=server)


class PgLocation(str):
    """A PostgreSQL store's URL standing where a test takes a store file's path: ``str`` is the
    URL (what ``--store`` and ``open_store`` take) and ``parent`` the folder of the handlers'
    data (``TOOLLOOP_DATA_DIR``), as a file store's folder is. Anything else a path has is
    missing on purpose: a test that reads the file itself is ``sqlite_only``."""

    parent: Path

    def __new__(cls, url: str, data_dir: Path) -> PgLocation:
        location = super().__new__(cls, url)
        location.parent = data_dir
        return location


def with_params(url: str, **params: str) -> str:
    """``url`` with more query parameters (``options=-c lock_timeout=0`` …), encoded."""
    from urllib.parse import quote, urlencode

    parts = urlsplit(url)
    extra = urlencode(params, quote_via=quote)  # libpq reads no "+" as a space
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit(parts._replace(query=query))


def table_names(url: str) -> list[str]:
    """The tables and views of the database ``url`` names, in its public schema, sorted."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' ORDER BY table_name"
        ).fetchall()
    return [str(r[0]) for r in rows]
