"""Call lookups stay index seeks as a run grows (no scan of every call of the operation).

Figures live in bench/; this checks the query plans that keep a lookup's cost independent of
how many calls the operation has made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolloop_cli.store import open_store
from toolloop_cli.store.rows import CALL_COLUMNS

LOOKUPS = {
    "calls_with_intent": ("name = ? AND arguments_sha256 = ?", "calls_intent"),
    "calls_with_key": ("idempotency_key = ?", "calls_key"),
    "calls_with_id": ("call_id = ?", "calls_id"),
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
