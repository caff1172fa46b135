"""``toolloop worker`` on a shared PostgreSQL store: submitted operations are run by workers,
approvals decided elsewhere wake them (LISTEN/NOTIFY), and a worker killed mid-run leaves
work that the next worker finishes with no refund made twice and a clean audit chain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import pytest
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.postgres import Server
from support.stores import behind_its_back
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.errors import StoreError
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals
from toolloop_cli.service.verify import verify_store
from toolloop_cli.service.worker import WorkerOptions, run_worker
from toolloop_cli.store import open_store, pg_settings
from toolloop_cli.store.pg_pool import PgStorePool

T = TypeVar("T")


def submit(url: str, count: int, env: dict[str, str]) -> list[str]:
    runner = CliRunner()
    ids = []
    for _ in range(count):
        args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
        result = runner.invoke(app, [*args, "--detach", "--store", url], env=env)
        assert result.exit_code == 0, result.output
        ids.append(result.stdout.strip())
    return ids


def states(url: str, ids: list[str]) -> dict[str, str]:
    store = open_store(url)
    try:
        return {op: store.get_operation(op).state.value for op in ids}
    finally:
        store.close()


def test_submitted_operations_are_run_by_workers_and_resumed_once_approved(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"TOOLLOOP_DATA_DIR": str(tmp_path / "data")}
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", env["TOOLLOOP_DATA_DIR"])  # for run_worker here
    ids = submit(postgres_url, 4, env)
    assert set(states(postgres_url, ids).values()) == {"MODEL_REQUESTED"}  # nothing ran

    stats = run_worker(WorkerOptions(postgres_url, concurrency=2, drain=True, poll_s=0.2))
    assert stats.taken == 4
    assert set(states(postgres_url, ids).values()) == {"WAITING_APPROVAL"}

    store = open_store(postgres_url)
    for apr in store.pending_approvals():
        approvals.approve(store, apr.approval_id, "ops-lead")
    stats = run_worker(WorkerOptions(postgres_url, concurrency=2, drain=True, poll_s=0.2))
    assert stats.ended == {"COMPLETED": 4}
    assert set(states(postgres_url, ids).values()) == {"COMPLETED"}
    refunds = ledger_refunds(tmp_path / "data" / "payments.db")
    assert len(refunds) == 1  # ord_1001 is refunded once; the others find it refunded
    report = verify_store(store)
    assert report.ok, report.mismatches


def test_a_worker_killed_mid_run_leaves_work_the_next_worker_finishes_exactly_once(
    tmp_path: Path, postgres_url: str
) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "TOOLLOOP_DATA_DIR": str(data)}
    ids = submit(postgres_url, 12, {"TOOLLOOP_DATA_DIR": str(data)})
    store = open_store(postgres_url)
    cmd = [sys.executable, "-m", "toolloop_cli", "worker", "--store", postgres_url, "--poll", "0.2"]
    kills = 0
    for _ in range(6):  # kill a running worker at a different point each time
        worker = subprocess.Popen(
            [*cmd, "--concurrency", "2"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.4 + 0.3 * kills)
        for apr in store.pending_approvals():  # decided while the worker runs: NOTIFY wakes it
            approvals.approve(store, apr.approval_id, "ops-lead")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        kills += 1
    for apr in store.pending_approvals():
        approvals.approve(store, apr.approval_id, "ops-lead")
    for _ in range(3):  # a drained worker may leave ops that paused for approval: decide, again
        finish = subprocess.run([*cmd, "--drain", "--json"], env=env, capture_output=True)
        assert finish.returncode == 0, finish.stderr
        for apr in store.pending_approvals():
            approvals.approve(store, apr.approval_id, "ops-lead")
    # a kill while a refund draft ran (a write with no reconcile) escalates its operation:
    # the outcome is unknown, and a person continues it explicitly; it may then pause for
    # the refund's approval (exit 10), decided and run like the others
    for op, state in states(postgres_url, ids).items():
        if state == "ESCALATED":
            forced = subprocess.run(
                [*cmd[:3], "resume", op, "--force-continue", "--as", "ops-lead"]
                + ["--store", postgres_url],
                env=env,
                capture_output=True,
            )
            assert forced.returncode in (0, 10), forced.stderr
    for apr in store.pending_approvals():
        approvals.approve(store, apr.approval_id, "ops-lead")
    finish = subprocess.run([*cmd, "--drain", "--json"], env=env, capture_output=True)
    assert finish.returncode == 0, finish.stderr
    assert set(states(postgres_url, ids).values()) == {"COMPLETED"}
    refunds = ledger_refunds(data / "payments.db")
    keys = [r["idempotency_key"] for r in refunds]
    assert len(keys) == len(set(keys)) == 1  # one refund of ord_1001, never a second
    report = verify_store(store)
    assert report.ok, report.mismatches


def test_an_operation_a_worker_cannot_run_is_passed_over_and_a_drain_ends(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One submitted operation written around toolloop (its task changed) is refused on
    every take: the worker counts it, names it, never takes it again, runs the others, and a
    drain ends instead of taking the same one for ever."""
    url = str(store_path)
    env = {"TOOLLOOP_DATA_DIR": str(tmp_path / "data")}
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", env["TOOLLOOP_DATA_DIR"])
    bad, *good = submit(url, 3, env)
    with behind_its_back(url) as conn:
        conn.execute("UPDATE operations SET task = 'something else' WHERE operation_id = ?", (bad,))
    said: list[tuple[str, str]] = []
    options = WorkerOptions(url, concurrency=1, drain=True, poll_s=0.05)
    stats = run_worker(options, on_taken=lambda op, state: said.append((op, state)))
    assert (stats.failed, stats.not_run, stats.taken) == (1, {bad}, 2)
    assert states(url, good) == dict.fromkeys(good, "WAITING_APPROVAL")
    assert states(url, [bad]) == {bad: "MODEL_REQUESTED"}  # left as stored
    ((op, why),) = [s for s in said if s[0] == bad]
    assert why.startswith("not run: operation ") and "task not as the audit log" in why


def test_an_approval_whose_status_is_stored_as_bytes_is_not_taken_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pending approval's status rewritten as a BLOB (SQLite keeps any type in any column)
    matches no query for pending ones, so its operation looks runnable; read back, it is
    refused by name (pydantic would have read the bytes as the status, and the operation
    would have been taken, found waiting, and taken again for ever). A drain ends."""
    url = str(tmp_path / "store.db")
    env = {"TOOLLOOP_DATA_DIR": str(tmp_path / "data")}
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", env["TOOLLOOP_DATA_DIR"])
    (op,) = submit(url, 1, env)
    options = WorkerOptions(url, concurrency=1, drain=True, poll_s=0.05)
    run_worker(options)
    assert states(url, [op]) == {op: "WAITING_APPROVAL"}
    with behind_its_back(url) as conn:
        conn.execute("UPDATE approvals SET status = CAST(status AS BLOB)")
    said: list[tuple[str, str]] = []
    stop = threading.Event()  # a regression would take it for ever: stopped, then failed
    timer = threading.Timer(60, stop.set)
    timer.start()
    try:
        stats = run_worker(options, stop=stop, on_taken=lambda op, state: said.append((op, state)))
    finally:
        timer.cancel()
    assert not stop.is_set(), "the drain did not end"
    assert (stats.failed, stats.not_run, stats.taken) == (1, {op}, 0)
    ((_, why),) = said
    assert "approvals.status holds b'PENDING'" in why


def _finds_it_waiting(monkeypatch: pytest.MonkeyPatch, run_it: bool) -> None:
    """Every run a worker makes ends with the one step a run makes that changes nothing: the
    operation found waiting. ``run_it``: the run itself happened (the operation was run on
    to an approval by the time it was taken), else nothing was run at all."""
    from toolloop_cli.engine.loop import StepResult
    from toolloop_cli.engine.states import OpState
    from toolloop_cli.service import operations

    real = operations.resume

    def finds_it_waiting(store: Any, op_id: str, **kwargs: Any) -> StepResult:
        if run_it:
            op = real(store, op_id, **kwargs).operation
        else:
            kwargs["taken"].release()
            op = store.get_operation(op_id)
        state = OpState.WAITING_APPROVAL
        return StepResult(state, state, op, waiting="waiting for approval: apr_x")

    monkeypatch.setattr(operations, "resume", finds_it_waiting)


def _one_submitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A SQLite store with one operation submitted (``run --detach``), and its id."""
    url = str(tmp_path / "store.db")
    env = {"TOOLLOOP_DATA_DIR": str(tmp_path / "data")}
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", env["TOOLLOOP_DATA_DIR"])
    (op,) = submit(url, 1, env)
    return url, op


def _drain(url: str) -> tuple[Any, list[tuple[str, str]]]:
    said: list[tuple[str, str]] = []
    stop = threading.Event()  # a regression would take it for ever: stopped, then failed
    timer = threading.Timer(60, stop.set)
    timer.start()
    try:
        options = WorkerOptions(url, concurrency=1, drain=True, poll_s=0.05)
        stats = run_worker(options, stop=stop, on_taken=lambda op, state: said.append((op, state)))
    finally:
        timer.cancel()
    assert not stop.is_set(), "the drain did not end"
    return stats, said


def test_an_operation_found_waiting_on_every_take_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever makes the store list an operation as runnable while every run finds it still
    waiting (a row written around toolloop that no check names yet), taking it again would
    change nothing: after three takes the worker names it, passes it over, and a drain ends."""
    url, op = _one_submitted(tmp_path, monkeypatch)
    _finds_it_waiting(monkeypatch, run_it=False)
    stats, said = _drain(url)
    assert (stats.failed, stats.not_run, stats.taken, stats.stalled) == (1, {op}, 0, {op: 3})
    assert said == [(op, "not run: listed as runnable, yet waiting for approval: apr_x")]


def test_an_operation_found_waiting_once_is_not_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found waiting once is a race (another process ran it on to a new approval after it
    was listed): the operation stays this worker's to take once that approval is decided."""
    url, op = _one_submitted(tmp_path, monkeypatch)
    _finds_it_waiting(monkeypatch, run_it=True)
    stats, said = _drain(url)
    assert (stats.failed, stats.not_run, stats.stalled) == (0, set(), {op: 1})
    assert said == []
    assert states(url, [op]) == {op: "WAITING_APPROVAL"}


def _listeners(url: str) -> set[int]:
    """The backends of ``url``'s database that LISTEN for runnable operations."""
    with behind_its_back(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND query = 'LISTEN toolloop_runnable'"
        ).fetchall()
    return {int(r[0]) for r in rows}


def _within(seconds: float, found: Callable[[], T]) -> T:
    """What ``found`` returns once it is truthy, or when ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not (seen := found()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return seen


def test_a_worker_whose_listen_connection_is_lost_listens_again_and_is_woken(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection a worker sleeps on (LISTEN) is terminated by the server: the worker
    opens another and is still woken by the next submission (it used to die with the
    connection's error)."""
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(tmp_path))
    open_store(postgres_url).close()
    stop = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:  # a long poll: only a notification wakes it in time
            run_worker(WorkerOptions(postgres_url, poll_s=60.0), stop=stop)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        first = _within(30, lambda: _listeners(postgres_url))
        assert first, "the worker never listened"
        with behind_its_back(postgres_url) as conn:
            for pid in first:
                conn.execute("SELECT pg_terminate_backend(?)", (pid,))
        again = _within(30, lambda: _listeners(postgres_url) - first)
        assert again and not failed, failed
        (op_id,) = submit(postgres_url, 1, {"TOOLLOOP_DATA_DIR": str(tmp_path)})
        ran = _within(30, lambda: states(postgres_url, [op_id])[op_id] == "WAITING_APPROVAL")
        assert ran, states(postgres_url, [op_id])
    finally:
        stop.set()
        with behind_its_back(postgres_url) as conn:  # wake it, to see the stop
            conn.execute("SELECT pg_notify('toolloop_runnable', 'stop')")
        thread.join(timeout=60)
    assert not thread.is_alive() and failed == []


def test_a_claim_that_waits_past_lock_timeout_takes_nothing_and_the_worker_goes_on(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the lease row of a runnable operation locked (frozen mid-commit)
    past ``lock_timeout``: the worker's claim takes nothing that time and counts it busy,
    instead of the worker stopping on the busy store; once the lock is gone it is taken."""
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(pg_settings, "LOCK_TIMEOUT", "1s")
    (op_id,) = submit(postgres_url, 1, {"TOOLLOOP_DATA_DIR": str(tmp_path)})
    with behind_its_back(postgres_url) as conn:  # a lease expired long ago: stale
        conn.execute(
            "INSERT INTO leases (operation_id, token, pid, host, acquired_at, expires_at)"
            " VALUES (?, 'theirs', 1, 'elsewhere', 0, 1)",
            (op_id,),
        )
    with psycopg.connect(postgres_url) as frozen:
        frozen.execute("SELECT * FROM leases FOR UPDATE")
        stats = run_worker(WorkerOptions(postgres_url, drain=True, poll_s=0.2))
        assert (stats.taken, stats.busy) == (0, 1)
        frozen.rollback()
    stats = run_worker(WorkerOptions(postgres_url, drain=True, poll_s=0.2))
    assert stats.taken == 1
    assert states(postgres_url, [op_id]) == {op_id: "WAITING_APPROVAL"}


def test_a_pool_that_cannot_reach_its_database_is_one_store_error(
    postgres_server: Server, postgres_url: str
) -> None:
    """The database refuses every connection (its server restarting, a fail-over): a
    worker's borrow gives up at the pool's timeout with a ``StoreError`` (one line, exit 2)
    naming the store, not the pool's own exception and a traceback."""
    pool = PgStorePool(postgres_url, 1)
    pool.pool.timeout = 2.0
    name = urlsplit(postgres_url).path.lstrip("/")
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        try:
            with pytest.raises(StoreError, match=r"^cannot reach store postgresql://\S+: no conn"):
                with pool.store():
                    pass
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            pool.close()


def test_a_worker_whose_sqlite_store_is_removed_stops_with_one_line(tmp_path: Path) -> None:
    """Its open connection kept reading the deleted file, so it polled a store nobody could
    reach for ever (and exited 0 on SIGINT). It stops with "no store at …" (exit 2 in the CLI)."""
    from toolloop_cli.errors import UsageError
    from toolloop_cli.service.worker import WorkerOptions, run_worker
    from toolloop_cli.store import open_store

    path = tmp_path / "store.db"
    open_store(path).close()
    raised: list[BaseException] = []

    def work() -> None:
        try:
            run_worker(WorkerOptions(store=str(path), poll_s=0.05))
        except BaseException as exc:  # the outcome under test
            raised.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    time.sleep(0.3)
    for name in ("store.db", "store.db-wal", "store.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], UsageError)
    assert "it was removed while the worker ran" in str(raised[0])
