"""A PostgreSQL database that is not a toolloop store.

One whose tables belong to something else is refused by every command, one line and exit
2, and nothing is written to it. An empty one is no store for the commands that read or act
on what a store holds (one line, exit 2, nothing created); ``run``, ``replay``,
``store copy`` into it and a worker's pool create the store there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.postgres import table_names
from typer.testing import CliRunner

from toolloop_cli.cli import app

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
#: commands that read or act on what a store holds (``--store`` is added)
READERS = [
    ("runs",),
    ("show", "op_missing"),
    ("resume", "op_missing"),
    ("step", "op_missing"),
    ("approve", "apr_missing", "--as", "ops-lead"),
    ("pending",),
    ("verify",),
    ("export-otel", "--endpoint", "http://127.0.0.1:9"),
    ("report", "op_missing"),
    ("diff", "op_a", "op_b"),
]
#: commands that create a store where there is none
CREATORS = [RUN, ("replay", str(REFUND_OPENAI), "--registry", str(REGISTRY)), ("worker", "--drain")]


def _toolloop(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, lines
    return str(lines[0])


@pytest.fixture
def foreign(postgres_url: str) -> str:
    """A database of another application: two tables, a view, rows."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int PRIMARY KEY, cents int)")
        conn.execute("INSERT INTO invoices VALUES (1, 1250)")
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY)")
        conn.execute("CREATE VIEW unpaid AS SELECT id FROM invoices")
    return postgres_url


def _untouched(url: str) -> None:
    assert table_names(url) == ["customers", "invoices", "unpaid"]
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT * FROM invoices").fetchall() == [(1, 1250)]


@pytest.mark.parametrize("command", [*READERS, *CREATORS], ids=lambda c: c[0])
def test_a_database_of_another_application_is_refused_by_every_command(
    foreign: str, command: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # report and replay write nothing beside the tests
    message = _one_error_line(_toolloop(*command, "--store", foreign))
    assert "is a PostgreSQL database but not a toolloop store" in message
    assert "(it holds customers, invoices, unpaid)" in message
    _untouched(foreign)


def test_a_database_of_another_application_is_refused_as_either_side_of_a_copy(
    foreign: str, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    assert _toolloop(*RUN, "--store", str(source)).exit_code == 10
    into = _one_error_line(_toolloop("store", "copy", str(source), foreign))
    assert "is a PostgreSQL database but not a toolloop store" in into
    out_of = _one_error_line(_toolloop("store", "copy", foreign, str(tmp_path / "copy.db")))
    assert "is a PostgreSQL database but not a toolloop store" in out_of
    assert not (tmp_path / "copy.db").exists()
    _untouched(foreign)


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_an_empty_database_is_no_store_for_the_commands_that_read_one(
    postgres_url: str, command: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    message = _one_error_line(_toolloop(*command, "--store", postgres_url))
    assert message.startswith("error: no store at postgresql://")
    assert "the database is empty" in message
    assert table_names(postgres_url) == []  # nothing created


@pytest.mark.parametrize("command", CREATORS, ids=lambda c: c[0])
def test_an_empty_database_becomes_a_store_for_the_commands_that_make_one(
    postgres_url: str, command: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    made = _toolloop(*command, "--store", postgres_url)
    assert made.exit_code in (0, 10), made.output
    assert "operations" in table_names(postgres_url)
    assert _toolloop("runs", "--store", postgres_url).exit_code == 0


def test_a_copy_into_an_empty_database_makes_the_store_there(
    postgres_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "source.db"
    assert _toolloop(*RUN, "--store", str(source)).exit_code == 10
    copied = _toolloop("store", "copy", str(source), postgres_url)
    assert copied.exit_code == 0, copied.output
    assert _toolloop("runs", "--store", postgres_url).exit_code == 0
