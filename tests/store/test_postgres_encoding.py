"""A PostgreSQL store speaks UTF-8: every session's client encoding is UTF8 whatever the
environment asks, and a database created in another encoding is refused, one line and
exit 2, before anything is written to it."""

from __future__ import annotations

from typing import Any

import pytest
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.postgres import Server, table_names
from support.stores import behind_its_back
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))


def _toolloop(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
@pytest.mark.parametrize("command", [RUN, ("runs",), ("verify",)])
def test_a_database_not_in_utf8_is_refused_before_anything_is_written(
    postgres_server: Server, encoding: str, command: tuple[str, ...]
) -> None:
    url = postgres_server.fresh_database(encoding=encoding)
    result = _toolloop(*command, "--store", url)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, lines
    assert f"the database's encoding is {encoding}, not UTF8" in lines[0]
    assert "ENCODING 'UTF8'" in lines[0] and "nothing was written" in lines[0]
    assert table_names(url) == []


def test_every_session_speaks_utf8_whatever_the_environment_asks(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    store = open_store(postgres_url)
    try:
        assert store.conn.execute("SHOW client_encoding").fetchone() == ("UTF8",)
    finally:
        store.close()
    task = "Commande ord_1001 abîmée — remboursez 12,50 € ✓"
    started = _toolloop(*RUN[:1], task, *RUN[2:], "--store", postgres_url, "--json")
    assert started.exit_code == 10, started.output
    with behind_its_back(postgres_url) as conn:
        assert conn.execute("SELECT task FROM operations").fetchall() == [(task,)]
