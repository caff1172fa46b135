"""Timeouts and broken connections with unknown outcomes.

A side effect whose handler times out or breaks after its intent was committed is never run
again blindly: the call is reconciled by the same idempotency key (RECONCILED with the
service's saved result), and what cannot be told stops the operation ESCALATED with an
account for the operator. Continuing it asks the service once more by the same key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support.harness import fake_refund_service as service
from support.harness.children import pool_map
from support.paths import HARNESS
from support.scripted import call, final, turn

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.loop import OperationTerminal
from toolloop_cli.engine.states import OpState
from toolloop_cli.service import operations
from toolloop_cli.store import Store, open_store

SERVICE = HARNESS / "service.yaml"
SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"
OPERATIONS = 1000 if SOAK else 50  # x 10 calls = 10 000 / 500 injections
MODES = (
    "ok",
    "apply_then_hang",
    "hang_then_apply",
    "apply_then_drop",
    "drop_before_apply",
    "mid_reply",
    "in_flight",
    "conflict",
)
#: the call's states once the operation is over, and whether the service applied it
EXPECTED = {
    "ok": ({"SUCCEEDED", "RECONCILED"}, 1),  # RECONCILED when a busy machine made it time out
    # SUCCEEDED when the hung handler still answered before toolloop saw its timeout pass
    "apply_then_hang": ({"RECONCILED", "SUCCEEDED"}, 1),
    # unknown at first; the service knows on continue
    "hang_then_apply": ({"RECONCILED", "SUCCEEDED"}, 1),
    "apply_then_drop": ({"RECONCILED"}, 1),
    "drop_before_apply": ({"FAILED"}, 0),  # the service has no record: it did not happen
    "mid_reply": ({"RECONCILED"}, 1),
    "in_flight": ({"FAILED"}, 0),  # still unknown when continued: reported as unknown
    "conflict": ({"FAILED"}, 0),  # a business answer: no retry
}

pytestmark = pytest.mark.timeout(900)


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def run_with_faults(store: Store, modes: list[str]) -> tuple[str, dict[str, Any]]:
    """One operation whose turn proposes a refund per mode; continue it if it escalates."""
    (store.data_dir / "faults.json").write_text(
        json.dumps({str(n + 1): mode for n, mode in enumerate(modes)})
    )
    calls = [
        call("refund", {"order_id": "ord_1", "amount_cents": n + 1}) for n in range(len(modes))
    ]
    options = operations.RunOptions(
        task="refunds", registry=SERVICE, provider="scripted", model="scripted-model"
    )
    result = operations.start(
        store, options, transport=ScriptedTransport([turn(*calls), final("done")])
    )
    op_id = result.operation.operation_id
    escalated = result.target is OpState.ESCALATED
    if escalated:
        assert "outcome unknown" in (result.operation.reason or "")
        service.wait_for_handlers(
            store.data_dir, len(modes)
        )  # the operator checks: nothing in flight
        result = operations.resume(
            store,
            op_id,
            force_continue=True,
            decided_by="ops-lead",
            transport=ScriptedTransport([final("done")]),
        )
    assert result.target is OpState.COMPLETED, result.operation.reason
    return op_id, {"escalated": escalated}


def _one_operation(args: tuple[Path, int]) -> dict[str, Any]:
    """Run one operation with ten random faults; return the problems found (in a worker)."""
    tmp_path, n = args
    rng = random.Random(n)
    folder = tmp_path / f"op{n}"
    folder.mkdir()
    store = open_store(folder / "store.db")
    modes = [rng.choice(MODES) for _ in range(10)]
    op_id, info = run_with_faults(store, modes)
    service.wait_for_handlers(
        folder, len(modes)
    )  # every abandoned handler finishes before counting
    calls = {c.arguments["amount_cents"]: c for c in store.calls(op_id) if c.arguments}
    service_db = folder / "service.db"
    applied = Counter(r[0] for r in _rows(service_db, "SELECT amount FROM applied"))
    keys = _rows(
        service_db, "SELECT amount, count(DISTINCT key), count(*) FROM attempts GROUP BY 1"
    )
    attempts = {amount: (distinct, total) for amount, distinct, total in keys}
    problems = []
    for i, mode in enumerate(modes):
        amount, c = i + 1, calls[i + 1]
        states, effects = EXPECTED[mode]
        distinct, total = attempts[amount]
        tries = service.MAX_TRIES if mode == "in_flight" else 1
        saved = _rows(service_db, f"SELECT result FROM applied WHERE amount = {amount}")
        checks = {
            f"state {c.state.value}": c.state.value in states or _told_unknown(c),
            f"{applied[amount]} effects": applied[amount] == effects,
            f"{distinct} keys": distinct == 1,  # every attempt under the call's one key
            f"{total} attempts": total == tries,  # never run again
            "result is not the saved one": c.state.value != "RECONCILED"
            or c.model_result == {"ok": True, "result": json.loads(saved[0][0])},
        }
        problems += [f"op{n} {mode}: {what}" for what, ok in checks.items() if not ok]
    # in flight cannot be told; a hung commit can be, if it lands before the lookup
    if "in_flight" in modes and not info["escalated"]:
        problems.append(f"op{n}: an unknown outcome did not escalate")
    store.close()
    return {"case": n, "problems": problems, "modes": modes}


def _told_unknown(c: Any) -> bool:
    """The operator continued while even the second lookup went unanswered (its own timeout
    on a busy machine): the model is told the outcome is unknown, never that it failed."""
    error = (c.model_result or {}).get("error") or {}
    return c.state.value == "FAILED" and error.get("code") == "outcome_unknown"


def test_unknown_outcomes_are_reconciled_by_the_same_key_and_never_repeated(
    tmp_path: Path,
) -> None:
    # mostly waiting on hung handlers: more workers than cores
    rows = pool_map(_one_operation, [(tmp_path, n) for n in range(OPERATIONS)], workers=8)
    assert [p for row in rows for p in row["problems"]] == []
    counts = Counter(m for row in rows for m in row["modes"])
    assert sum(counts.values()) == OPERATIONS * 10 and set(counts) == set(MODES)


def test_an_escalation_for_an_unknown_outcome_names_the_call_and_the_way_on(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    (tmp_path / "faults.json").write_text(json.dumps({"1": "in_flight"}))
    options = operations.RunOptions(
        task="refund", registry=SERVICE, provider="scripted", model="scripted-model"
    )
    result = operations.start(
        store,
        options,
        transport=ScriptedTransport([turn(call("refund", {"order_id": "o", "amount_cents": 1}))]),
    )
    assert result.target is OpState.ESCALATED
    reason = result.operation.reason or ""
    (c,) = store.calls(result.operation.operation_id)
    assert c.state.value == "UNKNOWN_OUTCOME" and c.call_id in reason
    assert "--force-continue" in reason
    assert c.protected_audit is not None and "409" in json.dumps(c.protected_audit)
    with pytest.raises(OperationTerminal, match="ESCALATED"):
        operations.resume(store, result.operation.operation_id)


def test_control_without_a_stable_key_a_made_payment_is_reported_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle can fail: without one key per intent, a payment that happened is reported
    as failed (the lookup under a fresh key finds nothing), so the model would pay again."""
    from toolloop_cli.engine import executing

    real_context = executing._context
    monkeypatch.setattr(
        executing,
        "_context",
        lambda deps, op, c: dataclasses.replace(
            real_context(deps, op, c), idempotency_key=f"idk_{random.random()}"
        ),
    )
    store = open_store(tmp_path / "store.db")
    op_id, _ = run_with_faults(store, ["apply_then_drop"])
    applied = _rows(tmp_path / "service.db", "SELECT count(*) FROM applied")[0][0]
    state = store.calls(op_id)[0].state.value
    assert applied == 1 and state not in EXPECTED["apply_then_drop"][0]


def test_continuing_after_the_tool_was_removed_reports_the_outcome_unknown(
    tmp_path: Path,
) -> None:
    """The once-more reconcile on continue asks only a tool that is still the one allowed."""
    module = "support.harness.fake_refund_service:"
    text = SERVICE.read_text().replace("fake_refund_service:", module)
    registry = tmp_path / "service.yaml"
    registry.write_text(text)
    store = open_store(tmp_path / "store.db")
    (tmp_path / "faults.json").write_text(json.dumps({"1": "in_flight"}))
    options = operations.RunOptions(
        task="refund", registry=registry, provider="scripted", model="scripted-model"
    )
    refund = call("refund", {"order_id": "o", "amount_cents": 1})
    result = operations.start(store, options, transport=ScriptedTransport([turn(refund)]))
    assert result.target is OpState.ESCALATED
    registry.write_text(text.replace("\n  refund:\n", "\n  refund_v2:\n"))  # refund is gone
    result = operations.resume(
        store,
        result.operation.operation_id,
        force_continue=True,
        decided_by="ops-lead",
        transport=ScriptedTransport([final("done")]),
    )
    assert result.target is OpState.COMPLETED
    (c,) = [c for c in store.calls(result.operation.operation_id) if c.turn_idx == 0]
    assert c.state.value == "FAILED" and c.model_result is not None
    assert c.model_result["error"]["code"] == "outcome_unknown"
