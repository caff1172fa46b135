"""``verify_store`` checks a store a few operations at a time, in one read snapshot.

Holding every row of a store (and the last record of each) needs memory in proportion to
all the store ever ran; the service reads a part (some operations and their records),
checks it and lets it go, then pairs what the parts left over (a row moved to another
operation) as a check of the whole store would. These tests hold that, split one operation
per part, it finds exactly what the check of the whole store held in memory finds; that a
part's rows are let go before the next part but one is read; and that a writer committing
during the check is not seen.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.stores import demo_store, start, tampered_copy

from toolloop_cli.audit.rows import StoreRows
from toolloop_cli.audit.verify import Report, verify
from toolloop_cli.service import store_parts
from toolloop_cli.service.verify import _Requests, _Results, read_rows, verify_store
from toolloop_cli.store import open_store
from toolloop_cli.store.audit_rules import HISTORY_RULES


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parts") / "store.db"
    demo_store(path, FakeClock())
    return path


@pytest.fixture
def one_operation_per_part(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parts of one operation each; returns the number of calls each part read."""
    monkeypatch.setattr(store_parts, "PART_CALLS", 1)
    sizes: list[int] = []
    real = store_parts.read_part

    def counted(store: Any, part: store_parts.Part) -> StoreRows:
        rows = real(store, part)
        sizes.append(len(rows.operations))
        return rows

    monkeypatch.setattr(store_parts, "read_part", counted)
    return sizes


def held_whole(path: Path) -> Report:
    store = open_store(path)
    try:
        rows = read_rows(store)
        requests = _Requests(rows)
        return verify(rows, request_sha=requests, rules=HISTORY_RULES, results=_Results(requests))
    finally:
        store.close()


def checked_in_parts(path: Path) -> Report:
    store = open_store(path, read_only=True)
    try:
        return verify_store(store)
    finally:
        store.close()


def lines(report: Report) -> list[str]:
    return sorted(m.line() for m in report.mismatches)


PAUSED = "(SELECT operation_id FROM operations WHERE state = 'WAITING_APPROVAL')"
FIRST_CALL = "(SELECT min(rowid) FROM calls)"

TAMPERS = [
    # a call moved to another operation: its row is left over in that operation's part, its
    # record in its own; paired at the end, they are one finding (two columns)
    f"UPDATE calls SET operation_id = {PAUSED}, call_id = call_id || '_moved'"
    f" WHERE rowid = {FIRST_CALL}",
    # rows moved to, or written for, no operation the store holds (the last part)
    f"UPDATE calls SET operation_id = 'op_nowhere' WHERE rowid = {FIRST_CALL}",
    "UPDATE transitions SET operation_id = 'op_nowhere' WHERE id = 3",
    "INSERT INTO transitions (operation_id, kind, source, target, at)"
    " VALUES ('op_stray', 'operation', NULL, 'COMPLETED', '2026-12-01T10:00:00Z')",
    # the tools every operation declared (one blob, referred to by each operation's turns)
    "UPDATE blobs SET body = body || ' ' WHERE sha256 = (SELECT tools_sha256 FROM turns LIMIT 1)",
    # a blob no row refers to
    "INSERT INTO blobs VALUES ('sha256:00', 'not the body of that hash')",
    "DELETE FROM audit_log WHERE seq = 5",
    "UPDATE audit_log SET operation_id = 'op_elsewhere' WHERE seq = 4",
    "UPDATE audit_log SET operation_id = NULL WHERE seq > 30",
    "UPDATE audit_log SET record = deflate(replace(inflate(record), 'COMPLETED', 'FAILED'))",
    "UPDATE calls SET state = 'FAILED' WHERE state = 'SUCCEEDED'",
]


@pytest.mark.parametrize("tamper", [None, *TAMPERS])
def test_a_store_checked_in_parts_finds_what_a_check_of_it_whole_finds(
    demo: Path, tmp_path: Path, tamper: str | None, one_operation_per_part: list[int]
) -> None:
    path = tampered_copy(demo, tmp_path / "store.db", tamper)
    whole = held_whole(path)
    in_parts = checked_in_parts(path)
    assert one_operation_per_part == [1, 1, 1, 1, 0]  # four operations, then the strays
    assert lines(in_parts) == lines(whole)
    assert in_parts.ok is (tamper is None)
    assert {k: v for k, v in in_parts.counts.items() if k != "pending_checked"} == whole.counts
    assert in_parts.head == whole.head


MOVED = [
    "UPDATE audit_log SET operation_id = 'op_elsewhere' WHERE seq = 4",
    "UPDATE audit_log SET operation_id = 'op_everywhere'",
]


@pytest.mark.parametrize("tamper", MOVED)
def test_records_moved_wholesale_are_read_with_the_operation_they_name(
    demo: Path,
    tmp_path: Path,
    tamper: str,
    one_operation_per_part: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past a few hundred moved records the log is filtered as it is read, not in SQL (each
    would be an SQL parameter): the findings are the same."""
    monkeypatch.setattr(store_parts, "_MOVED_IN_SQL", 0)
    path = tampered_copy(demo, tmp_path / "store.db", tamper)
    in_parts = checked_in_parts(path)
    assert not in_parts.ok
    assert lines(in_parts) == lines(held_whole(path))


def test_a_part_is_let_go_before_the_part_after_next_is_read(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_parts, "PART_CALLS", 1)
    parts: list[list[weakref.ref[_Tracked]]] = []
    alive_when_read: list[int] = []
    real = store_parts.read_part

    def tracked(store: Any, part: store_parts.Part) -> StoreRows:
        alive_when_read.append(sum(1 for refs in parts[:-1] for ref in refs if ref() is not None))
        rows = real(store, part)
        for table in store_parts.TABLES:
            setattr(rows, table, [_Tracked(r) for r in getattr(rows, table)])
        parts.append([weakref.ref(r) for table in store_parts.TABLES for r in getattr(rows, table)])
        return rows

    monkeypatch.setattr(store_parts, "read_part", tracked)
    store = open_store(demo, read_only=True)
    try:
        assert verify_store(store).ok
    finally:
        store.close()
    assert len(parts) == 5 and all(parts[:4])  # each operation's rows were read in a part
    assert alive_when_read == [0] * 5  # no row of a part before the last one is still held


def test_a_writer_committing_during_the_check_is_not_seen(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tampered_copy(demo, tmp_path / "store.db", None)
    before = checked_in_parts(path)
    real = store_parts.parts
    wrote: list[str] = []

    def with_a_writer(store: Any, operation_id: str | None) -> list[store_parts.Part]:
        # the chain has been walked; another process now starts an operation
        writer = open_store(path)
        try:
            wrote.append(start(writer, FakeClock()))
        finally:
            writer.close()
        return real(store, operation_id)

    monkeypatch.setattr(store_parts, "parts", with_a_writer)
    during = checked_in_parts(path)
    assert wrote  # the writer committed during the check
    assert during.ok and during.counts == before.counts and during.head == before.head


class _Tracked(dict[str, Any]):
    """A row that can be watched: alive while anything still holds it."""

    __slots__ = ("__weakref__",)
