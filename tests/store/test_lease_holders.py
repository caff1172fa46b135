"""Who holds an operation's lease, as the other threads of the same process see it.

A worker runs several threads in one process, so a lease of this pid is judged by whether
this process holds its token right now. A claim's token counts as held from before its row
can be read: a thread that looks the moment after another thread's claim committed sees a
live holder, never a lease of this pid that nobody holds (which it would take, and the
operation would run twice).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.stores import behind_its_back, submitted_refund
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.service import worker
from toolloop_cli.store import Store, lease, open_store


def _looking_after_each_commit(
    store: Store, look: list[object], other: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each of ``store``'s lease commits, before the call that made it returns, the
    other thread (``other``, its own connection) tries to claim."""
    original = store.lease_transaction

    @contextmanager
    def then_another_thread_looks() -> Iterator[None]:
        with original():
            yield
        look.append(worker.claim(other))

    monkeypatch.setattr(store, "lease_transaction", then_another_thread_looks)


def test_a_claimed_lease_is_live_to_the_other_threads_from_its_commit(
    store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = submitted_refund(store_location)
    first, second = open_store(store_location), open_store(store_location)
    seen: list[object] = []
    _looking_after_each_commit(first, seen, second, monkeypatch)

    taken = worker.claim(first)

    assert taken is not None and taken.operation_id == op_id
    assert seen == [None]  # the other thread found it held, and took nothing
    (token,) = second.conn.execute("SELECT token FROM leases").fetchone()
    assert token == taken.token
    monkeypatch.undo()
    taken.release()
    assert worker.claim(second) is not None  # given back: the next claim takes it
    first.close()
    second.close()


def test_an_acquired_lease_is_live_to_the_other_threads_from_its_commit(
    store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = submitted_refund(store_location)
    first, second = open_store(store_location), open_store(store_location)
    seen: list[object] = []
    _looking_after_each_commit(first, seen, second, monkeypatch)

    held = lease.acquire(first, op_id)

    assert seen == [None]
    with pytest.raises(lease.OperationBusy, match=r"being run by another process \(pid "):
        lease.acquire(second, op_id)
    monkeypatch.undo()
    held.release()
    first.close()
    second.close()


def test_a_claim_that_takes_nothing_leaves_no_token_held(store_location: str) -> None:
    store = open_store(store_location)
    before = set(lease._ACTIVE)
    assert worker.claim(store) is None  # nothing submitted
    assert lease._ACTIVE == before
    store.close()


@pytest.mark.parametrize("expires_at", ["'soon'", "'9e9 s'", "X'00'"])
def test_a_lease_row_with_no_expiry_toolloop_wrote_holds_nothing(
    tmp_path: Path, expires_at: str
) -> None:
    """A lease written around toolloop (its expiry text or bytes, its pid no number)
    protects nothing: it counts as stale, so the operation is taken, as after a takeover
    (its calls waited out), instead of a traceback on every command that looks at it."""
    path = tmp_path / "store.db"
    op_id = submitted_refund(str(path))
    with behind_its_back(path) as conn:
        conn.execute(
            "INSERT INTO leases (operation_id, token, pid, host, acquired_at, expires_at)"
            f" VALUES (?, 'theirs', 'not a pid', 'elsewhere', 0, {expires_at})",
            (op_id,),
        )
    store = open_store(path)
    try:
        held = lease.acquire(store, op_id)
        assert held.inherited  # nothing shows its holder gone: its calls are waited out
        held.release()
    finally:
        store.close()


@pytest.mark.parametrize("pid", [0, -1, -424242, 2**31, 2**40, -(2**31) - 1])
def test_a_lease_of_a_pid_no_process_can_have_is_a_holder_that_cannot_be_checked(
    store_location: str, pid: int
) -> None:
    """A lease row of this host whose pid is 0, negative or past a C int (written around
    toolloop) names no process that can be asked: it is held until its expiry, as another
    host's lease is, not a crash (OverflowError) and not a holder shown to be dead."""
    op_id = submitted_refund(store_location)
    with behind_its_back(store_location) as conn:
        conn.execute(
            "INSERT INTO leases (operation_id, token, pid, host, acquired_at, expires_at)"
            " VALUES (?, 'theirs', ?, ?, 0, ?)",
            (op_id, pid, lease.host_id(), time.time() + 3600),
        )
    store = open_store(store_location)
    try:
        with pytest.raises(lease.OperationBusy, match=rf"\(pid {pid} on "):
            lease.acquire(store, op_id)
        assert worker.claim(store) is None
        assert worker.runnable(store) == [op_id]  # listed: claiming it decides, and declines
        resumed = CliRunner().invoke(app, ["resume", op_id, "--store", store_location])
        assert resumed.exit_code == 2, resumed.output
        (message,) = resumed.stderr.strip().splitlines()
        assert f"is being run by another process (pid {pid} on " in message
        with behind_its_back(store_location) as conn:
            conn.execute("UPDATE leases SET expires_at = 1")
        held = lease.acquire(store, op_id)  # expired: taken over, its calls waited out
        assert held.inherited
        held.release()
    finally:
        store.close()
