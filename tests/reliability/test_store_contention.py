"""The store under many writers, two runners and a full disk, and leases.

- Many processes write one store at once: no ``database is locked`` escapes, every row
  lands, the audit chain stays one chain. The control shows the failure this prevents: a
  deferred read-then-write transaction gets SQLITE_BUSY whatever the busy timeout.
- A write that fails for lack of space (SQLITE_FULL at every page limit; ENOSPC for a
  cassette) leaves the old or the new state, never a part, with a clear error; once space
  is back, ``resume`` finishes and ``verify`` passes.
Leases: two ``resume``s of one operation never run a call twice; the second is told who
holds it; a lease left by a killed process does not block the next resume.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import sqlite3
import threading
import time
import traceback
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support.harness import oracles
from support.harness.children import fork_call
from support.harness.ops import waiting_refund
from support.harness.scenario import FixedClock, drive, refund_scenario
from support.harness.signature import recording_commits, signature
from support.stores import sqlite_of
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.errors import StoreError
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import lease, open_store
from toolloop_cli.store.db import BUSY_TIMEOUT_MS, connect
from toolloop_cli.transcripts import cassette

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"
WRITERS, TXNS = (32, 5000) if SOAK else (16, 500)
PAGE_SWEEP = 2000 if SOAK else 200

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def approved(tmp_path: Path) -> tuple[Path, str]:
    """A refund approved and ready to resume (the submit not yet run)."""
    store = open_store(tmp_path / "store.db")
    op_id, apr = waiting_refund(store)
    approvals.approve(store, apr, "ops-lead", clock=FixedClock())
    store.close()
    return tmp_path / "store.db", op_id


# -- 16. many writers -----------------------------------------------------------------------------


def _writer(path: Path, op_id: str, worker: int, start: Any, out: Any) -> None:  # pragma: no cover
    try:
        store = open_store(path)
        start.wait(timeout=60)
        for n in range(TXNS):
            with store.transaction():
                store.log_transition(op_id, "stress", None, f"w{worker}", "t", str(n))
        out.put((worker, "ok"))
    except BaseException as exc:
        out.put((worker, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def test_many_writer_processes_never_see_a_lock_error_and_keep_one_chain(
    approved: tuple[Path, str],
) -> None:
    path, op_id = approved
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, op_id, w, start, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    outcomes = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [o for o in outcomes if o[1] != "ok"] == []
    with closing(sqlite3.connect(path)) as conn:
        counts = dict(
            conn.execute(
                "SELECT target, count(*) FROM transitions WHERE kind = 'stress' GROUP BY 1"
            )
        )
        seqs = [r[0] for r in conn.execute("SELECT seq FROM audit_log ORDER BY seq")]
    assert counts == {f"w{w}": TXNS for w in range(WRITERS)}
    assert seqs == list(range(1, len(seqs) + 1))
    assert oracles.verify_problems(path) == []


def test_control_a_deferred_read_then_write_gets_busy_whatever_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    open_store(path).close()
    reader, writer = connect(path), connect(path)
    reader.execute("BEGIN")  # deferred: a read snapshot, no write lock
    reader.execute("SELECT count(*) FROM transitions").fetchone()
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO leases VALUES ('x', 't', 1, 'h', 0, 0)")
    writer.execute("COMMIT")
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        reader.execute("INSERT INTO leases VALUES ('y', 't', 1, 'h', 0, 0)")
    assert time.monotonic() - started < BUSY_TIMEOUT_MS / 1000 / 2  # no waiting would help
    reader.execute("ROLLBACK")


def test_an_immediate_transaction_waits_for_the_lock_instead(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = open_store(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    started = time.monotonic()
    with store.transaction():
        store.conn.execute("INSERT INTO leases VALUES ('y', 't', 1, 'h', 0, 0)")
    assert 0.2 < time.monotonic() - started < BUSY_TIMEOUT_MS / 1000


def test_the_store_runs_in_wal_with_barrier_sync_and_explicit_transactions(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    assert store.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    # NORMAL: the store fsyncs the WAL itself at each barrier (tests/reliability/test_power_loss)
    assert store.conn.execute("PRAGMA synchronous").fetchone() == (1,)
    assert store.conn.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
    assert sqlite_of(store).isolation_level is None


# -- leases ---------------------------------------------------------------------------------------


def test_a_second_resume_is_told_who_runs_the_operation_and_runs_nothing(
    approved: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, op_id = approved
    monkeypatch.setenv("TOOLLOOP_REFUND_DELAY_MS", "800")  # the first resume holds on
    first = threading.Thread(target=lambda: fork_call(lambda: _resume(path, op_id)))
    first.start()
    _wait_for_lease(path, op_id)
    second = CliRunner().invoke(app, ["resume", op_id, "--store", str(path)])
    first.join()
    lines = [x for x in second.stderr.splitlines() if x.strip()]
    assert second.exit_code == 2
    assert len(lines) == 1 and "is being run by another process (pid " in lines[0], lines
    assert ", until 20" in lines[0]
    assert len(ledger_refunds(path.parent / "payments.db")) == 1
    store = open_store(path)
    assert store.get_operation(op_id).state.value == "COMPLETED"
    assert store.conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)


def _wait_for_lease(path: Path, op_id: str) -> None:
    """Until the first runner holds the operation's lease (it is then inside its resume)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with closing(sqlite3.connect(path, timeout=10)) as conn:
            if conn.execute("SELECT 1 FROM leases WHERE operation_id = ?", (op_id,)).fetchone():
                return
        time.sleep(0.005)
    raise TimeoutError("the first resume never took the lease")


def _resume(path: Path, op_id: str) -> None:
    store = open_store(path)
    operations.resume(store, op_id, clock=FixedClock())


def test_control_without_the_lease_the_second_resume_is_not_told(
    approved: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, op_id = approved
    monkeypatch.setattr(lease, "_stale", lambda row, moment: True)  # every lease is stale
    monkeypatch.setenv("TOOLLOOP_REFUND_DELAY_MS", "800")
    first = threading.Thread(target=lambda: fork_call(lambda: _resume(path, op_id)))
    first.start()
    _wait_for_lease(path, op_id)
    second = CliRunner().invoke(app, ["resume", op_id, "--store", str(path)])
    first.join()
    assert "being run by another process" not in second.stderr
    # the compare-and-set on each state change still keeps the refund single
    assert len(ledger_refunds(path.parent / "payments.db")) == 1


def test_a_lease_left_by_a_killed_process_does_not_block_the_next_resume(
    approved: tuple[Path, str],
) -> None:
    path, op_id = approved
    assert fork_call(lambda: _resume(path, op_id), failpoint="after_intent_commit") == -9
    with closing(sqlite3.connect(path)) as conn:
        (pid,) = conn.execute("SELECT pid FROM leases WHERE operation_id = ?", (op_id,)).fetchone()
    assert pid != os.getpid()
    _resume(path, op_id)
    assert len(ledger_refunds(path.parent / "payments.db")) == 1


def test_a_lease_held_elsewhere_blocks_until_it_expires(approved: tuple[Path, str]) -> None:
    path, op_id = approved
    store = open_store(path)
    with store.transaction():
        store.conn.execute(
            "INSERT INTO leases VALUES (?, 'other', 4242, 'another-host', 0, ?)",
            (op_id, time.time() + 60),
        )
    with pytest.raises(lease.OperationBusy, match="pid 4242 on another-host"):
        operations.resume(store, op_id, clock=FixedClock())
    with store.transaction():
        store.conn.execute("UPDATE leases SET expires_at = ?", (time.time() - 1,))
    assert operations.resume(store, op_id, clock=FixedClock()).target.value == "COMPLETED"


def test_a_lease_that_another_process_took_over_stops_the_holder(
    approved: tuple[Path, str],
) -> None:
    path, op_id = approved
    store, other = open_store(path), open_store(path)
    held = lease.acquire(store, op_id, ttl_s=0.0)
    taker = lease.acquire(other, op_id)
    assert taker.token != held.token  # expired: taken over
    assert taker.inherited  # from a holder that is not gone: it may still be running
    before = store.get_operation(op_id)
    with pytest.raises(lease.OperationBusy, match="lost its lease"):  # fenced: nothing stored
        with store.transaction():
            store.save_operation(before.model_copy(update={"reason": "late"}), before.state)
    assert store.get_operation(op_id).reason == before.reason
    held.lost = True  # what its keeper finds at its next renewal
    with pytest.raises(lease.OperationBusy, match="lost its lease"):
        held.check()
    taker.release()


# -- 17. disk full ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_disk_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """An approved refund (its store checkpointed) and every state resuming it commits."""
    folder = tmp_path_factory.mktemp("disk-full")
    store = open_store(folder / "store.db")
    op_id, apr = waiting_refund(store)
    approvals.approve(store, apr, "ops-lead", clock=FixedClock())
    store.close()
    template = folder / "template"
    shutil.copytree(folder, template)
    legal = {signature(template / "store.db")}
    with pytest.MonkeyPatch.context() as patch, recording_commits(patch) as commits:
        _resume(folder / "store.db", op_id)
    legal.update(commits)
    return template, legal


def _page_count(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])


def test_a_full_disk_at_every_page_leaves_the_old_or_the_new_state(
    full_disk_reference: tuple[Path, set[str]], tmp_path: Path
) -> None:
    template, legal = full_disk_reference
    base = _page_count(template / "store.db")
    outcomes: dict[str, int] = {}
    for limit in range(base, base + PAGE_SWEEP + 1):
        case = tmp_path / str(limit)
        shutil.copytree(template, case)
        store = open_store(case / "store.db")
        (op,) = store.list_operations()
        store.conn.execute(f"PRAGMA max_page_count = {limit}")
        try:
            operations.resume(store, op.operation_id, clock=FixedClock())
            outcome = "completed"
        except StoreError as exc:
            assert "full" in str(exc), exc
            outcome = "full"
        store.close()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert signature(case / "store.db") in legal, limit
        assert oracles.integrity_problems(case / "store.db") == []
        if outcome == "full":  # space is back: the same operation finishes, exactly once
            assert drive(case / "store.db", refund_scenario()).state.value == "COMPLETED"
        assert oracles.all_problems(case / "store.db") == [], limit
        shutil.rmtree(case)
    assert outcomes.get("full", 0) >= 1 and outcomes.get("completed", 0) >= 1, outcomes


def test_a_full_disk_is_one_clear_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund approved now (on the system clock, which the CLI's resume runs on): resuming
    it writes the submitted refund and the turns after it, more than the pages the store has
    (whether a small write fits in the last pages' free space depends on their layout)."""
    path = tmp_path / "case" / "store.db"
    path.parent.mkdir()
    store = open_store(path)
    _, apr = waiting_refund(store, clock=SystemClock())
    approvals.approve(store, apr, "ops-lead")
    store.close()
    limit = _page_count(path)
    real = connect

    def small(p: Path, *durability: Any) -> sqlite3.Connection:
        conn = real(p, *durability)
        conn.execute(f"PRAGMA max_page_count = {limit}")
        return conn

    monkeypatch.setattr("toolloop_cli.store.db.connect", small)
    store = open_store(path)
    (op,) = store.list_operations()
    store.close()
    # --json: stderr holds the error alone (without it, the progress of the commits that fit)
    result = CliRunner().invoke(app, ["resume", op.operation_id, "--store", str(path), "--json"])
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.exit_code == 2
    assert len(lines) == 1 and "full" in lines[0], lines
    assert "database or disk is full" in json.loads(result.stdout)["error"]


class _FullDisk:
    """A file whose write stores ``room`` characters, then fails with ENOSPC."""

    def __init__(self, inner: Any, room: int) -> None:
        self.inner, self.room = inner, room

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def write(self, text: str) -> int:
        self.inner.write(text[: self.room])
        self.inner.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return int(self.inner.fileno())


def test_a_cassette_write_that_runs_out_of_space_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = cassette.load_cassette(refund_scenario().cassette)
    target = tmp_path / "out.yaml"
    cassette.dump_cassette(source.interactions[:1], target)
    old = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(real_fdopen(fd, *a, **k), 4096))
    with pytest.raises(OSError) as caught:
        cassette.dump_cassette(source.interactions, target)
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert target.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]  # no partial temp file left
    cassette.dump_cassette(source.interactions, target)  # space is back
    assert len(cassette.load_cassette(target).interactions) == len(source.interactions)


def test_control_a_file_written_in_place_is_left_partial(tmp_path: Path) -> None:
    """What the cassette writer avoids: writing over the old file loses it on ENOSPC."""
    target = tmp_path / "out.yaml"
    target.write_text("old content\n" * 100)
    with pytest.raises(OSError), _FullDisk(target.open("w"), 100) as out:
        out.write("new content\n" * 100)
    assert target.read_text() not in ("old content\n" * 100, "new content\n" * 100)
