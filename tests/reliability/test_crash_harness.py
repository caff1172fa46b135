"""Crash harness: SIGKILL at every boundary and at random times.

Each case runs the refund scenario in a forked child that dies at a failpoint (or at a
random moment), then resumes until the operation is terminal, and checks the oracles:
the crashed store is a state an uninterrupted run commits (its signature), the SQLite file
is sound, ``verify`` finds nothing, no intent has more than one effect, every approved
submission that happened has exactly one, and no approval decided before the kill is lost.
Counts: CI / ``TOOLLOOP_SOAK=1`` (see README "Guarantees").
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support.harness import oracles
from support.harness.children import fork_call, pool_map
from support.harness.scenario import (
    Scenario,
    drive,
    refund50_scenario,
    refund50_serial_scenario,
    refund_scenario,
)
from support.harness.signature import recording_commits, signature
from support.harness.stores import StoreMaker, rows_of

from toolloop_cli.engine import executing as executing_step
from toolloop_cli.engine.context import Deps, call_to
from toolloop_cli.engine.records import CallRecord, OperationRecord
from toolloop_cli.engine.states import CallState
from toolloop_cli.store import open_store
from toolloop_cli.store.db import DATA_DIR_ENV
from toolloop_cli.wiring import failpoints

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"
pytestmark = pytest.mark.timeout(3600 if SOAK else 900)
#: kills at random times: CI / soak
RANDOM_KILLS = 2000 if SOAK else 200
SEEDS = (1, 2, 3) if SOAK else (1,)
SQLITE = StoreMaker()


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """Stores live on tmpfs when there is one: a kill case commits a few hundred times."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="toolloop-crash-", dir=shm if shm.is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Reference:
    """An uninterrupted run: how often it meets each failpoint, every state it commits."""

    hits: collections.Counter[str]
    legal: set[str]
    seconds: float


def reference_run(
    scenario: Scenario,
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_store: StoreMaker = SQLITE,
) -> Reference:
    folder = Path(tempfile.mkdtemp(dir=base))
    store = make_store(folder)
    hits: collections.Counter[str] = collections.Counter()

    def count(name: str) -> None:
        hits[name] += 1

    monkeypatch.delenv("TOOLLOOP_FAILPOINT", raising=False)
    open_store(store).close()
    legal = {signature(store)}
    with monkeypatch.context() as patch, recording_commits(monkeypatch) as commits:
        patch.setattr(failpoints, "failpoint", count)
        patch.setattr(failpoints, "hit", count)
        started = time.perf_counter()
        assert drive(store, scenario).state.value == "COMPLETED"
        seconds = time.perf_counter() - started
    legal.update(commits)
    assert oracles.all_problems(store) == []
    shutil.rmtree(folder)
    return Reference(hits, legal, seconds)


def executing(store: Path) -> list[tuple[str, str]]:
    rows = rows_of(
        store, "SELECT call_id, name FROM calls WHERE state = 'EXECUTING' ORDER BY turn_idx, seq"
    )
    return [(r[0], r[1]) for r in rows]


def final_calls(store: Path) -> dict[str, CallRecord]:
    s = open_store(store)
    try:
        (op,) = s.list_operations()
        return {c.call_id: c for c in s.calls(op.operation_id)}
    finally:
        s.close()


def kill_case(
    scenario: Scenario, base: Path, ref: Reference, make_store: StoreMaker = SQLITE
) -> Callable[[tuple[str, int]], dict[str, Any]]:
    """Kill at ``name:nth``, check the crashed store, resume to the end, check again."""

    def run(case: tuple[str, int]) -> dict[str, Any]:
        name, nth = case
        folder = Path(tempfile.mkdtemp(dir=base))
        store = make_store(folder)
        problems: list[str] = []
        code = fork_call(lambda: drive(store, scenario), failpoint=f"{name}:{nth}")
        if code != -signal.SIGKILL:
            problems.append(f"the child was not killed (status {code})")
        if signature(store) not in ref.legal:
            problems.append("the crashed store is not a state an uninterrupted run commits")
        problems += oracles.verify_problems(store)
        before = oracles.decisions(store)
        in_flight = executing(store)
        done = drive(store, scenario)
        problems += oracles.all_problems(store) + oracles.lost_decisions(before, store)
        states = {cid: c.state.value for cid, c in final_calls(store).items()}
        shutil.rmtree(folder)
        return {
            "case": f"{name}:{nth}",
            "problems": problems,
            "final": done.state.value,
            "in_flight": in_flight,
            "states": states,
        }

    return run


def cases(ref: Reference, limit: int = 50) -> list[tuple[str, int]]:
    """Every failpoint the run meets, at each hit, or at ``limit`` hits spread over the run."""
    return [(name, nth) for name in failpoints.FAILPOINTS for nth in spread(ref.hits[name], limit)]


def spread(hits: int, limit: int) -> list[int]:
    """``1..hits``, or ``limit`` of them evenly spaced from the first to the last."""
    if hits <= limit:
        return list(range(1, hits + 1))
    return [1 + round(k * (hits - 1) / (limit - 1)) for k in range(limit)]


def test_the_scenarios_meet_every_boundary_a_run_without_an_escalation_has(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = reference_run(refund50_scenario(base), base, monkeypatch)
    met = {name for name, n in ref.hits.items() if n}
    # the other two are met only after a crash (recovery) or an escalation (forced continue)
    assert met == set(failpoints.FAILPOINTS) - {
        "after_recover_commit",
        "after_force_continue_commit",
    }
    assert ref.hits["after_effect_before_result_commit"] == 50
    assert ref.hits["after_approval_commit"] == 24


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_kill_at_every_boundary_of_the_refund_loses_and_repeats_nothing(
    base: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, backend: str
) -> None:
    make_store = SQLITE
    if backend == "postgresql":
        monkeypatch.setenv(DATA_DIR_ENV, str(base))  # each case points it at its own folder
        make_store = StoreMaker(request.getfixturevalue("postgres_server"))
    scenario = refund_scenario()
    ref = reference_run(scenario, base, monkeypatch, make_store)
    rows = pool_map(kill_case(scenario, base, ref, make_store), cases(ref))
    assert [p for row in rows for p in (f"{row['case']}: {x}" for x in row["problems"])] == []
    assert {row["final"] for row in rows} == {"COMPLETED"}
    assert len(rows) == sum(ref.hits.values())


def kill_matrix(scenario: Scenario, base: Path, at_least: int) -> list[dict[str, Any]]:
    """``scenario`` killed at every failpoint x every hit (shuffled per seed), resumed."""
    rows: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        ref = reference_run(scenario, base, monkeypatch)
    for seed in SEEDS:
        todo = cases(ref)
        assert len(todo) == sum(min(n, 50) for n in ref.hits.values()) >= at_least
        random.Random(seed).shuffle(todo)
        rows += pool_map(kill_case(scenario, base, ref), todo)
    return rows


@pytest.fixture(scope="module")
def matrix50(base: Path) -> list[dict[str, Any]]:
    """The 50 calls in 7 turns (batches of 12): 174 kill points."""
    return kill_matrix(refund50_scenario(base), base, at_least=170)


def test_a_kill_at_every_boundary_of_the_50_call_run_loses_and_repeats_nothing(
    matrix50: list[dict[str, Any]],
) -> None:
    assert [p for row in matrix50 for p in (f"{row['case']}: {x}" for x in row["problems"])] == []
    assert len(matrix50) >= 170 * len(SEEDS)
    # an unreconcilable draft ends ESCALATED and the operator continues: still terminal
    assert {row["final"] for row in matrix50} == {"COMPLETED"}


def test_a_kill_at_every_boundary_of_the_50_turn_run_loses_and_repeats_nothing(
    base: Path,
) -> None:
    """The same 50 calls one per turn: each per-turn boundary at each call index (325 kills)."""
    rows = kill_matrix(refund50_serial_scenario(base), base, at_least=320)
    assert [p for row in rows for p in (f"{row['case']}: {x}" for x in row["problems"])] == []
    assert len(rows) >= 320 * len(SEEDS)
    assert {row["final"] for row in rows} == {"COMPLETED"}
    killed = collections.Counter(row["case"].split(":")[0] for row in rows)
    assert all(killed[name] >= 50 * len(SEEDS) for name in PER_CALL), killed


#: the boundaries the 50-turn run meets once per call (at least)
PER_CALL = (
    "before_model_request",
    "after_turn_commit",
    "after_intent_commit",
    "after_effect_before_result_commit",
    "after_result_commit",
    "after_step_commit",
)


def test_a_kill_between_effect_and_result_is_reconciled_by_the_same_key(
    matrix50: list[dict[str, Any]], base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plan 1c: the LangGraph #8039 window, once for each of the 50 calls (x10 in soak)."""
    rows = [r for r in matrix50 if r["case"].startswith("after_effect_before_result_commit:")]
    if SOAK:
        scenario = refund50_scenario(base)
        ref = reference_run(scenario, base, monkeypatch)
        todo = [("after_effect_before_result_commit", n) for n in range(1, 51)] * 10
        rows = pool_map(kill_case(scenario, base, ref), todo)
    assert [p for row in rows for p in (f"{row['case']}: {x}" for x in row["problems"])] == []
    expected = {
        "get_order": "SUCCEEDED",  # a read is simply run again
        "submit_refund": "RECONCILED",  # the ledger's saved result for the same key
        "create_refund_draft": "FAILED",  # no reconcile: ESCALATED, then continued as unknown
    }
    held = [r for r in rows if not r["in_flight"]]
    for row in rows:
        if row in held:
            continue
        # intents are committed per batch: the first one still EXECUTING is the killed call
        call_id, name = row["in_flight"][0]
        assert row["states"][call_id] == expected[name], row["case"]
    # a batch of reads commits its intents with its results: killed in between, nothing of
    # the turn was committed, so nothing is in flight, and the read ran again (the first and
    # the last of the 50 calls are the run's two reads, each alone in its turn)
    assert {int(r["case"].split(":")[1]) for r in held} == {1, 50}
    assert all(set(r["states"].values()) == {"SUCCEEDED"} for r in held), held
    reconciled = [r for r in rows if r["in_flight"] and r["in_flight"][0][1] == "submit_refund"]
    assert len(reconciled) == 24 * (10 if SOAK else len(SEEDS))


def test_kills_at_random_times_leave_a_store_that_resumes_to_the_end(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plan 1b: uniform random kill times over a run, nested kills during resume (p=0.3)."""
    scenario = refund50_scenario(base, max_parallel=4)
    monkeypatch.delenv("TOOLLOOP_FAILPOINT", raising=False)
    timings = []
    for _ in range(3):  # the median of three uninterrupted runs, each in a fresh child
        store = Path(tempfile.mkdtemp(dir=base)) / "store.db"
        started = time.perf_counter()
        assert fork_call(partial(drive, store, scenario)) == 0
        timings.append(time.perf_counter() - started)
    t_run = sorted(timings)[1]

    def run(seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        folder = Path(tempfile.mkdtemp(dir=base))
        store = folder / "store.db"
        problems: list[str] = []
        kills = 0
        for _ in range(4):
            before = oracles.decisions(store)
            code = fork_call(lambda: drive(store, scenario), kill_after_s=rng.uniform(0, t_run))
            kills += code == -signal.SIGKILL
            problems += oracles.verify_problems(store) + oracles.lost_decisions(before, store)
            if code == 0 or rng.random() >= 0.3:
                break
        done = drive(store, scenario)
        if done.resumes > 5 + 2:  # two of them are the approval rounds
            problems.append(f"{done.resumes} resumes to reach {done.state.value}")
        problems += oracles.all_problems(store)
        shutil.rmtree(folder)
        return {"case": seed, "problems": problems, "kills": kills, "final": done.state.value}

    rows = pool_map(run, list(range(RANDOM_KILLS)))
    assert [p for row in rows for p in (f"{row['case']}: {x}" for x in row["problems"])] == []
    assert sum(row["kills"] for row in rows) >= RANDOM_KILLS * 0.5
    assert {row["final"] for row in rows} <= {"COMPLETED", "ESCALATED"}


# -- negative controls: the harness can fail --------------------------------------------------


def _run_batch_without_intent(
    deps: Deps, op: OperationRecord, batch: list[CallRecord]
) -> tuple[OperationRecord, list[CallRecord], list[Any]]:
    """The loop without a write-ahead intent: the call is marked running with its result."""
    ended = []
    for call in batch:
        assert call.arguments is not None
        execution = deps.toolbox.execute(
            call.name, call.arguments, executing_step._context(deps, op, call)
        )
        deps.failpoint("after_effect_before_result_commit")
        with deps.store.transaction(before_wait=True):  # as the loop commits an effect's result
            running = call_to(deps, call, CallState.EXECUTING, "no intent")
            ended.append(executing_step._record_execution(deps, op, running, execution))
    return op, ended, []


def test_control_without_the_intent_write_the_harness_finds_a_repeated_effect(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = refund50_scenario(base)
    ref = reference_run(scenario, base, monkeypatch)
    monkeypatch.setattr(executing_step, "_run_batch", _run_batch_without_intent)
    # the 2nd..4th calls are refund drafts: a downstream with no idempotency of its own
    rows = pool_map(
        kill_case(scenario, base, ref),
        [("after_effect_before_result_commit", n) for n in (2, 3, 4)],
    )
    found = [p for row in rows for p in row["problems"]]
    assert sum("2 drafts of" in p for p in found) == 3, found


def test_control_a_half_written_state_change_is_not_a_legal_store(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = refund_scenario()
    ref = reference_run(scenario, base, monkeypatch)
    folder = Path(tempfile.mkdtemp(dir=base))
    store = folder / "store.db"
    assert fork_call(lambda: drive(store, scenario), failpoint="after_result_commit:2") == -9
    assert signature(store) in ref.legal
    with closing(sqlite3.connect(store)) as conn:  # a call's new state without its transition
        conn.execute("UPDATE calls SET state = 'SUCCEEDED' WHERE state = 'APPROVED'")
        conn.execute(
            "UPDATE calls SET state = 'FAILED' WHERE rowid = (SELECT max(rowid) FROM calls)"
        )
        conn.commit()
    assert signature(store) not in ref.legal
    assert oracles.verify_problems(store) != []


def test_control_a_lost_decision_is_reported(base: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir=base))
    store = folder / "store.db"
    assert (
        fork_call(lambda: drive(store, refund_scenario()), failpoint="after_approval_commit") == -9
    )
    before = oracles.decisions(store)
    assert len(before) == 1
    with closing(sqlite3.connect(store)) as conn:
        conn.execute("UPDATE approvals SET status = 'PENDING', decided_by = NULL")
        conn.commit()
    assert oracles.lost_decisions(before, store) != []
