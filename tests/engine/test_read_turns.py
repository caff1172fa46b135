"""A turn of reads is one commit: its intents are held with the turn while the handlers run
(``executing._run_batch``), unless the handlers outlast ``READS_HELD_S``: then the intents are
committed while they run, so no other writer waits on a slow read.

The suite holds reads for good (``conftest._reads_held_for_good``); the tests of the default
set ``READS_HELD_S`` themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.audit_log import records, writes_of
from support.scripted import call, final, run_script, turn

from toolloop_cli.engine import executing, parallel
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store


@pytest.fixture
def store(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("SEES_INTENT_STORE", str(store_path))  # where the handler looks
    return open_store(store_path)


def _records_writing_calls(store: Store) -> dict[str, list[int]]:
    """Each call id: the audit records (one per commit) that wrote its row."""
    found: dict[str, list[int]] = {}
    for seq, _, write in writes_of(records(store.conn), "call"):
        found.setdefault(str(write.key[-1]), []).append(seq)
    return found


def test_a_turn_of_reads_is_written_in_one_commit_with_its_results(store: Store) -> None:
    answers = [
        turn(call("echo", {"n": 1}), call("echo", {"n": 2}), call("echo", {"n": 3})),
        turn(call("echo", {"n": 4})),
        final(),
    ]
    result, _ = run_script(store, answers, max_parallel=3)
    assert result.target.value == "COMPLETED"
    written = _records_writing_calls(store)
    assert len(written) == 4
    # each call's row once: proposed, allowed, started and answered in one commit
    assert all(len(seqs) == 1 for seqs in written.values()), written
    first_turn = {written[c.call_id][0] for c in store.calls(result.operation.operation_id)[:3]}
    assert len(first_turn) == 1  # the three calls of the first turn share it
    moves = [(t["source"], t["target"]) for t in store.transitions(result.operation.operation_id)]
    assert moves.count(("APPROVED", "EXECUTING")) == 4  # every move still logged
    assert verify_store(store).ok


def test_a_held_read_is_not_seen_by_another_connection_until_its_result(store: Store) -> None:
    """The control for the next test: with reads held for good, the handler waits its 200 ms
    and never reads its own intent from outside."""
    result, _ = run_script(store, [turn(call("sees_own_intent", {"wait_ms": 200})), final()])
    (c,) = store.calls(result.operation.operation_id)
    assert c.state.value == "SUCCEEDED"
    assert c.model_result == {"ok": True, "result": {"seen": None}}


def test_a_read_that_outlasts_the_hold_has_its_intent_committed_while_it_runs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``READS_HELD_S`` the held intents are committed (the write lock let go) while the
    handler still runs: another connection reads the call as EXECUTING."""
    monkeypatch.setattr(executing, "READS_HELD_S", 0.05)
    result, _ = run_script(store, [turn(call("sees_own_intent", {"wait_ms": 3000})), final()])
    assert result.target.value == "COMPLETED"
    (c,) = store.calls(result.operation.operation_id)
    assert c.model_result == {"ok": True, "result": {"seen": "EXECUTING"}}
    assert len(_records_writing_calls(store)[c.call_id]) == 2  # the intent, then the result
    assert verify_store(store).ok


def test_a_side_effect_s_intent_is_committed_before_its_handler_whatever_the_hold(
    store: Store,
) -> None:
    """Held reads never hold a side effect's intent: it is a barrier, committed first."""
    result, _ = run_script(store, [turn(call("one_at_a_time", {"n": 1})), final()])
    (c,) = store.calls(result.operation.operation_id)
    assert len(_records_writing_calls(store)[c.call_id]) == 2


class _Work:
    """A ``parallel.Running`` whose work ends when the test says so."""

    def __init__(self, on_done: Callable[[], None]) -> None:
        self.on_done = on_done
        self.expires = time.monotonic() + 10

    def finish(self) -> str:
        return "done"


def test_patience_runs_out_once_while_the_caller_waits() -> None:
    ran: list[float] = []
    started: list[_Work] = []

    def start(item: int, on_done: Callable[[], None]) -> _Work:
        work = _Work(on_done)
        started.append(work)
        return work

    # the work reports back 100 ms in: the patience of 20 ms runs out first, and only once
    threading.Timer(0.1, lambda: started[0].on_done()).start()
    patience = parallel.Patience(0.02, lambda: ran.append(time.monotonic()))
    began = time.monotonic()
    assert list(parallel.run_all([1], start, 1, patience)) == [(1, "done")]
    assert len(ran) == 1 and 0.015 <= ran[0] - began < 0.1


def test_patience_does_not_run_out_for_work_done_in_time() -> None:
    ran: list[str] = []

    def start(item: int, on_done: Callable[[], None]) -> _Work:
        work = _Work(on_done)
        on_done()  # done at once
        return work

    patience = parallel.Patience(5.0, lambda: ran.append("ran"))
    assert list(parallel.run_all([1, 2], start, 2, patience)) == [(1, "done"), (2, "done")]
    assert ran == []
