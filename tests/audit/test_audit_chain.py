"""A careful attacker with write access to the store: each step of covering tracks is caught,
until only the head kept elsewhere (``--expect-head``) can tell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.audit_log import edit_write, newest_write, rechain as relink
from support.clock import FakeClock
from support.stores import approval_of, behind_its_back, one_row, start

from toolloop_cli.audit.binding import call_binding_sha256, result_sha256
from toolloop_cli.audit.canonical import sha256_hex
from toolloop_cli.audit.hashing import chain_link
from toolloop_cli.audit.stored import record_text
from toolloop_cli.audit.verify import Report
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


@pytest.fixture
def two_ops(store_path: Path, clock: FakeClock) -> tuple[str, str]:
    """A completed refund, then a second operation paused for approval (the chain's tail)."""
    store = open_store(store_path)
    first = start(store, clock)
    approvals.approve(store, approval_of(store, first), "ops-lead", clock=clock)
    operations.resume(store, first, clock=clock)
    second = start(store, clock)
    store.close()
    return first, second


def check(path: Path, expect_head: str | None = None) -> Report:
    store = open_store(path)
    try:
        return verify_store(store, expect_head=expect_head)
    finally:
        store.close()


def fields(report: Report) -> set[tuple[str, str]]:
    return {(m.table, m.field) for m in report.mismatches}


def head(path: Path) -> str:
    return check(path).head.text()


def test_an_untouched_store_verifies(store_path: Path, two_ops: tuple[str, str]) -> None:
    report = check(store_path, expect_head=head(store_path))
    assert report.ok, [m.line() for m in report.mismatches]


def test_a_deleted_record_breaks_the_chain(store_path: Path, two_ops: tuple[str, str]) -> None:
    with behind_its_back(store_path) as conn:
        conn.execute("DELETE FROM audit_log WHERE seq = 10")
    report = check(store_path)
    assert ("audit_log", "prev_sha256") in fields(report)
    assert ("audit_log", "seq") in fields(report)


def test_two_swapped_records_break_the_chain(store_path: Path, two_ops: tuple[str, str]) -> None:
    with behind_its_back(store_path) as conn:
        rows = {
            seq: rest
            for seq, *rest in conn.execute(
                "SELECT seq, operation_id, kind, call_id, record, record_sha256, prev_sha256,"
                " chain_sha256 FROM audit_log WHERE seq IN (5, 15)"
            )
        }
        assert len(rows) == 2
        for seq, other in ((5, 15), (15, 5)):
            conn.execute(
                "UPDATE audit_log SET operation_id = ?, kind = ?, call_id = ?, record = ?,"
                " record_sha256 = ?, prev_sha256 = ?, chain_sha256 = ? WHERE seq = ?",
                (*rows[other], seq),
            )
    report = check(store_path)
    assert not report.ok
    assert {m.key for m in report.mismatches if m.table == "audit_log"} >= {"seq 5", "seq 15"}


def forge_result(path: Path, operation_id: str) -> str:
    """Edit a get_order result and recompute that row's own hashes; returns the call id."""
    with behind_its_back(path) as conn:
        call = one_row(
            conn.execute(
                "SELECT * FROM calls WHERE operation_id = ? AND name = 'get_order'",
                (operation_id,),
            )
        )
        op = one_row(
            conn.execute("SELECT * FROM operations WHERE operation_id = ?", (operation_id,))
        )
        forged = json.loads(call["model_result_json"])
        forged["result"]["amount_cents"] = 999_999
        call["model_result_json"] = json.dumps(forged, sort_keys=True)
        call["result_sha256"] = result_sha256(forged, json.loads(call["protected_audit_json"]))
        call["call_binding_sha256"] = call_binding_sha256(op, call, call["result_sha256"])
        conn.execute(
            "UPDATE calls SET model_result_json = ?, result_sha256 = ?, call_binding_sha256 = ?"
            " WHERE operation_id = ? AND call_id = ?",
            (
                call["model_result_json"],
                call["result_sha256"],
                call["call_binding_sha256"],
                operation_id,
                call["call_id"],
            ),
        )
        seq, index = newest_write(
            conn,
            "call",
            operation_id=operation_id,
            call_id=call["call_id"],
            column="model_result_json",
        )
        columns = ("model_result_json", "result_sha256", "call_binding_sha256")
        edit_write(conn, seq, index, **{k: call[k] for k in columns})
    return str(call["call_id"])


def _call_key(path: Path, operation_id: str, call_id: str) -> str:
    with behind_its_back(path) as conn:
        (response,) = conn.execute(
            "SELECT response_id FROM calls WHERE operation_id = ? AND call_id = ?",
            (operation_id, call_id),
        ).fetchone()
    return f"{operation_id}/{response}/{call_id}"


def rehash_record(path: Path, operation_id: str, call_id: str) -> int:
    """The attacker recomputes the forged record's own hash; returns its seq."""
    with behind_its_back(path) as conn:
        seq, _ = newest_write(
            conn, "call", operation_id=operation_id, call_id=call_id, column="model_result_json"
        )
        (text,) = conn.execute("SELECT record FROM audit_log WHERE seq = ?", (seq,)).fetchone()
        conn.execute(
            "UPDATE audit_log SET record_sha256 = ? WHERE seq = ?",
            (sha256_hex(record_text(text).encode()), seq),
        )
    return int(seq)


def rechain(path: Path, from_seq: int) -> None:
    """The attacker recomputes every link from ``from_seq`` to the end."""
    with behind_its_back(path) as conn:
        relink(conn, from_seq)


def test_an_edited_result_with_its_row_hashes_recomputed_is_caught_by_its_record(
    store_path: Path, two_ops: tuple[str, str]
) -> None:
    first, _ = two_ops
    call_id = forge_result(store_path, first)
    report = check(store_path)
    # the record still holds what the row no longer does; its hash no longer matches either
    assert ("audit_log", "record") in fields(report)
    mine = [m for m in report.mismatches if m.call_id == call_id]
    assert mine and all(m.operation_id == first for m in mine)


def test_recomputing_the_record_hash_too_is_caught_by_the_link(
    store_path: Path, two_ops: tuple[str, str]
) -> None:
    first, _ = two_ops
    call_id = forge_result(store_path, first)
    seq = rehash_record(store_path, first, call_id)
    report = check(store_path)
    # besides the link, only the conversation tells: it still carries the result that was sent
    assert sorted((m.key, m.field) for m in report.mismatches) == sorted(
        [
            (f"seq {seq}", "chain_sha256"),
            (_call_key(store_path, first, call_id), "model_result_json"),
        ]
    )


def test_recomputing_that_link_too_is_caught_by_the_next_one(
    store_path: Path, two_ops: tuple[str, str]
) -> None:
    first, _ = two_ops
    seq = rehash_record(store_path, first, forge_result(store_path, first))
    with behind_its_back(store_path) as conn:
        (prev, record_sha) = conn.execute(
            "SELECT prev_sha256, record_sha256 FROM audit_log WHERE seq = ?", (seq,)
        ).fetchone()
        conn.execute(
            "UPDATE audit_log SET chain_sha256 = ? WHERE seq = ?",
            (chain_link(seq, prev, record_sha), seq),
        )
    report = check(store_path)
    assert (f"seq {seq + 1}", "prev_sha256") in {(m.key, m.field) for m in report.mismatches}


def test_a_rewritten_chain_is_caught_only_against_a_head_kept_elsewhere(
    store_path: Path, two_ops: tuple[str, str]
) -> None:
    first, _ = two_ops
    kept = head(store_path)
    seq = rehash_record(store_path, first, forge_result(store_path, first))
    rechain(store_path, seq)
    # the chain is consistent again: only the result the model was sent tells (a rewrite of
    # the conversation and the requests too is the documented limit of an unkeyed chain:
    # tests/security/test_audit_history.py)
    assert fields(check(store_path)) == {("calls", "model_result_json")}
    report = check(store_path, expect_head=kept)
    assert fields(report) == {("audit_log", "chain_sha256"), ("calls", "model_result_json")}


def test_a_cut_off_tail_is_caught_with_expect_head(
    store_path: Path, two_ops: tuple[str, str]
) -> None:
    _, second = two_ops
    kept = head(store_path)
    with behind_its_back(store_path) as conn:  # drop the last operation and its records
        for table in ("approvals", "calls", "turns", "transitions", "conversation", "audit_log"):
            conn.execute(f"DELETE FROM {table} WHERE operation_id = ?", (second,))
        conn.execute("DELETE FROM operations WHERE operation_id = ?", (second,))
    assert check(store_path).ok  # every remaining row and link is intact
    report = check(store_path, expect_head=kept)
    assert [(m.table, m.key, m.field) for m in report.mismatches] == [
        ("audit_log", "head", "chain_sha256")
    ]
