"""Every column of every row of every audited table, changed in turn, is found by verify.

The sweep runs on the rows in memory (``audit.verify`` is handed rows), so thousands of
mutations stay fast; a sample of them is also written to a real store file and checked
through ``toolloop verify`` (exit 20). Checks only add mismatches, so a mutation found
without rebuilding requests is found by the full verify too; any mutation the fast sweep
misses is re-checked with request rebuilding before it counts as missed.
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import json_out
from support.clock import FakeClock
from support.stores import demo_store
from typer.testing import CliRunner

from toolloop_cli.audit.rows import StoreRows
from toolloop_cli.audit.stored import record_text
from toolloop_cli.audit.verify import verify
from toolloop_cli.cli import app
from toolloop_cli.service.verify import _Requests, read_rows
from toolloop_cli.store import open_store

TABLES = ("operations", "turns", "calls", "approvals", "transitions", "conversation", "audit_log")

Mutation = tuple[str, int, str]  # table, row index, column


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StoreRows, dict[str, str]]:
    path = tmp_path_factory.mktemp("demo") / "store.db"
    ops = demo_store(path, FakeClock())
    store = open_store(path)
    rows = read_rows(store)
    store.close()
    return path, rows, ops


def changed(value: Any) -> Any:
    """A different value of the same kind; JSON text stays valid JSON (a careful attacker)."""
    if value is None:
        return "tampered"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, bytes):
        return value + b" "
    assert isinstance(value, str)
    try:
        parsed = json.loads(value)
    except ValueError:
        return value + "x"
    if isinstance(parsed, dict):
        return json.dumps({**parsed, "tampered": True}, sort_keys=True)
    return value + " "


def mutations(rows: StoreRows) -> Iterator[Mutation]:
    for table in TABLES:
        for index, row in enumerate(rows.table(table)):
            for column in row:
                yield table, index, column


def expected_names(rows: StoreRows, table: str, row: dict[str, Any]) -> tuple[str, str | None]:
    """The operation and call a mutation of ``row`` must be reported under."""
    if table == "audit_log":
        record = json.loads(record_text(row["record"]))
        return record["operation_id"], record["call_id"]
    return row["operation_id"], row.get("call_id")


def named(report: Any, table: str, field: str, op: str, call: str | None) -> bool:
    return any(
        m.table == table and m.field == field and m.operation_id == op and m.call_id == call
        for m in report.mismatches
    )


@pytest.mark.timeout(600)  # thousands of verifications; about 40 s on two cores
def test_every_audited_column_of_every_row_is_caught_and_named(
    demo: tuple[Path, StoreRows, dict[str, str]],
) -> None:
    _, rows, _ = demo
    assert verify(rows, request_sha=_Requests(rows)).ok  # no false positive to start from
    tried, missed = 0, []
    for table, index, column in mutations(rows):
        tampered = copy.copy(rows)
        setattr(tampered, table, list(rows.table(table)))
        row = dict(rows.table(table)[index])
        op, call = expected_names(rows, table, row)
        row[column] = changed(row[column])
        tampered.table(table)[index] = row
        report = verify(tampered)
        if not named(report, table, column, op, call):
            report = verify(tampered, request_sha=_Requests(tampered))
        tried += 1
        if not named(report, table, column, op, call):
            missed.append((table, index, column, [m.line() for m in report.mismatches][:3]))
    assert missed == []
    # every column of every row was changed once (the demo holds a store's every kind of row)
    assert tried == sum(len(row) for t in TABLES for row in rows.table(t)) > 1500
    print(f"\n{tried} row/column mutations tried, all caught and named")


def test_every_blob_changed_or_rekeyed_is_caught_under_an_operation_using_it(
    demo: tuple[Path, StoreRows, dict[str, str]],
) -> None:
    _, rows, _ = demo
    users: dict[str, set[str]] = {}
    for r in rows.conversation:
        users.setdefault(r["item_sha256"], set()).add(r["operation_id"])
    for t in rows.turns:
        users.setdefault(t["tools_sha256"], set()).add(t["operation_id"])
    for a in rows.approvals:  # the policy block each approval pins
        users.setdefault(a["policy_sha256"], set()).add(a["operation_id"])
    assert set(users) == set(rows.blobs)
    for digest, body in rows.blobs.items():
        for column in ("sha256", "body"):
            blobs = dict(rows.blobs)
            if column == "body":
                blobs[digest] = changed(body)
            else:
                blobs[changed(digest)] = blobs.pop(digest)
            tampered = copy.copy(rows)
            tampered.blobs = blobs
            report = verify(tampered)
            assert any(
                m.table == "blobs" and m.field == column and m.operation_id in users[digest]
                for m in report.mismatches
            ), (digest, column)


def test_deleted_and_duplicated_rows_are_caught(
    demo: tuple[Path, StoreRows, dict[str, str]],
) -> None:
    _, rows, _ = demo
    for table in TABLES:
        for index in range(len(rows.table(table))):
            for change in ("delete", "duplicate"):
                tampered = copy.copy(rows)
                table_rows = list(rows.table(table))
                if change == "delete":
                    del table_rows[index]
                else:
                    table_rows.insert(index, dict(table_rows[index]))
                setattr(tampered, table, table_rows)
                assert not verify(tampered).ok, (table, index, change)


def sample(rows: StoreRows) -> list[Mutation]:
    """One mutation per table and column (its first row)."""
    seen: set[tuple[str, str]] = set()
    picked = []
    for table, index, column in mutations(rows):
        if (table, column) not in seen and not (table, column) == ("audit_log", "seq"):
            seen.add((table, column))
            picked.append((table, index, column))
    return picked


def test_mutations_written_to_a_store_file_exit_20_through_the_cli(
    demo: tuple[Path, StoreRows, dict[str, str]], tmp_path: Path
) -> None:
    source, rows, _ = demo
    runner = CliRunner()
    for number, (table, index, column) in enumerate(sample(rows)):
        path = tmp_path / f"mutant-{number}.db"
        shutil.copy(source, path)
        row = rows.table(table)[index]
        op, call = expected_names(rows, table, row)
        conn = sqlite3.connect(path)
        where, key = _key_of(table, row)
        value = row[column]  # integers jump far, clear of unique keys held by other rows
        value = value + 1_000_000 if type(value) is int else changed(value)
        changed_rows = conn.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (value, *key))
        assert changed_rows.rowcount == 1, (table, column)
        conn.commit()
        conn.close()
        result = runner.invoke(app, ["verify", "--json", "--store", str(path)])
        assert result.exit_code == 20, (table, column)
        assert any(
            (m["table"], m["field"], m["operation_id"], m["call_id"]) == (table, column, op, call)
            for m in json_out(result)["mismatches"]
        ), (table, column)


KEYS = {
    "operations": ("operation_id",),
    "turns": ("operation_id", "idx"),
    "calls": ("operation_id", "response_id", "call_id"),
    "approvals": ("approval_id",),
    "transitions": ("id",),
    "conversation": ("operation_id", "seq"),
    "audit_log": ("seq",),
}


def _key_of(table: str, row: dict[str, Any]) -> tuple[str, list[Any]]:
    """The WHERE clause naming ``row`` by its key as read, and the key's values."""
    key = KEYS[table]
    return " AND ".join(f"{c} = ?" for c in key), [row[c] for c in key]
