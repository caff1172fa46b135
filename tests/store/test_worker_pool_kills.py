"""Four workers on one PostgreSQL store (two hosts), 200 operations that each pay a refund
after a human approves it, eight approvers deciding at once, and workers SIGKILLed at random
50 times: every operation ends, no payment is made twice (the payments service keeps no
idempotency of its own), no decision is lost or taken twice, and the audit chain verifies.

Workers on the same host take over a killed worker's operations at once (its pid is gone);
workers on the other host only once the lease expires (``--lease-ttl 3``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest
from support.paths import REFUND_OPENAI, ROOT, TASK

from toolloop_cli.engine.states import is_terminal
from toolloop_cli.errors import AlreadyDecided
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store

POOL = ROOT / "tests" / "store" / "pool"
sys.path.insert(0, str(POOL))
import pool_ledger  # noqa: E402

OPERATIONS = 200
KILLS = 50
DECIDERS = 8
HOSTS = ("host-a", "host-a", "host-b", "host-b")
DEADLINE_S = 900.0
#: the mean time between two kills (seconds)
KILL_EVERY_S = 0.7
SEED = int(os.environ.get("TOOLLOOP_TEST_SEED", "1204"))

pytestmark = pytest.mark.slow


class Worker:
    """One ``toolloop worker`` process, restarted after each kill with the same host id."""

    def __init__(self, url: str, host: str, env: dict[str, str], log: Path) -> None:
        self.cmd = [
            *(sys.executable, "-m", "toolloop_cli", "worker", "--store", url),
            *("--concurrency", "2", "--poll", "0.5", "--lease-ttl", "3", "--host-id", host),
        ]
        self.env = env
        self.log: IO[bytes] = log.open("ab")
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=self.log)

    def kill_and_restart(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()  # reaped: its pid is gone, as the lease check expects
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()


class Submitter:
    """Operations submitted at a steady pace while workers die (``run --detach``'s call)."""

    def __init__(self, url: str, pace_s: float) -> None:
        self.ids: list[str] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._submit, args=(url, pace_s), daemon=True)
        self.thread.start()

    def _submit(self, url: str, pace_s: float) -> None:
        options = operations.RunOptions(TASK, POOL / "registry.yaml", transcript=REFUND_OPENAI)
        store = open_store(url)
        try:
            for _ in range(OPERATIONS):
                self.ids.append(operations.submit(store, options).operation_id)
                time.sleep(pace_s)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            store.close()


class Deciders:
    """Eight approvers deciding pending approvals at once; a quarter of them are denied."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done = threading.Event()
        self.decided: list[tuple[str, bool]] = []
        self.raced = 0
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._decide, args=(n,), daemon=True) for n in range(DECIDERS)
        ]
        for thread in self.threads:
            thread.start()

    def _decide(self, n: int) -> None:
        rng = random.Random(SEED + n)
        store = open_store(self.url)
        try:
            while not self.done.is_set():
                pending = store.pending_approvals()
                rng.shuffle(pending)
                for apr in pending[:3]:
                    deny = int(apr.approval_id[-2:], 16) % 4 == 0
                    approver = ("ops-lead", "finance")[n % 2]
                    try:
                        approvals.approve(store, apr.approval_id, approver, deny=deny)
                    except AlreadyDecided:
                        with self.lock:
                            self.raced += 1
                        continue
                    with self.lock:
                        self.decided.append((apr.approval_id, deny))
                time.sleep(0.05)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            store.close()

    def stop(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()


def unfinished(url: str, ids: list[str]) -> list[str]:
    store = open_store(url)
    try:
        return [op for op in ids if not is_terminal(store.get_operation(op).state)]
    finally:
        store.close()


def test_killed_workers_on_two_hosts_leave_every_operation_ended_and_paid_at_most_once(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(data))
    env = {**os.environ, "TOOLLOOP_DATA_DIR": str(data)}
    rng = random.Random(SEED)
    logs = [tmp_path / f"worker-{n}.log" for n in range(len(HOSTS))]
    workers = [Worker(postgres_url, h, env, log) for h, log in zip(HOSTS, logs, strict=True)]
    deciders = Deciders(postgres_url)
    # the submissions span the kills: every kill lands while operations are in flight
    submitter = Submitter(postgres_url, pace_s=KILL_EVERY_S * KILLS / OPERATIONS)
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.5, 1.5) * KILL_EVERY_S)
            rng.choice(workers).kill_and_restart()
        submitter.thread.join()
        ids = submitter.ids
        deadline = time.monotonic() + DEADLINE_S
        while (left := unfinished(postgres_url, ids)) and time.monotonic() < deadline:
            time.sleep(1.0)
    finally:
        deciders.stop()
        for worker in workers:
            worker.stop()
    assert submitter.errors == []
    assert len(ids) == OPERATIONS
    assert deciders.errors == []
    assert left == [], f"{len(left)} operation(s) never ended, e.g. {left[:3]}"

    store = open_store(postgres_url)
    states = Counter(store.get_operation(op).state.value for op in ids)
    assert states == {"COMPLETED": OPERATIONS}

    # every decision taken once, and stored as taken
    decided = dict(deciders.decided)
    assert len(decided) == len(deciders.decided)  # no approval decided twice
    stored = {a.approval_id: a for op in ids for a in store.approvals(op)}
    assert len(stored) == OPERATIONS
    assert set(decided) == set(stored)  # none lost: every approval was decided, by someone
    for approval_id, deny in decided.items():
        assert stored[approval_id].status.value == ("DENIED" if deny else "APPROVED")

    # one draft per operation, one payment per approved operation, never a second
    paid_ops = {stored[a].operation_id for a, deny in decided.items() if not deny}
    with pool_ledger.connect(data) as ledger:
        drafts = Counter(r[0] for r in ledger.execute("SELECT operation_id FROM drafts"))
        payments = Counter(r[0] for r in ledger.execute("SELECT operation_id FROM payments"))
    assert drafts == dict.fromkeys(ids, 1)
    assert payments == dict.fromkeys(paid_ops, 1)

    # both hosts ran operations (a host's worker logs one line per operation it ran)
    ran = [log.read_text().count("\n") for log in logs]
    assert ran[0] + ran[1] > 0 and ran[2] + ran[3] > 0, ran

    report = verify_store(store)
    assert report.ok, report.mismatches
    store.close()
