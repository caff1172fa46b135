"""A decision written straight into the database, around toolloop, releases nothing.

Every write toolloop makes to an approval has its audit record; a row that is not what its
last record says was written by someone else. ``verify`` reports such rows; here ``approve``
and ``resume`` refuse them before acting, so a forged approval never releases an irreversible
refund and a moved expiry is never carried into the log by a decision.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store

runner = CliRunner()


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose refund waits for its approval (submit_refund not run)."""
    path = tmp_path_factory.mktemp("waiting") / "store.db"
    args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    result = runner.invoke(app, [*args, "--store", str(path), "--json"])
    assert result.exit_code == 10, result.output
    return path


def copy_of(store: Path, tmp_path: Path) -> Path:
    """The store as committed (its WAL included) and the handlers' files beside it (the
    refund example's ledger), in a folder of the test's own."""
    path = tmp_path / "store.db"
    for other in store.parent.iterdir():
        if not other.name.startswith(store.name) and other.is_file():
            shutil.copy(other, tmp_path / other.name)
    source, target = sqlite3.connect(store), sqlite3.connect(path)
    source.backup(target)
    source.close()
    target.close()
    return path


def write_around(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


def ids(path: Path) -> tuple[str, str]:
    conn = sqlite3.connect(path)
    (op,) = conn.execute("SELECT operation_id FROM operations").fetchone()
    (apr,) = conn.execute("SELECT approval_id FROM approvals").fetchone()
    conn.close()
    return op, apr


def submit_state(path: Path) -> str:
    conn = sqlite3.connect(path)
    (state,) = conn.execute("SELECT state FROM calls WHERE name = 'submit_refund'").fetchone()
    conn.close()
    return str(state)


def refused(result: object, *columns: str) -> None:
    out = json_out(result)
    assert getattr(result, "exit_code", None) == 2, out
    assert out["error_type"] == "TamperedStore"
    assert "written around toolloop" in out["error"] and "nothing was run" in out["error"]
    for column in columns:
        assert column in out["error"]


def test_a_forged_approval_releases_nothing(waiting: Path, tmp_path: Path) -> None:
    path = copy_of(waiting, tmp_path)
    op, _ = ids(path)
    write_around(
        path,
        "UPDATE approvals SET status = 'APPROVED', decided_by = 'ops-lead',"
        " decided_at = '2026-12-01T10:00:00.000000Z'",
    )
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    refused(result, "status", "decided_by")
    assert submit_state(path) == "WAITING_APPROVAL"  # the irreversible call never ran


def test_an_expiry_moved_is_refused_when_the_decision_is_made(
    waiting: Path, tmp_path: Path
) -> None:
    path = copy_of(waiting, tmp_path)
    _, apr = ids(path)
    write_around(path, "UPDATE approvals SET expires_at = '2099-01-01T00:00:00.000000Z'")
    approve = ["approve", apr, "--as", "ops-lead"]
    result = runner.invoke(app, [*approve, "--store", str(path), "--json"])
    refused(result, "expires_at")
    store = open_store(path)
    try:
        assert store.get_approval(apr).status.value == "PENDING"  # no decision recorded
    finally:
        store.close()


def test_the_legitimate_path_is_untouched(waiting: Path, tmp_path: Path) -> None:
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    result = runner.invoke(
        app, ["approve", apr, "--as", "ops-lead", "--resume", "--store", str(path), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json_out(result)["state"] == "COMPLETED"
    assert submit_state(path) == "SUCCEEDED"


def turn_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    (count,) = conn.execute("SELECT count(*) FROM turns").fetchone()
    conn.close()
    return int(count)


@pytest.mark.parametrize("turn", [0, 7])
def test_a_waiting_call_moved_out_of_its_turn_is_never_skipped(
    waiting: Path, tmp_path: Path, turn: int
) -> None:
    """Moved to an earlier or a later turn, the refund waiting for its approval would be left
    behind as its turn's results go back (never run, never answered): the operation stops
    ESCALATED naming it, before any request is sent."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    write_around(path, f"UPDATE calls SET turn_idx = {turn} WHERE name = 'submit_refund'")
    turns = turn_count(path)
    result = runner.invoke(
        app, ["approve", apr, "--as", "ops-lead", "--resume", "--store", str(path), "--json"]
    )
    out = json_out(result)
    assert result.exit_code == 16, out
    assert out["state"] == "ESCALATED"
    assert "integrity check failed: call " in out["reason"]
    assert f"(turn {turn}) is still WAITING_APPROVAL" in out["reason"]
    assert submit_state(path) == "WAITING_APPROVAL"  # the refund was neither run nor dropped
    assert turn_count(path) == turns  # no further request went to the model


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            "UPDATE calls SET turn_idx = 2 WHERE name = 'get_order'",
            "the calls of turn 2 name more than one response",
        ),
        (
            "UPDATE calls SET seq = 1 WHERE name = 'submit_refund'",
            "the calls of turn 2 are not numbered 0 to 0",
        ),
    ],
    ids=["a call of another turn moved in", "renumbered"],
)
def test_a_turn_that_is_not_one_answers_calls_is_not_answered(
    waiting: Path, tmp_path: Path, sql: str, problem: str
) -> None:
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    write_around(path, sql)
    turns = turn_count(path)
    result = runner.invoke(
        app, ["approve", apr, "--as", "ops-lead", "--resume", "--store", str(path), "--json"]
    )
    out = json_out(result)
    assert out["state"] == "ESCALATED", out
    assert problem in out["reason"]
    assert turn_count(path) == turns
