"""A column changed outside toolloop (anyone who can write the SQLite file can) is refused by
name, never met with a traceback.

Each case writes one value toolloop never writes into one column of the paused operation's
rows: text where JSON, an enum or a timestamp belongs, a number where an object belongs, a
NULL where an id belongs, text that is not UTF-8. Every command that reads the row then stops
with ``TamperedStore``: exit 2, exactly one JSON object under ``--json``, naming the table and
column. ``verify`` answers each store as it did before: exit 20, or for text SQLite cannot
decode, its own "cannot read store" error.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import click
import pytest
from click.testing import CliRunner
from support.clock import FakeClock
from support.stores import approval_of, demo_store
from typer.main import get_command

from toolloop_cli.cli import app
from toolloop_cli.store import open_store

NULL = "NULL"
BAD_JSON = "'{bad'"
NUMBER = "7"
NOT_A_TIME = "'soon'"
NOT_UTF8 = "CAST(X'C3FF' AS TEXT)"
#: the column's own value as a BLOB: pydantic would read it back as the text it holds
BLOB = "CAST($COLUMN AS BLOB)"
#: JSON nested deeper than the decoder goes (a RecursionError, were it not caught)
DEEP = "printf('%.*c', 100000, '[') || printf('%.*c', 100000, ']')"
#: the column's own value with a NUL byte after it (no path or timestamp holds one)
NUL = "$COLUMN || char(0)"
#: counters toolloop never counts: a count as text, as a boolean, below zero
COUNT_AS_TEXT = "json_set($COLUMN, '$.turns', '3')"
COUNT_AS_TRUE = "json_set($COLUMN, '$.turns', json('true'))"
COUNT_BELOW_ZERO = "json_set($COLUMN, '$.input_tokens', -902)"
#: a value JSON has no word for, which Python's decoder would take
NAN = """'{"amount_cents": NaN}'"""
#: a number too large for a float, which Python's decoder would read as infinity
HUGE = """'{"amount_cents": 1e400}'"""
LABELS = {
    NULL: "null",
    BAD_JSON: "bad-json",
    NUMBER: "number",
    NOT_A_TIME: "not-a-time",
    NOT_UTF8: "not-utf8",
    BLOB: "blob",
    DEEP: "deep-json",
    NUL: "nul",
    COUNT_AS_TEXT: "count-as-text",
    COUNT_AS_TRUE: "count-as-true",
    COUNT_BELOW_ZERO: "count-below-zero",
    NAN: "nan",
    HUGE: "huge",
}

#: (table, column) -> values toolloop never writes there. Left out: NULL where the schema
#: refuses it (NOT NULL) or where toolloop writes NULL itself, and a number in an integer
#: column (a valid turn or position).
TAMPERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("operations", "state"): (BAD_JSON, NUMBER, NOT_UTF8, BLOB),
    ("operations", "registry_path"): (NUL,),
    ("operations", "settings_json"): (BAD_JSON, NUMBER, NOT_UTF8, DEEP),
    ("operations", "guards_json"): (BAD_JSON, NUMBER, NOT_UTF8, DEEP),
    ("operations", "counters_json"): (
        BAD_JSON,
        NUMBER,
        NOT_UTF8,
        DEEP,
        COUNT_AS_TEXT,
        COUNT_AS_TRUE,
        COUNT_BELOW_ZERO,
    ),
    ("operations", "divergence_json"): (BAD_JSON, NUMBER, NOT_UTF8),
    ("operations", "source_json"): (BAD_JSON, NUMBER, DEEP),
    ("operations", "current_turn"): (BAD_JSON, NOT_UTF8),
    ("operations", "deadline_at"): (BAD_JSON, NUMBER, NOT_A_TIME, NOT_UTF8),
    ("calls", "state"): (BAD_JSON, NUMBER, NOT_UTF8, BLOB),
    ("calls", "turn_idx"): (BAD_JSON, NOT_UTF8),
    ("calls", "seq"): (BAD_JSON, NOT_UTF8),
    ("calls", "arguments_json"): (BAD_JSON, NUMBER, NOT_UTF8, DEEP, NAN, HUGE),
    ("calls", "model_result_json"): (BAD_JSON, NUMBER, NOT_UTF8, NAN, HUGE),
    ("calls", "protected_audit_json"): (BAD_JSON, NUMBER, NOT_UTF8),
    ("calls", "started_at"): (NUMBER, NOT_A_TIME, NOT_UTF8),
    ("calls", "finished_at"): (NUMBER, NOT_A_TIME, NOT_UTF8),
    ("approvals", "status"): (BAD_JSON, NUMBER, NOT_UTF8, BLOB),
    ("approvals", "requested_at"): (NUMBER, NOT_A_TIME, NUL),
    ("approvals", "expires_at"): (BAD_JSON, NUMBER, NOT_A_TIME, NOT_UTF8),
    ("approvals", "approval_id"): (NULL,),
    ("turns", "idx"): (BAD_JSON, NOT_UTF8),
    ("turns", "outcome"): (BAD_JSON, NUMBER, NOT_UTF8, BLOB),
    ("turns", "usage_json"): (BAD_JSON, NUMBER, NOT_UTF8, DEEP, COUNT_BELOW_ZERO),
    ("turns", "error_json"): (BAD_JSON, NUMBER, NOT_UTF8),
}
CASES = [
    pytest.param(table, column, value, id=f"{table}.{column}={LABELS[value]}")
    for (table, column), values in TAMPERS.items()
    for value in values
]
COMMANDS = ("show", "pending", "resume", "step", "approve", "report", "diff")

#: (table, column, command) where the command never reaches the altered row, and the error
#: type it answers with instead: an approval is found by its id, and listed by its status
NOT_READ = {
    ("approvals", "approval_id", "approve"): "OperationNotFound",
    ("approvals", "approval_id", "resume"): "OperationNotFound",
    ("approvals", "approval_id", "step"): "OperationNotFound",
    ("approvals", "status", "pending"): None,  # nothing is pending: exit 0, no error
}

runner = CliRunner()
#: the app as a click command, built once: typer's own runner builds it again on every call,
#: which is most of what an in-process invocation costs (typer's click is click's API)
command_line = cast(click.Command, get_command(app))


class Demo:
    """The base store (built once) and the ids the commands name."""

    def __init__(self, path: Path, paused: str, other: str, approval: str) -> None:
        self.path = path
        self.paused = paused
        self.other = other
        self.approval = approval

    def args(self, command: str, folder: Path) -> list[str]:
        """``command`` aimed at the paused operation (or its approval)."""
        return {
            "show": ["show", self.paused],
            "pending": ["pending"],
            "resume": ["resume", self.paused],
            "step": ["step", self.paused],
            "approve": ["approve", self.approval, "--as", "ops-lead"],
            "report": ["report", self.paused, "--output", str(folder / "report.html")],
            "diff": ["diff", self.paused, self.other],
            "verify": ["verify"],
        }[command]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    path = tmp_path_factory.mktemp("base") / "store.db"
    ops = demo_store(path, FakeClock(datetime.now(UTC)))  # the CLI runs on the wall clock
    store = open_store(path)
    approval = approval_of(store, ops["paused"])
    store.close()
    return Demo(path, ops["paused"], ops["completed"], approval)


def tampered_copy(demo: Demo, folder: Path, table: str, column: str, value: str) -> Path:
    """A copy of the base store with ``column`` of the paused operation's latest row of
    ``table`` set to ``value`` (an SQL literal), written as anyone with the file could."""
    path = folder / "store.db"
    latest = f"SELECT max(rowid) FROM {table} WHERE operation_id = ?"
    with closing(sqlite3.connect(demo.path)) as base, closing(sqlite3.connect(path)) as copy:
        copy.execute("PRAGMA synchronous = OFF")  # a scratch copy: it need not reach the disk
        base.backup(copy)
        with copy:
            changed = copy.execute(
                f"UPDATE {table} SET {column} = {value.replace('$COLUMN', column)}"
                f" WHERE rowid = ({latest})",
                (demo.paused,),
            ).rowcount
    assert changed == 1, f"no {table} row of {demo.paused}"
    return path


def invoke(demo: Demo, folder: Path, store: Path, command: str) -> tuple[Any, dict[str, Any]]:
    """Run ``command --json`` in-process; the result and the one JSON object it printed."""
    args = [*demo.args(command, folder), "--store", str(store), "--json"]
    result = runner.invoke(command_line, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{command} raised {result.exception!r}"
    )
    for text in (result.stdout, result.stderr):
        assert "Traceback" not in text, text
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"{command} printed {result.stdout!r}"
    out: dict[str, Any] = json.loads(lines[0])
    return result, out


@pytest.mark.parametrize(("table", "column", "value"), CASES)
def test_each_command_refuses_a_tampered_column_by_name(
    demo: Demo, tmp_path: Path, table: str, column: str, value: str
) -> None:
    for command in COMMANDS:  # each on its own copy: one that writes cannot hide from the next
        folder = tmp_path / command
        folder.mkdir()
        store = tampered_copy(demo, folder, table, column, value)
        result, out = invoke(demo, folder, store, command)
        if (table, column, command) in NOT_READ:
            expected = NOT_READ[table, column, command]
            assert out.get("error_type") == expected, (command, out)
            assert result.exit_code == (0 if expected is None else 2), (command, out)
            continue
        assert result.exit_code == 2, (command, out)
        assert out["error_type"] == "TamperedStore", (command, out)
        assert f"{table}.{column}" in out["error"], (command, out)


@pytest.mark.parametrize(("table", "column", "value"), CASES)
def test_verify_still_reports_the_tampered_column(
    demo: Demo, tmp_path: Path, table: str, column: str, value: str
) -> None:
    store = tampered_copy(demo, tmp_path, table, column, value)
    result, out = invoke(demo, tmp_path, store, "verify")
    if value == NOT_UTF8:  # verify's own answer to text SQLite cannot decode: unreadable store
        assert result.exit_code == 2 and out["error_type"] == "StoreError", out
        assert f"column '{column}'" in out["error"], out
        return
    assert result.exit_code == 20, out
    assert not out["ok"]


def test_the_message_names_the_row_the_value_and_verify(demo: Demo, tmp_path: Path) -> None:
    store = tampered_copy(demo, tmp_path, "calls", "state", "'BOGUS'")
    result, out = invoke(demo, tmp_path, store, "show")
    assert result.exit_code == 2
    assert f"of operation {demo.paused}: calls.state holds 'BOGUS'" in out["error"]
    assert "toolloop verify" in out["error"]
    human = runner.invoke(command_line, ["show", demo.paused, "--store", str(store)])
    assert human.exit_code == 2 and human.stdout == ""
    assert len(human.stderr.strip().splitlines()) == 1, human.stderr
    assert "calls.state holds 'BOGUS'" in human.stderr


def test_a_long_value_is_shown_cut_short(demo: Demo, tmp_path: Path) -> None:
    store = tampered_copy(demo, tmp_path, "operations", "state", "'" + "X" * 5000 + "'")
    result, out = invoke(demo, tmp_path, store, "show")
    assert result.exit_code == 2 and out["error_type"] == "TamperedStore"
    assert "operations.state holds 'XXX" in out["error"]
    assert len(out["error"]) < 500


def test_a_timestamp_the_engine_parses_later_is_refused_when_read(
    demo: Demo, tmp_path: Path
) -> None:
    store = tampered_copy(demo, tmp_path, "operations", "deadline_at", NOT_A_TIME)
    result, out = invoke(demo, tmp_path, store, "show")  # show itself never parses it
    assert result.exit_code == 2
    assert "operations.deadline_at holds 'soon'" in out["error"]


def test_text_that_is_not_utf8_is_named_without_echoing_it(demo: Demo, tmp_path: Path) -> None:
    escape_then_bad = "CAST(X'1B5B33316DC3FF' AS TEXT)"  # ESC[31m, then bytes that are not UTF-8
    store = tampered_copy(demo, tmp_path, "operations", "task", escape_then_bad)
    result, out = invoke(demo, tmp_path, store, "show")
    assert result.exit_code == 2 and out["error_type"] == "TamperedStore"
    assert "operations.task holds text that is not UTF-8" in out["error"]
    assert "\x1b" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("table", "column"),
    [("calls", "call_id"), ("calls", "operation_id"), ("approvals", "call_id")],
)
def test_verify_reports_an_id_column_holding_bytes_as_text(
    demo: Demo, tmp_path: Path, table: str, column: str
) -> None:
    """A report is text: an id that is not (a blob in an id column) is shown by its repr."""
    store = tampered_copy(demo, tmp_path, table, column, "X'C3FF00'")
    result, out = invoke(demo, tmp_path, store, "verify")
    assert result.exit_code == 20, out
    assert not out["ok"] and out["mismatches"]


@pytest.mark.parametrize("value", [NOT_A_TIME, NUMBER])
@pytest.mark.parametrize("column", ["at", "source", "target", "kind"])
def test_a_tampered_state_log_entry_is_refused_by_name_where_it_is_read(
    demo: Demo, tmp_path: Path, column: str, value: str
) -> None:
    """The state log times the report and the traces: an entry toolloop never writes is a
    ``TamperedStore`` naming ``transitions.<column>``, before anything is written or sent."""
    store = tampered_copy(demo, tmp_path, "transitions", column, value)
    report = tmp_path / "report.html"
    for args in (
        ["report", demo.paused, "--output", str(report)],
        ["export-otel", demo.paused, "--endpoint", "http://127.0.0.1:9"],
    ):
        result = runner.invoke(command_line, [*args, "--store", str(store), "--json"])
        out = json.loads(result.stdout)
        assert result.exit_code == 2, (args, out)
        assert out["error_type"] == "TamperedStore", (args, out)
        assert f"transitions.{column}" in out["error"], (args, out)
    assert not report.exists()
