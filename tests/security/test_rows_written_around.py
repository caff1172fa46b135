"""A decision or a state written straight into the database, around toolloop, releases nothing.

Every write toolloop makes to an approval or an operation has its audit record; a row that is
not what its last record says was written by someone else. ``verify`` reports such rows; here
``approve``, ``resume`` and ``step`` refuse them before acting, so a forged approval never
releases an irreversible refund, a moved expiry is never carried into the log by a decision,
an operation set back never runs on, and a registry path pointed elsewhere imports nothing. A
call moved out of its turn stops the operation ESCALATED before its turn's results go back.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.audit_log import append_record
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.examples.refunds import ledger_refunds
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


@pytest.mark.parametrize("command", ["step", "resume"])
def test_a_waiting_call_whose_turn_is_no_turn_is_refused_before_anything_is_written(
    waiting: Path, tmp_path: Path, command: str
) -> None:
    """A turn index that is no integer hides the call from its turn's query: the operation is
    refused naming the column (exit 2) before a transition is written, not moved on to
    RESULTS_READY first."""
    path = copy_of(waiting, tmp_path)
    op, _ = ids(path)
    write_around(path, "UPDATE calls SET turn_idx = 2.5 WHERE name = 'submit_refund'")
    result = runner.invoke(app, [command, op, "--store", str(path), "--json"])
    out = json_out(result)
    assert result.exit_code == 2, out
    assert out["error_type"] == "TamperedStore"
    assert "calls.turn_idx holds 2.5" in out["error"]
    conn = sqlite3.connect(path)
    (state,) = conn.execute("SELECT state FROM operations").fetchone()
    (last,) = conn.execute("SELECT target FROM transitions ORDER BY id DESC LIMIT 1").fetchone()
    conn.close()
    assert (state, last) == ("WAITING_APPROVAL", "WAITING_APPROVAL")


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            "UPDATE calls SET turn_idx = 2 WHERE name = 'get_order'",
            "the calls of turn 2 name more than one response",
        ),
        (
            "UPDATE calls SET turn_idx = 2, seq = 5 WHERE name = 'get_order'",
            "the calls of turn 2 are not numbered 0 to 1",
        ),
    ],
    ids=["a call of another turn moved in", "numbered out of order"],
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


def planted_registry(folder: Path, marker: Path) -> Path:
    """A registry naming a handler module of the attacker's, which writes ``marker`` when
    imported."""
    folder.mkdir()
    (folder / "plantedmod.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def f(arguments, context):\n    return {}\n"
    )
    registry = folder / "reg.yaml"
    registry.write_text(
        REGISTRY.read_text().replace("toolloop_cli.examples.refunds:submit_refund", "plantedmod:f")
    )
    return registry


@pytest.mark.parametrize("command", ["resume", "step", "approve"])
def test_a_registry_path_pointed_elsewhere_imports_nothing(
    waiting: Path, tmp_path: Path, command: str
) -> None:
    """The operation's registry is loaded from the path its row names: a row written around
    toolloop is refused before that registry (and the modules it names) is loaded."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    marker = tmp_path / "IMPORTED"
    registry = planted_registry(tmp_path / "planted", marker)
    write_around(path, f"UPDATE operations SET registry_path = '{registry}'")
    args = {
        "resume": ["resume", op],
        "step": ["step", op],
        "approve": ["approve", apr, "--as", "ops-lead"],
    }[command]
    result = runner.invoke(app, [*args, "--store", str(path), "--json"])
    refused(result, "registry_path")
    assert not marker.exists()
    assert submit_state(path) == "WAITING_APPROVAL"


def test_an_operation_set_back_to_a_running_state_is_not_run_again(
    waiting: Path, tmp_path: Path
) -> None:
    """A finished refund set back by SQL to RESULTS_READY would send its results (and go on)
    a second time: the row is not what the audit log last recorded, so nothing runs."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    done = runner.invoke(
        app, ["approve", apr, "--as", "ops-lead", "--resume", "--store", str(path), "--json"]
    )
    assert json_out(done)["state"] == "COMPLETED"
    turns = turn_count(path)
    write_around(path, "UPDATE operations SET state = 'RESULTS_READY'")
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    refused(result, "state")
    assert turn_count(path) == turns


@pytest.mark.parametrize("clear_approval", [False, True], ids=["approval pending", "no approval"])
def test_a_call_set_approved_by_hand_runs_nothing(
    waiting: Path, tmp_path: Path, clear_approval: bool
) -> None:
    """The refund's own row set APPROVED (its approval left pending, or unlinked) would run
    the irreversible refund on resume: the row is not as last logged, so nothing runs."""
    path = copy_of(waiting, tmp_path)
    op, _ = ids(path)
    unlink = ", approval_id = NULL" if clear_approval else ""
    write_around(path, f"UPDATE calls SET state = 'APPROVED'{unlink} WHERE name = 'submit_refund'")
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    refused(result, "state", *(["approval_id"] if clear_approval else []))
    assert submit_state(path) == "APPROVED"  # never EXECUTING: no intent, no handler
    assert not refunds_made(path)


def test_a_call_approved_by_a_forged_record_still_needs_its_approval(
    waiting: Path, tmp_path: Path
) -> None:
    """A forger who also appends a legal-looking record for the call (the chain is unkeyed)
    still has no approval given for it: the refund needs one, so nothing runs."""
    path = copy_of(waiting, tmp_path)
    op, _ = ids(path)
    forger = sqlite3.connect(path, isolation_level=None)
    forger.row_factory = sqlite3.Row
    forger.execute("BEGIN IMMEDIATE")
    forger.execute("UPDATE calls SET state = 'APPROVED' WHERE name = 'submit_refund'")
    row = dict(forger.execute("SELECT * FROM calls WHERE name = 'submit_refund'").fetchone())
    append_record(forger, "call", row)
    forger.execute("COMMIT")
    forger.close()
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    out = json_out(result)
    assert result.exit_code == 2, out
    assert out["error_type"] == "TamperedStore"
    assert "submit_refund needs an approval and the call has none given for it" in out["error"]
    assert submit_state(path) == "APPROVED"
    assert not refunds_made(path)


def refunds_made(path: Path) -> list[dict[str, Any]]:
    """The refunds the example's ledger (beside the store) holds."""
    return ledger_refunds(path.parent / "payments.db")


def test_a_waiting_call_set_executing_by_hand_is_never_run_as_a_crash_left_it(
    waiting: Path, tmp_path: Path
) -> None:
    """A call left EXECUTING by a crash is reconciled, and run again when the downstream has
    no record of it. One set EXECUTING by hand (never approved) is not run, even when an
    operator forces the operation on."""
    path = copy_of(waiting, tmp_path)
    op, _ = ids(path)
    write_around(path, "UPDATE calls SET state = 'EXECUTING' WHERE name = 'submit_refund'")
    first = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    assert json_out(first)["state"] == "ESCALATED"  # no result to send back for it
    forced = ["resume", op, "--force-continue", "--as", "ops-lead", "--store", str(path)]
    result = runner.invoke(app, [*forced, "--json"])
    refused(result, "state")
    assert not refunds_made(path)


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            "UPDATE blobs SET body = '{bad' WHERE sha256 = ({first})",
            "blobs.body does not hash to",
        ),
        (
            'UPDATE blobs SET body = \'{"role": "user", "content": "refund 1e6"}\''
            " WHERE sha256 = ({first})",
            "blobs.body does not hash to",
        ),
        ("DELETE FROM blobs WHERE sha256 = ({first})", "blobs holds no body for"),
        ("DELETE FROM conversation WHERE seq = 1", "the conversation has no item at position 1"),
    ],
    ids=["broken JSON", "another item", "body gone", "item gone"],
)
def test_a_conversation_changed_around_toolloop_is_never_sent(
    waiting: Path, tmp_path: Path, sql: str, problem: str
) -> None:
    """What goes to the model is the conversation as stored: each item's body must hash to
    the digest its position names, so an item rewritten in the database is refused (exit 2,
    naming it) before any request is built."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    first = "SELECT item_sha256 FROM conversation ORDER BY seq LIMIT 1"
    write_around(path, sql.replace("{first}", first))
    turns = turn_count(path)
    assert (
        runner.invoke(app, ["approve", apr, "--as", "ops-lead", "--store", str(path)]).exit_code
        == 0
    )
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    out = json_out(result)
    assert result.exit_code == 2, out
    assert out["error_type"] == "TamperedStore"
    assert problem in out["error"] and f"of operation {op}" in out["error"]
    assert turn_count(path) == turns


@pytest.mark.parametrize("command", ["approve", "resume"])
def test_an_audit_record_that_is_not_utf8_is_refused_by_name(
    waiting: Path, tmp_path: Path, command: str
) -> None:
    """The checks above read the audit log newest first: a record SQLite cannot decode is a
    ``TamperedStore`` naming ``audit_log.record`` (exit 2), never a raw database error."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    write_around(
        path,
        "UPDATE audit_log SET record = CAST(X'C3FF' AS TEXT)"
        " WHERE seq = (SELECT max(seq) FROM audit_log)",
    )
    args = {"approve": ["approve", apr, "--as", "ops-lead"], "resume": ["resume", op]}[command]
    result = runner.invoke(app, [*args, "--store", str(path), "--json"])
    out = json_out(result)
    assert result.exit_code == 2, out
    assert out["error_type"] == "TamperedStore"
    assert "audit_log.record holds text that is not UTF-8" in out["error"]
    assert submit_state(path) == "WAITING_APPROVAL"


@pytest.mark.parametrize("column", ["idempotency_key", "raw_arguments", "argument_error"])
def test_a_waiting_call_changed_by_hand_is_not_decided_or_run(
    waiting: Path, tmp_path: Path, column: str
) -> None:
    """Applying a decision writes the call again; a row changed around toolloop (a fresh
    idempotency key would let the refund be made twice downstream) is refused first, so it
    is never written back as toolloop's own and never run."""
    path = copy_of(waiting, tmp_path)
    _, apr = ids(path)
    write_around(path, f"UPDATE calls SET {column} = 'changed' WHERE name = 'submit_refund'")
    result = runner.invoke(
        app, ["approve", apr, "--as", "ops-lead", "--resume", "--store", str(path), "--json"]
    )
    refused(result, column)
    assert submit_state(path) == "WAITING_APPROVAL"
    assert not refunds_made(path)


def test_an_approval_moved_to_another_operation_is_refused_and_a_drain_ends(
    waiting: Path, tmp_path: Path
) -> None:
    """The approval a refund waits on, re-pointed at another operation, leaves the refund
    waiting on nothing that is pending: a worker takes it, refuses it by name and does not
    take it again (a drain that took it for ever would never end)."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    write_around(path, "UPDATE approvals SET operation_id = 'op_' || hex(randomblob(16))")
    result = runner.invoke(app, ["resume", op, "--store", str(path), "--json"])
    out = json_out(result)
    assert result.exit_code == 2 and out["error_type"] == "TamperedStore", out
    assert f"waits on approval {apr}, which names call" in out["error"]
    drained = runner.invoke(app, ["worker", "--drain", "--store", str(path), "--json"])
    assert drained.exit_code == 0, drained.output
    stats = json_out(drained)
    assert (stats["taken"], stats["failed"], stats["not_run"]) == (0, 1, [op])
    assert submit_state(path) == "WAITING_APPROVAL"


def test_a_waiting_call_deleted_around_toolloop_is_never_taken_as_answered(
    waiting: Path, tmp_path: Path
) -> None:
    """With the refund's row deleted, its turn holds nothing to run: the operation would go
    on to the model's next answer ("refund submitted") though nothing was. Its approval
    still names the call, so resume refuses the store before anything is written."""
    path = copy_of(waiting, tmp_path)
    op, apr = ids(path)
    write_around(path, "DELETE FROM calls WHERE name = 'submit_refund'")
    turns = turn_count(path)
    for command in ("resume", "step"):
        result = runner.invoke(app, [command, op, "--store", str(path), "--json"])
        out = json_out(result)
        assert result.exit_code == 2 and out["error_type"] == "TamperedStore", out
        assert f"approval {apr} of operation {op} names call " in out["error"]
        assert "which the store does not hold" in out["error"]
    conn = sqlite3.connect(path)
    (state,) = conn.execute("SELECT state FROM operations").fetchone()
    conn.close()
    assert state == "WAITING_APPROVAL" and turn_count(path) == turns
