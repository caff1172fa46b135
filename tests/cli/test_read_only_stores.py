"""Commands that read a store (or run what it holds) never create one, and no command writes
into a foreign SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store

READERS = {
    "show": ("show", "op_x"),
    "runs": ("runs",),
    "pending": ("pending",),
    "report": ("report", "op_x"),
    "diff": ("diff", "op_a", "op_b"),
    "verify": ("verify",),
    "export-otel": ("export-otel",),
    "resume": ("resume", "op_x"),
    "step": ("step", "op_x"),
    "approve": ("approve", "apr_x", "--as", "ops-lead"),
    # runs only what `run --detach` submitted: a mistyped path would wait on an empty store
    "worker": ("worker", "--drain"),
}


def _toolloop(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_missing_store_is_named_and_nothing_is_created(tmp_path: Path, command: str) -> None:
    store = tmp_path / "typo" / "store.db"
    result = _toolloop(*READERS[command], "--store", str(store), "--json")
    assert result.exit_code == 2
    assert json_out(result)["error"] == f"no store at {store}"
    assert f"no store at {store}" in result.stderr
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", sorted(READERS))
def test_an_empty_file_is_no_store_and_is_left_empty(tmp_path: Path, command: str) -> None:
    """A file ``touch`` made holds no store: read as one, it would get a schema written into
    it (and a read-only ``verify`` would name fifteen pending migrations)."""
    store = tmp_path / "store.db"
    store.touch()
    result = _toolloop(*READERS[command], "--store", str(store), "--json")
    assert result.exit_code == 2
    assert json_out(result)["error"] == f"no store at {store} (an empty file)"
    assert store.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]


def test_store_copy_from_an_empty_file_copies_nothing(tmp_path: Path) -> None:
    source, target = tmp_path / "empty.db", tmp_path / "copy.db"
    source.touch()
    result = _toolloop("store", "copy", str(source), str(target), "--json")
    assert result.exit_code == 2
    assert json_out(result)["error"] == f"no store at {source} (an empty file)"
    assert not target.exists() and source.stat().st_size == 0


def test_run_makes_its_store_in_an_empty_file(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    store.touch()
    args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    result = _toolloop(*args, "--store", str(store), "--json")
    assert result.exit_code == 10, result.output
    op = json_out(result)["operation_id"]
    shown = _toolloop("show", op, "--store", str(store), "--json")
    assert shown.exit_code == 0 and json_out(shown)["state"] == "WAITING_APPROVAL"


def test_diff_of_two_cassettes_needs_no_store(tmp_path: Path) -> None:
    store = tmp_path / "typo" / "store.db"
    result = _toolloop("diff", str(REFUND_OPENAI), str(REFUND_OPENAI), "--store", str(store))
    assert result.exit_code == 0
    assert not (tmp_path / "typo").exists()


def _foreign(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "args",
    [
        ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)),
        ("runs",),
        ("verify",),
    ],
)
def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "app.db"
    before = _foreign(path)
    result = _toolloop(*args, "--store", str(path), "--json")
    assert result.exit_code == 2
    assert "not a toolloop store" in json_out(result)["error"]
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm


def test_an_empty_file_and_an_existing_store_still_open(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    open_store(empty).close()
    open_store(empty).close()  # now a toolloop store: opened again as one
    with sqlite3.connect(empty) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "operations" in names
