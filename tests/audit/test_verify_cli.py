"""``toolloop verify``: 0 with counts on an honest store, 20 with each mismatch, 2 on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.clock import FakeClock
from support.stores import behind_its_back, demo_store, start

from toolloop_cli.store import open_store


def test_an_honest_store_verifies_with_counts(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    demo_store(store_path, clock)
    result = cli("verify", "--json")
    assert result.exit_code == 0, result.output
    report = json_out(result)
    assert report["ok"] is True and report["mismatches"] == []
    counts = report["counts"]
    assert counts["operations"] == 4
    assert counts["calls"] == 3 + 3 + 3 + 3  # get_order, create_refund_draft, submit_refund each
    assert counts["turns"] == 4 + 4 + 4 + 3
    assert counts["requests_rebuilt"] == counts["turns"]  # every request rebuilt and re-hashed
    with behind_its_back(store_path) as conn:
        (records,) = conn.execute("SELECT count(*) FROM audit_log").fetchone()
    assert counts["records"] == records and report["head"]["seq"] == records


def test_the_human_report_says_verified_and_shows_the_head(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    demo_store(store_path, clock)
    result = cli("verify")
    assert result.exit_code == 0
    assert "verified 4 operation(s)" in result.stdout
    assert "head " in result.stdout and ":sha256:" in result.stdout


def test_verify_one_operation_counts_only_its_rows(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    ops = demo_store(store_path, clock)
    report = json_out(cli("verify", ops["paused"], "--json"))
    assert report["ok"] is True and report["operation_id"] == ops["paused"]
    assert report["counts"]["operations"] == 1
    assert report["counts"]["calls"] == 3
    assert report["counts"]["pending_checked"] == 1  # the submit_refund waiting for approval


def test_a_changed_result_exits_20_naming_operation_call_and_field(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    ops = demo_store(store_path, clock)
    with behind_its_back(store_path) as conn:
        (call_id,) = conn.execute(
            "SELECT call_id FROM calls WHERE operation_id = ? AND name = 'get_order'",
            (ops["completed"],),
        ).fetchone()
        conn.execute(
            "UPDATE calls SET model_result_json = replace(model_result_json, '4999', '9999')"
            " WHERE call_id = ? AND operation_id = ?",
            (call_id, ops["completed"]),
        )
    result = cli("verify", "--json")
    assert result.exit_code == 20
    found = {
        (m["operation_id"], m["call_id"], m["table"], m["field"])
        for m in json_out(result)["mismatches"]
    }
    assert (ops["completed"], call_id, "calls", "model_result_json") in found
    assert (ops["completed"], call_id, "calls", "result_sha256") in found
    human = cli("verify")
    assert human.exit_code == 20
    assert f"{ops['completed']} call {call_id}" in human.stdout
    assert "mismatch(es)" in human.stdout


def test_head_then_expect_head_passes_on_the_same_store(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    demo_store(store_path, clock)
    head = cli("verify", "--head").stdout.strip()
    seq, _, digest = head.partition(":")
    assert int(seq) > 0 and digest.startswith("sha256:")
    assert cli("verify", "--expect-head", head).exit_code == 0
    assert cli("verify", "--expect-head", digest).exit_code == 0
    # the same head copied through a tool that shouts or pads: the same head, not tampering
    shouted = f"0{seq}:sha256:{digest.removeprefix('sha256:').upper()}"
    assert cli("verify", "--expect-head", shouted).exit_code == 0
    assert cli("verify", "--expect-head", f"{int(seq) + 1}:{digest}").exit_code == 20
    wrong = cli("verify", "--expect-head", "sha256:" + "1" * 64, "--json")
    assert wrong.exit_code == 20
    (mismatch,) = json_out(wrong)["mismatches"]
    assert (mismatch["table"], mismatch["field"]) == ("audit_log", "chain_sha256")


def test_an_older_head_is_still_reached_after_the_store_grows(
    cli: Invoke, store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    start(store, clock)
    head = cli("verify", "--head").stdout.strip()
    start(store, clock)
    store.close()
    assert cli("verify", "--head").stdout.strip() != head
    assert cli("verify", "--expect-head", head).exit_code == 0


@pytest.mark.sqlite_only  # a missing file; a PostgreSQL database is created by its server
def test_an_unknown_operation_or_a_missing_store_is_bad_input(
    cli: Invoke, store_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    missing = cli("verify")
    assert missing.exit_code == 2 and "no store" in missing.stderr
    assert not store_path.exists()
    demo_store(store_path, clock)
    unknown = cli("verify", "op_nope")
    assert unknown.exit_code == 2 and "op_nope" in unknown.stderr


@pytest.mark.parametrize(
    "table", ["operations", "turns", "calls", "approvals", "transitions", "audit_log", "blobs"]
)
def test_an_audited_table_dropped_is_a_mismatch_not_an_unreadable_store(
    tmp_path: Path, clock: FakeClock, table: str
) -> None:
    """Dropping a table removes every row the log vouches for: exit 20 naming the table
    (it was "cannot read store … no such table", exit 2)."""
    from typer.testing import CliRunner

    from toolloop_cli.cli import app

    path = tmp_path / "store.db"
    demo_store(path, clock)
    with behind_its_back(path) as conn:
        conn.execute(f"DROP TABLE {table}")
    result = CliRunner().invoke(app, ["verify", "--store", str(path), "--json"])
    assert result.exit_code == 20, result.output
    report = json_out(result)
    assert report["mismatches"] == [
        {
            "operation_id": None,
            "call_id": None,
            "table": table,
            "key": "table",
            "field": "table",
            "expected": "present",
            "found": "missing",
        }
    ]


def _overwrite_page_header(path: Path, index: str) -> None:
    """Write garbage over the B-tree header of ``index``'s root page, as an editor of the file
    (not of its rows) would: the table keeps its rows, the index no longer finds them."""
    with behind_its_back(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (index,))
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as file:
        file.seek((root[0] - 1) * size + 8)
        file.write(b"\xde\xad\xbe\xef" * 6)


@pytest.mark.sqlite_only  # the file's pages are edited
@pytest.mark.parametrize("operation", [False, True])
def test_a_damaged_index_is_a_finding_not_a_clean_store_with_fewer_rows(
    cli: Invoke, store_path: Path, clock: FakeClock, operation: bool
) -> None:
    """An operation's row tampered with, then the index every read of it goes through
    overwritten: the reads of ``verify`` found no operation and no record of it, and it
    exited 0 ("verified 0 operation(s)") while ``runs``, scanning the table, showed the
    tampered text. SQLite's integrity check now runs first: exit 20, naming what it found."""
    ops = demo_store(store_path, clock)
    with behind_its_back(store_path) as conn:
        conn.execute("UPDATE operations SET final_text = 'Refunded to attacker'")
    _overwrite_page_header(store_path, "sqlite_autoindex_operations_1")
    args = ("verify", ops["paused"], "--json") if operation else ("verify", "--json")
    result = cli(*args)
    assert result.exit_code == 20, result.output
    found = json_out(result)["mismatches"]
    assert found and {(m["table"], m["key"], m["field"]) for m in found} == {
        ("store", "file", "integrity_check")
    }
    assert any("sqlite_autoindex_operations_1" in m["found"] for m in found), found
    assert all("\n" not in m["found"] and "*** in database" not in m["found"] for m in found)
