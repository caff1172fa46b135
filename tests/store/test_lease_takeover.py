"""Taking over an operation whose runner may not be gone, with no side effect twice.

A runner frozen in a handler (SIGSTOP, a paused VM) keeps no lease: its keeper is frozen
too, the lease expires, and a worker of another host takes the operation over. The runner
may thaw at any moment and apply the effect it had started, so the taker waits until that
handler's timeout has passed before asking the downstream what became of the call's key;
the thawed runner, fenced out, stores nothing more. The control shows the draft made twice
when the taker asks at once.

A live runner keeps its lease however long it blocks: its keeper renews it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from support.paths import REFUND_OPENAI, ROOT, TASK

from toolloop_cli.engine import executing
from toolloop_cli.service import operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.service.worker import WorkerOptions, run_worker
from toolloop_cli.store import lease, open_store

POOL = ROOT / "tests" / "store" / "pool"
sys.path.insert(0, str(POOL))
import pool_ledger  # noqa: E402

pytestmark = pytest.mark.slow


def _submitted(location: str) -> str:
    store = open_store(location)
    try:
        options = operations.RunOptions(TASK, POOL / "registry.yaml", transcript=REFUND_OPENAI)
        return operations.submit(store, options).operation_id
    finally:
        store.close()


def _frozen_runner(location: str, data: Path, marker: Path) -> subprocess.Popen[bytes]:
    """A worker of host-a (lease TTL 1 s) that stops itself inside the draft's handler,
    its intent committed and its effect not yet applied."""
    env = {
        **os.environ,
        "TOOLLOOP_DATA_DIR": str(data),
        pool_ledger.FREEZE_ENV: str(marker),
    }
    command = [sys.executable, "-m", "toolloop_cli", "worker", "--store", location]
    command += ["--drain", "--poll", "0.2", "--lease-ttl", "1", "--host-id", "host-a", "--json"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, "the runner never reached the draft's handler"
        time.sleep(0.01)
    return proc


def _until_expired(location: str, op_id: str) -> None:
    store = open_store(location)
    try:
        while True:
            row = store.conn.execute(
                "SELECT expires_at FROM leases WHERE operation_id = ?", (op_id,)
            ).fetchone()
            if row is None or float(row[0]) <= time.time():
                return
            time.sleep(0.05)
    finally:
        store.close()


def _take_over(
    location: str,
    data: Path,
    runner: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    *,
    thaw_after_s: float | None,
) -> str:
    """Host-b's worker takes the operation over; the frozen runner thaws ``thaw_after_s``
    into the takeover (None: once the taker is done)."""
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(data))
    monkeypatch.setenv(lease.HOST_ENV, "host-b")
    thaw = threading.Timer(thaw_after_s or 0.0, runner.send_signal, (signal.SIGCONT,))
    if thaw_after_s is not None:
        thaw.start()
    try:
        stats = run_worker(WorkerOptions(location, drain=True, poll_s=0.2))
    finally:
        if thaw_after_s is None:
            thaw.start()
        thaw.join()
    assert stats.taken == 1
    (state,) = stats.ended
    return state


def _drafts(data: Path, op_id: str) -> int:
    with pool_ledger.connect(data) as ledger:
        rows = ledger.execute("SELECT operation_id FROM drafts").fetchall()
    return Counter(r[0] for r in rows)[op_id]


def _draft_call_states(location: str, op_id: str) -> list[str]:
    store = open_store(location)
    try:
        return [
            c.state.value
            for c in store.calls(op_id)
            if c.name == "create_refund_draft"  # the call the runner froze in
        ]
    finally:
        store.close()


def test_a_frozen_runner_taken_over_applies_its_effect_once(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path  # the pool's ledger: beside a SQLite store, TOOLLOOP_DATA_DIR for PostgreSQL
    op_id = _submitted(store_location)
    runner = _frozen_runner(store_location, data, tmp_path / "frozen")
    _until_expired(store_location, op_id)

    # the runner thaws while the taker waits for its handler's timeout to pass
    state = _take_over(store_location, data, runner, monkeypatch, thaw_after_s=0.5)
    stdout, stderr = runner.communicate(timeout=60)

    assert state == "WAITING_APPROVAL"  # the taker went on to the payment's approval
    assert _drafts(data, op_id) == 1
    # the thawed runner's draft is the one the taker found by its key
    assert _draft_call_states(store_location, op_id) == ["RECONCILED"]
    assert b"Traceback" not in stderr
    # the thawed runner stopped at its next commit: it had lost the lease
    assert json.loads(stdout) == {"taken": 0, "ended": {}, "busy": 1, "failed": 0, "not_run": []}
    store = open_store(store_location)
    assert verify_store(store).ok
    store.close()


def test_control_a_taker_that_asks_at_once_makes_the_draft_twice(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executing, "_outwait_inherited_attempt", lambda *args: None)
    data = tmp_path  # the pool's ledger: beside a SQLite store, TOOLLOOP_DATA_DIR for PostgreSQL
    op_id = _submitted(store_location)
    runner = _frozen_runner(store_location, data, tmp_path / "frozen")
    _until_expired(store_location, op_id)

    _take_over(store_location, data, runner, monkeypatch, thaw_after_s=None)
    runner.communicate(timeout=60)

    assert _drafts(data, op_id) == 2  # the downstream said "no record" before the thaw


def test_a_lease_outlives_its_ttl_while_its_runner_blocks(store_location: str) -> None:
    op_id = _submitted(store_location)
    store, other = open_store(store_location), open_store(store_location)
    held = lease.acquire(store, op_id, ttl_s=0.3)
    time.sleep(1.0)  # no step, no renewal by the runner: only its keeper
    with pytest.raises(lease.OperationBusy, match="being run by another process"):
        lease.acquire(other, op_id)
    assert not held.lost
    held.release()
    assert other.conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)
    store.close()
    other.close()


def test_a_keeper_that_finds_its_lease_taken_stops_the_runner(store_location: str) -> None:
    op_id = _submitted(store_location)
    store, other = open_store(store_location), open_store(store_location)
    held = lease.acquire(store, op_id, ttl_s=0.3)
    with other.lease_transaction():  # another process took it over
        other.conn.execute("UPDATE leases SET token = 'theirs' WHERE operation_id = ?", (op_id,))
    deadline = time.monotonic() + 10
    while not held.lost and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(lease.OperationBusy, match="lost its lease"):
        held.check()
    held.release()  # gives back nothing: the row is theirs
    assert other.conn.execute("SELECT token FROM leases").fetchone() == ("theirs",)
    store.close()
    other.close()
