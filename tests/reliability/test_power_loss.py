"""A power loss loses at most what was committed since the last barrier, and nothing it loses
can double or hide a side effect.

Under the default durability (``barriers``) ordinary commits are not fsynced; the WAL is
fsynced at the commits a guarantee rests on: a side effect's intent, a human decision, a pause
for a person and an end. A power loss is simulated by snapshotting the store's files at each
barrier (what is then on disk for certain) and restoring a snapshot after later commits were
made. The downstream ledger is the outside world: it keeps every effect that happened before
the power went, so a restored store is paired with the ledger as it stood at its own barrier
and as it stood at the next one (every effect in between happened after an intent that is,
being a barrier, in the restored store).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.harness.oracles import ledger_problems, verify_problems
from support.harness.scenario import (
    FixedClock,
    Scenario,
    drive,
    refund50_scenario,
    refund_scenario,
)

from toolloop_cli.engine.states import OpState, is_terminal
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import Store, open_store

pytestmark = pytest.mark.timeout(600)

#: the files of a store and of the refund ledger beside it (SQLite keeps ``-shm`` rebuildable)
FILES = ("store.db", "store.db-wal", "payments.db", "payments.db-wal")


def _copy(files: Path, into: Path, names: tuple[str, ...]) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (files / name).exists():
            shutil.copyfile(files / name, into / name)


def _run_with_snapshots(scenario: Scenario, folder: Path, snaps: Path) -> list[Path]:
    """Drive ``scenario`` to its end in one process, copying every file at each barrier."""
    taken: list[Path] = []
    store = open_store(folder / "store.db")

    def snapshot() -> None:
        target = snaps / f"{len(taken):03d}"
        _copy(folder, target, FILES)
        taken.append(target)

    store.on_barrier = snapshot
    try:
        _operate(store, scenario)
    finally:
        store.close()
    return taken


def _operate(store: Store, scenario: Scenario) -> None:
    clock = FixedClock()
    op_id = operations.start(store, scenario.options(), clock=clock).operation.operation_id
    for _ in range(100):
        op = store.get_operation(op_id)
        if is_terminal(op.state):
            assert op.state is OpState.COMPLETED, op.reason
            return
        for apr in store.pending_approvals():
            approvals.approve(store, apr.approval_id, scenario.approver, clock=clock)
        operations.resume(store, op_id, clock=clock)
    raise AssertionError("the scenario did not end")


def _restore(store_at: Path, ledger_at: Path, into: Path) -> Path:
    _copy(store_at, into, ("store.db", "store.db-wal"))
    _copy(ledger_at, into, ("payments.db", "payments.db-wal"))
    return into / "store.db"


def _recover(scenario: Scenario, snaps: list[Path], tmp: Path, every: int) -> list[str]:
    """Each kept snapshot, with the ledger of its barrier and of the next one: sound, and
    driven to the end with every effect exactly once."""
    problems: list[str] = []
    for k in range(0, len(snaps), every):
        for world in {snaps[k], snaps[min(k + 1, len(snaps) - 1)]}:
            case = f"store at barrier {k}, ledger at barrier {snaps.index(world)}"
            path = _restore(snaps[k], world, tmp / f"{k:03d}-{snaps.index(world):03d}")
            # before anything runs: the restored store verifies, and holds every intent whose
            # effect happened (intents are barriers)
            problems += [f"{case}: {p}" for p in verify_problems(path) + ledger_problems(path)]
            ended = drive(path, scenario)
            if ended.state is not OpState.COMPLETED:
                problems.append(f"{case}: ended {ended.state.value}")
            problems += [f"{case}, resumed: {p}" for p in verify_problems(path)]
            problems += [f"{case}, resumed: {p}" for p in ledger_problems(path)]
    return problems


def test_a_refund_cut_back_to_any_barrier_resumes_with_each_refund_exactly_once(
    tmp_path: Path,
) -> None:
    scenario = refund_scenario()
    snaps = _run_with_snapshots(scenario, tmp_path / "run", tmp_path / "snaps")
    # the refund's intent, the decision, the pause and the end are barriers; the lookup's
    # turns are not
    assert 4 <= len(snaps) <= 6, len(snaps)
    assert _recover(scenario, snaps, tmp_path / "cases", every=1) == []


def test_the_50_call_run_cut_back_to_its_barriers_loses_and_repeats_no_effect(
    tmp_path: Path,
) -> None:
    """24 drafts and 24 submissions (each approved): a power loss after any barrier."""
    scenario = refund50_scenario(tmp_path)
    snaps = _run_with_snapshots(scenario, tmp_path / "run", tmp_path / "snaps")
    assert len(snaps) >= 24  # one per decision at least; intents are barriers per batch
    assert _recover(scenario, snaps, tmp_path / "cases", every=5) == []


def test_under_full_durability_every_commit_is_synchronous(tmp_path: Path) -> None:
    assert open_store(tmp_path / "a.db").conn.execute("PRAGMA synchronous").fetchone() == (1,)
    full = open_store(tmp_path / "b.db", durability="full")
    assert full.conn.execute("PRAGMA synchronous").fetchone() == (2,)
