"""The Datasette recipe: views ``v_operations``, ``v_calls`` and ``v_approvals`` in every store.

They are made by the ``report_views`` migration, read only columns of the first schema, and
are not audited tables: ``verify`` still passes on a store that has them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import BRANCHES, completed_run, replay, toolloop
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations
from support.paths import REFUND_OPENAI
from support.stores import sqlite_of

from toolloop_cli.store import migrations, open_store
from toolloop_cli.store.db import connect

VIEWS = ("v_approvals", "v_calls", "v_operations")
SQLITE_UTILS = Path(sys.executable).parent / "sqlite-utils"


def test_a_new_store_has_the_views_and_records_their_migration(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    db = Database(sqlite_of(store))
    assert sorted(db.view_names()) == list(VIEWS)
    applied = [m.name for m in migrations.migrations.applied(db)]
    assert applied.count("report_views") == 1
    for view in VIEWS:
        assert list(db.query(f"SELECT * FROM {view}")) == []


def test_the_views_return_the_refund_demo_and_sqlite_utils_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    op_id = completed_run(path, REFUND_OPENAI)  # make demo, then approve --resume
    shown = json.loads(toolloop(path, "show", op_id, "--json").stdout)
    db = Database(path)

    (operation,) = db.query("SELECT * FROM v_operations")
    assert operation["operation_id"] == op_id
    assert operation["state"] == "COMPLETED"
    assert operation["final_text"] == shown["final_text"]
    assert (operation["api"], operation["registry"]) == ("openai/responses", "refunds@2026-12-01.1")
    assert (operation["turns"], operation["tool_calls"], operation["calls"]) == (4, 3, 3)
    assert operation["pending_approvals"] == 0

    calls = list(db.query("SELECT * FROM v_calls ORDER BY turn, seq"))
    assert [c["tool"] for c in calls] == ["get_order", "create_refund_draft", "submit_refund"]
    assert [c["state"] for c in calls] == ["SUCCEEDED"] * 3
    assert [c["outcome"] for c in calls] == ["ok"] * 3
    assert json.loads(calls[2]["arguments"]) == {"order_id": "ord_1001", "amount_cents": 4999}
    assert json.loads(calls[2]["result_summary"])["refund_id"] == "rf_1001_1"
    assert calls[2]["approver"] == "ops-lead" and calls[2]["approval_status"] == "APPROVED"
    assert calls[0]["approver"] is None
    assert [c["idempotency_key"] for c in calls] == [c["idempotency_key"] for c in shown["calls"]]

    (approval,) = db.query("SELECT * FROM v_approvals")
    (expected,) = shown["approvals"]
    assert approval["approval_id"] == expected["approval_id"]
    assert (approval["tool"], approval["status"], approval["approver"]) == (
        "submit_refund",
        "APPROVED",
        "ops-lead",
    )
    assert approval["expires_at"] == expected["expires_at"]
    assert json.loads(approval["arguments"]) == {"order_id": "ord_1001", "amount_cents": 4999}

    # the recipe's own command line
    out = subprocess.run(
        [str(SQLITE_UTILS), "query", str(path), "select tool, state, approver from v_calls"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == [
        {"tool": "get_order", "state": "SUCCEEDED", "approver": None},
        {"tool": "create_refund_draft", "state": "SUCCEEDED", "approver": None},
        {"tool": "submit_refund", "state": "SUCCEEDED", "approver": "ops-lead"},
    ]
    assert toolloop(path, "verify").exit_code == 0  # views are not audited tables


def test_an_error_result_is_summarised_by_its_code(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    replay(path, BRANCHES / "unknown_tool.yaml")
    (invalid,) = Database(path).query("SELECT * FROM v_calls WHERE state = 'INVALID'")
    assert invalid["outcome"] == "error"
    assert invalid["result_summary"].startswith("unknown_tool: ")


def test_the_migration_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    completed_run(path)
    store = open_store(path)
    db = Database(sqlite_of(store))
    before = list(db.query("SELECT * FROM v_calls"))
    with store.transaction():
        migrations._report_views(db)  # run again by hand: it replaces, never fails
    migrations.apply(db)  # and through the migration set: nothing pending
    assert list(db.query("SELECT * FROM v_calls")) == before
    assert [m.name for m in migrations.migrations.applied(db)].count("report_views") == 1
    assert toolloop(path, "verify").exit_code == 0


@pytest.mark.parametrize("position", ["right after the first schema", "last"])
def test_the_views_do_not_depend_on_the_order_of_the_other_migrations(
    tmp_path: Path, position: str
) -> None:
    """Another migration may land before or after this one: the result is the same store."""
    every = migrations.migrations._migrations
    mine = next(m for m in every if m.name == "report_views")
    others = [m for m in every if m is not mine]
    order = [others[0], mine, *others[1:]] if position != "last" else [*others, mine]
    reordered = Migrations("toolloop")
    for step in order:
        reordered(name=step.name)(step.fn)
    path = tmp_path / "store.db"
    db = Database(connect(path))
    reordered.apply(db)
    db.conn.close()
    assert migrations.migrations.pending(Database(connect(path))) == []
    op_id = completed_run(path)  # the engine runs on it as on any store
    (row,) = Database(path).query("SELECT operation_id, state FROM v_operations")
    assert row == {"operation_id": op_id, "state": "COMPLETED"}
    assert toolloop(path, "verify").exit_code == 0
