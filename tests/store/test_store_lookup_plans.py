"""Call lookups stay index seeks as a run grows (no scan of every call of the operation).

Figures live in bench/; this checks the query plans that keep a lookup's cost independent of
how many calls the operation has made.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolloop_cli.engine.states import CALL_TRANSITIONS
from toolloop_cli.store import open_store
from toolloop_cli.store.migrations import OPEN_CALLS_WHERE
from toolloop_cli.store.repo import TURN_AND_UNSETTLED, earlier_calls_query
from toolloop_cli.store.rows import CALL_COLUMNS

LOOKUPS = {
    "by intent": ("name = ? AND arguments_sha256 = ?", "calls_intent"),
    "by idempotency key": ("idempotency_key = ?", "calls_key"),
}


@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_call_lookup_seeks_its_index_in_turn_order(tmp_path: Path, lookup: str) -> None:
    store = open_store(tmp_path / "store.db")
    where, index = LOOKUPS[lookup]
    sql = (
        f"EXPLAIN QUERY PLAN SELECT {CALL_COLUMNS} FROM calls"
        f" WHERE operation_id = ? AND {where} ORDER BY turn_idx, seq"
    )
    plan = " | ".join(
        row[3] for row in store.conn.execute(sql, ("op",) + ("x",) * where.count("?"))
    )
    store.close()
    assert f"USING INDEX {index}" in plan
    assert "TEMP B-TREE" not in plan  # the index gives the order: no sort of the matches


def test_validation_finds_earlier_calls_through_both_indexes_in_one_statement(
    tmp_path: Path,
) -> None:
    """``Store.earlier_calls``: each key and each intent of a turn is its own index seek."""
    store = open_store(tmp_path / "store.db")
    sql, args = earlier_calls_query("op", 3, [("read", "sha256:a"), ("read", "sha256:b")], ["k"])
    plan = " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
    store.close()
    assert plan.count("USING INDEX calls_intent") == 2, plan
    assert plan.count("USING INDEX calls_key") == 1, plan
    assert "SCAN calls" not in plan, plan


def test_a_call_is_found_by_its_response_and_call_id_through_the_unique_key(
    tmp_path: Path,
) -> None:
    """``get_call``: call ids are unique per response only, so the pair is the lookup."""
    store = open_store(tmp_path / "store.db")
    sql = (
        f"EXPLAIN QUERY PLAN SELECT {CALL_COLUMNS} FROM calls"
        " WHERE operation_id = ? AND response_id = ? AND call_id = ?"
    )
    plan = " | ".join(row[3] for row in store.conn.execute(sql, ("op", "resp", "call")))
    indexes = {r[1] for r in store.conn.execute("PRAGMA index_list(calls)")}
    store.close()
    assert "USING INDEX sqlite_autoindex_calls_1" in plan
    assert "calls_id" not in indexes  # by call id alone: nothing looks a call up that way


def test_an_operations_audit_records_are_read_newest_first_through_one_index(
    tmp_path: Path,
) -> None:
    """``audited_binding`` reads an operation's records newest first: ``audit_log_op_seq``
    seeks and orders them; the index that also held a call id (always null in a batch
    record) is gone, one index write less per record."""
    store = open_store(tmp_path / "store.db")
    sql = "SELECT record FROM audit_log WHERE operation_id = ? ORDER BY seq DESC"
    plan = " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("op",)))
    indexes = {
        name
        for (name,) in store.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_log'"
        )
    }
    store.close()
    assert "USING INDEX audit_log_op_seq" in plan and "TEMP B-TREE" not in plan, plan
    assert indexes == {"audit_log_op_seq"}


def test_a_postgresql_store_keeps_the_one_audit_log_index_by_operation(
    postgres_url: str,
) -> None:
    store = open_store(postgres_url)
    found = store.conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'audit_log'"
    ).fetchall()
    store.close()
    assert {name for (name,) in found} == {"audit_log_pkey", "audit_log_op_seq"}


def test_a_turns_calls_and_the_unsettled_ones_are_two_seeks_whatever_the_run_length(
    tmp_path: Path,
) -> None:
    """``Store.turn_and_unsettled_calls`` runs once per turn: the turn's calls through
    ``calls_turn``, the others through ``calls_open``, which holds only calls in a state they
    may still leave, so a long run's settled calls cost nothing."""
    store = open_store(tmp_path / "store.db")
    rows = store.conn.execute(f"EXPLAIN QUERY PLAN {TURN_AND_UNSETTLED}", ("op", 3) * 2)
    plan = " | ".join(row[3] for row in rows)
    store.close()
    assert "USING INDEX calls_turn" in plan, plan
    assert "USING INDEX calls_open" in plan, plan
    assert "SCAN" not in plan, plan


def test_the_open_call_states_are_every_state_a_call_may_still_leave() -> None:
    """The partial index's condition is written out in its migration; it must name exactly
    the call states with a way out."""
    named = set(re.findall(r"'([A-Z_]+)'", OPEN_CALLS_WHERE))
    assert named == {state.value for state, nexts in CALL_TRANSITIONS.items() if nexts}
