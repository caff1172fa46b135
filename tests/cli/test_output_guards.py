"""``report -o`` replaces a file whole, so it refuses every file it must not replace.

The operation runs from copies of the registry and the cassette in ``tmp_path``: a guard that
let a write through would replace a copy, never a file of the repository.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK


@pytest.fixture
def run_files(tmp_path: Path) -> tuple[Path, Path]:
    """The registry and the cassette of the operation, copied where a test may lose them."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    return (
        Path(shutil.copy(REGISTRY, folder / "refunds.yaml")),
        Path(shutil.copy(REFUND_OPENAI, folder / "refund.yaml")),
    )


@pytest.fixture
def operation(cli: Invoke, run_files: tuple[Path, Path]) -> str:
    registry, transcript = run_files
    result = cli(
        "run", TASK, "--registry", str(registry), "--transcript", str(transcript), "--json"
    )
    assert result.exit_code == 10, result.output
    return str(json_out(result)["operation_id"])


def _operations(store_path: Path) -> int:
    with sqlite3.connect(store_path) as conn:
        count: int = conn.execute("SELECT count(*) FROM operations").fetchone()[0]
    return count


def _refused(cli: Invoke, operation: str, target: Path, *extra: str) -> str:
    result = cli("report", operation, "-o", str(target), "--json", *extra)
    assert result.exit_code == 2, result.output
    assert json_out(result)["error_type"] == "UsageError"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_report_refuses_the_store_and_its_side_files(
    cli: Invoke, operation: str, store_path: Path, suffix: str
) -> None:
    target = Path(f"{store_path}{suffix}")
    line = _refused(cli, operation, target)
    assert "would overwrite the store" in line
    assert not target.exists() or not target.read_bytes().startswith(b"<!doctype")
    assert _operations(store_path) == 1  # SQLite may checkpoint; the store stays a store


def test_report_refuses_the_operations_registry_and_transcript(
    cli: Invoke, operation: str, run_files: tuple[Path, Path]
) -> None:
    for path, what in zip(run_files, ("registry", "transcript cassette"), strict=True):
        before = path.read_bytes()
        line = _refused(cli, operation, path)
        assert f"would overwrite the {what} of {operation}" in line
        assert path.read_bytes() == before


def test_report_refuses_the_store_through_a_symlink_or_a_hard_link(
    cli: Invoke, operation: str, store_path: Path, tmp_path: Path
) -> None:
    soft, hard = tmp_path / "soft.html", tmp_path / "hard.html"
    soft.symlink_to(store_path)
    os.link(store_path, hard)
    for target in (soft, hard, tmp_path / "inputs" / ".." / store_path.name):
        assert "would overwrite the store" in _refused(cli, operation, target)
    assert soft.is_symlink() and _operations(store_path) == 1


def test_report_refuses_a_directory_and_a_fifo_even_with_force(
    cli: Invoke, operation: str, tmp_path: Path
) -> None:
    folder, fifo = tmp_path / "folder", tmp_path / "pipe"
    folder.mkdir()
    os.mkfifo(fifo)
    assert "is a directory" in _refused(cli, operation, folder, "--force")
    assert "is not a regular file" in _refused(cli, operation, fifo, "--force")
    assert folder.is_dir() and stat.S_ISFIFO(fifo.stat().st_mode)


def test_report_refuses_an_unknown_file_unless_forced(
    cli: Invoke, operation: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.html"
    notes.write_text("<p>my notes</p>\n")
    line = _refused(cli, operation, notes)
    assert "is not a toolloop report" in line and "--force" in line
    assert notes.read_text() == "<p>my notes</p>\n"
    forced = cli("report", operation, "-o", str(notes), "--force")
    assert forced.exit_code == 0, forced.output
    assert notes.read_text().startswith("<!doctype html>")


def test_report_replaces_an_earlier_report_and_writes_an_empty_file(
    cli: Invoke, operation: str, tmp_path: Path
) -> None:
    target, empty = tmp_path / "report.html", tmp_path / "empty.html"
    empty.touch()
    for path in (target, target, empty):
        result = cli("report", operation, "-o", str(path), "--json")
        assert result.exit_code == 0, result.output
        assert json_out(result)["report"] == str(path)
    assert 'name="generator" content="toolloop ' in empty.read_text()


def test_report_refuses_the_store_when_the_store_is_the_default_target(
    cli: Invoke, operation: str, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default file name is the operation's: still checked like any -o."""
    monkeypatch.chdir(store_path.parent)
    os.link(store_path, store_path.parent / f"report-{operation}.html")
    result = cli("report", operation)
    assert result.exit_code == 2
    assert "would overwrite the store" in result.stderr
    assert _operations(store_path) == 1


def test_a_dash_writes_the_page_to_stdout_and_no_file(
    cli: Invoke, operation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o -`` wrote a file named ``-``; it is the page on stdout, for a pipe."""
    monkeypatch.chdir(tmp_path)
    result = cli("report", operation, "-o", "-")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<!doctype html>") and operation in result.stdout
    assert not (tmp_path / "-").exists()
    refused = cli("report", operation, "-o", "-", "--json")
    assert refused.exit_code == 2
    assert "--json cannot share" in json_out(refused)["error"]
