"""``verify_store`` walks the audit log as it reads it, with the garbage collector paused.

The log is the largest thing a store holds; a check that held every record (as text, then
parsed) needed about a third more memory than one that lets each record go once it has been
walked, expanded and given to the history. These tests hold that the streamed walk finds
exactly what a walk over a held log finds, that it holds no log row it is done with, and
that the collector is put back as it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.stores import demo_store, tampered_copy

from toolloop_cli.audit.verify import Report, check_part, verify
from toolloop_cli.service import verify as service
from toolloop_cli.service.verify import _Requests, _Results, read_rows, verify_store
from toolloop_cli.store import open_store
from toolloop_cli.store.audit_rules import HISTORY_RULES


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("streamed") / "store.db"
    demo_store(path, FakeClock())
    return path


def lines(report: Report) -> list[str]:
    return [m.line() for m in report.mismatches]


def full_check(path: Path, *, stream_log: bool) -> Report:
    store = open_store(path)
    try:
        rows = read_rows(store, stream_log=stream_log)
        assert (rows.audit_log == []) is stream_log  # streamed: nothing held up front
        requests = _Requests(rows)
        return verify(rows, request_sha=requests, rules=HISTORY_RULES, results=_Results(requests))
    finally:
        store.close()


TAMPERS = [
    "UPDATE calls SET state = 'FAILED' WHERE state = 'SUCCEEDED'",
    "DELETE FROM audit_log WHERE seq = 3",
    "UPDATE audit_log SET record = deflate(replace(inflate(record), 'COMPLETED', 'FAILED'))",
    "UPDATE audit_log SET seq = seq + 100 WHERE seq = (SELECT max(seq) FROM audit_log)",
    # past what canonical JSON holds exactly: no chain hash exists for it, a mismatch all
    # the same (never the hashing error it would raise)
    "UPDATE audit_log SET seq = 9007199254740993 WHERE seq = (SELECT max(seq) FROM audit_log)",
    "UPDATE transitions SET reason = 'rewritten' WHERE id = 2",
    "INSERT INTO audit_log SELECT seq + 1000, operation_id, kind, call_id, record,"
    " record_sha256, prev_sha256, chain_sha256 FROM audit_log WHERE seq = 2",
]


@pytest.mark.parametrize("tamper", [None, *TAMPERS])
def test_a_streamed_log_finds_exactly_what_a_held_log_finds(
    demo: Path, tmp_path: Path, tamper: str | None
) -> None:
    path = tampered_copy(demo, tmp_path / "store.db", tamper)
    held = full_check(path, stream_log=False)
    streamed = full_check(path, stream_log=True)
    assert lines(streamed) == lines(held)
    assert streamed.counts == held.counts and streamed.head == held.head
    assert held.ok is (tamper is None)
    store = open_store(path)
    try:
        # the service walks the log streamed and checks the rows an operation at a time: the
        # same findings, grouped by operation
        assert sorted(lines(verify_store(store))) == sorted(lines(held))
    finally:
        store.close()


class _Tracked(dict[str, Any]):
    """A log row that can be watched: alive while anything still holds it."""

    __slots__ = ("__weakref__",)


def test_the_walk_holds_no_log_row_it_is_done_with(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import weakref

    alive: list[weakref.ref[_Tracked]] = []
    most = 0
    real = service._log_rows

    def watched(store: Any) -> Iterator[dict[str, Any]]:
        nonlocal most
        for row in real(store):
            tracked = _Tracked(row)
            del row
            most = max(most, sum(1 for ref in alive if ref() is not None))
            alive.append(weakref.ref(tracked))
            yield tracked
            del tracked

    monkeypatch.setattr(service, "_log_rows", watched)
    store = open_store(demo)
    try:
        assert verify_store(store).ok
    finally:
        store.close()
    assert len(alive) > 20  # the demo's log was walked through the watched reader
    assert most <= 1  # at each row, at most the one before it is still held


def test_the_collector_is_paused_during_a_check_and_put_back(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> list[Any]:
        seen.append(gc.isenabled())
        return check_part(*args, **kwargs)

    monkeypatch.setattr("toolloop_cli.service.verify.check_part", spy)
    store = open_store(demo)
    try:
        assert gc.isenabled()
        assert verify_store(store).ok
        assert gc.isenabled()  # enabled again after the check
        gc.disable()
        try:
            assert verify_store(store).ok
            assert not gc.isenabled()  # a caller's choice is left as it was
        finally:
            gc.enable()
    finally:
        store.close()
    assert len(seen) >= 2 and not any(seen)  # each part of both checks ran with it paused
