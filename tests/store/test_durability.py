"""Durability is chosen per process: barriers by default, every commit fsynced on request."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Invoke
from support.clock import FakeClock
from support.stores import approval_of, start

from toolloop_cli.errors import StoreError
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store


def _sync(path: Path) -> int:
    store = open_store(path)
    try:
        return int(store.conn.execute("PRAGMA synchronous").fetchone()[0])
    finally:
        store.close()


def test_the_environment_chooses_full_durability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sync(tmp_path / "a.db") == 1  # NORMAL, with barriers
    monkeypatch.setenv("TOOLLOOP_DURABILITY", "full")
    assert _sync(tmp_path / "b.db") == 2  # FULL


def test_an_unknown_durability_is_refused_with_the_names_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLLOOP_DURABILITY", "sometimes")
    with pytest.raises(StoreError, match="unknown durability 'sometimes'.*barriers, full"):
        open_store(tmp_path / "a.db")
    assert not (tmp_path / "a.db").exists()


def test_the_cli_flag_reaches_the_store(cli: Invoke, store_path: Path) -> None:
    refused = cli("--durability", "sometimes", "runs")
    assert refused.exit_code == 2
    open_store(str(store_path)).close()  # `runs` reads a store, it creates none
    assert cli("--durability", "full", "runs").exit_code == 0


def test_barriers_fall_on_the_commits_a_guarantee_rests_on(tmp_path: Path) -> None:
    """On the refund demo: the draft's intent (a write), the pause for approval, the decision,
    the refund's intent and the end; the look-up (a read) and the model's answers are
    ordinary commits."""
    store = open_store(tmp_path / "store.db")
    barriers: list[tuple[str, str]] = []

    def last_transition() -> None:
        sql = "SELECT kind, target FROM transitions ORDER BY id DESC LIMIT 1"
        kind, target = store.conn.execute(sql).fetchone()
        barriers.append((kind, target))

    store.on_barrier = last_transition
    clock = FakeClock()
    op_id = start(store, clock)  # runs to the pause
    approvals.approve(store, approval_of(store, op_id), "ops-lead", clock=clock)
    operations.resume(store, op_id, clock=clock)
    assert barriers == [
        ("call", "EXECUTING"),  # the draft's intent
        ("operation", "WAITING_APPROVAL"),  # the pause for a person
        ("approval", "APPROVED"),  # the decision
        ("call", "EXECUTING"),  # the refund's intent
        ("operation", "COMPLETED"),  # the end
    ]
    commits = store.conn.execute("SELECT count(*) FROM audit_log").fetchone()[0]
    assert commits > 2 * len(barriers)  # one batch record per commit: most are not barriers
