"""The refund example's ledger: seeded, draft-then-submit, idempotent, never over-refunding."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support.paths import REGISTRY as SHIPPED

from toolloop_cli.examples.refunds import (
    create_refund_draft,
    get_order,
    ledger_path,
    ledger_refunds,
    lookup_refund,
    submit_refund,
)
from toolloop_cli.tools.context import ToolContext, ToolError
from toolloop_cli.tools.dispatcher import execute, reconcile
from toolloop_cli.tools.registry import load_registry


@pytest.fixture(autouse=True)
def _no_ledger_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLLOOP_LEDGER", raising=False)
    monkeypatch.delenv("TOOLLOOP_REFUND_DELAY_MS", raising=False)


def ctx(tmp_path: Path, key: str = "idk_a", tool: str = "submit_refund") -> ToolContext:
    return ToolContext(
        operation_id="op_test",
        call_id="call_1",
        idempotency_key=key,
        tenant="acme",
        subject="alice",
        deadline=time.time() + 60,
        tool=tool,
        data_dir=tmp_path,
    )


def refund_1001(tmp_path: Path, key: str = "idk_a") -> dict[str, Any]:
    create_refund_draft({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    return submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path, key))


def test_fresh_ledger_is_seeded_with_the_three_orders(tmp_path: Path) -> None:
    context = ctx(tmp_path, tool="get_order")
    assert get_order({"order_id": "ord_1001"}, context) == {
        "order_id": "ord_1001",
        "status": "delivered",
        "amount_cents": 4999,
        "currency": "USD",
        "customer_id": "cus_42",
    }
    assert get_order({"order_id": "ord_1002"}, context)["amount_cents"] == 1250
    assert get_order({"order_id": "ord_1003"}, context)["status"] == "shipped"
    assert (tmp_path / "payments.db").exists()
    assert ledger_refunds(tmp_path / "payments.db") == []


def test_unknown_order_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="^order ord_9 not found$"):
        get_order({"order_id": "ord_9"}, ctx(tmp_path))


def test_draft_then_submit_makes_one_refund_and_consumes_the_draft(tmp_path: Path) -> None:
    draft = create_refund_draft(
        {"order_id": "ord_1001", "amount_cents": 4999, "reason": "damaged"}, ctx(tmp_path)
    )
    assert draft == {
        "draft_id": "drf_1001_1",
        "order_id": "ord_1001",
        "amount_cents": 4999,
        "status": "draft",
    }
    result = submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    assert result == {
        "refund_id": "rf_1001_1",
        "order_id": "ord_1001",
        "amount_cents": 4999,
        "status": "submitted",
    }
    [row] = ledger_refunds(tmp_path / "payments.db")
    assert row["idempotency_key"] == "idk_a" and row["draft_id"] == "drf_1001_1"
    assert row["result"] == result
    with closing(sqlite3.connect(tmp_path / "payments.db")) as conn:
        status = conn.execute("SELECT status FROM drafts WHERE draft_id = 'drf_1001_1'")
        assert status.fetchone() == ("submitted",)


def test_draft_ids_count_the_drafts_of_each_order(tmp_path: Path) -> None:
    ids = [
        create_refund_draft({"order_id": order, "amount_cents": 100}, ctx(tmp_path))["draft_id"]
        for order in ("ord_1001", "ord_1001", "ord_1002")
    ]
    assert ids == ["drf_1001_1", "drf_1001_2", "drf_1002_1"]


def test_draft_over_the_order_amount_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="over the refundable 4999 cents of ord_1001"):
        create_refund_draft({"order_id": "ord_1001", "amount_cents": 5000}, ctx(tmp_path))


def test_an_order_not_yet_delivered_cannot_be_refunded(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="ord_1003 is shipped"):
        create_refund_draft({"order_id": "ord_1003", "amount_cents": 100}, ctx(tmp_path))


def test_same_key_twice_returns_the_same_result_and_refunds_once(tmp_path: Path) -> None:
    first = refund_1001(tmp_path)
    again = submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    assert again == first
    assert len(ledger_refunds(tmp_path / "payments.db")) == 1


def test_same_key_with_other_parameters_is_a_tool_error(tmp_path: Path) -> None:
    refund_1001(tmp_path)
    create_refund_draft({"order_id": "ord_1002", "amount_cents": 1250}, ctx(tmp_path))
    with pytest.raises(ToolError, match="^idempotency key reused with different parameters$"):
        submit_refund({"order_id": "ord_1002", "amount_cents": 1250}, ctx(tmp_path))
    assert len(ledger_refunds(tmp_path / "payments.db")) == 1


def test_submit_without_an_open_draft_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="^no open refund draft for ord_1001 of 4999 cents$"):
        submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    create_refund_draft({"order_id": "ord_1001", "amount_cents": 100}, ctx(tmp_path))
    with pytest.raises(ToolError, match="no open refund draft"):
        submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    assert ledger_refunds(tmp_path / "payments.db") == []


def test_a_new_key_cannot_refund_an_already_refunded_order_again(tmp_path: Path) -> None:
    refund_1001(tmp_path, key="idk_first")
    with pytest.raises(ToolError, match="over the refundable 0 cents"):
        refund_1001(tmp_path, key="idk_second")
    assert [r["idempotency_key"] for r in ledger_refunds(tmp_path / "payments.db")] == ["idk_first"]


def test_lookup_refund_finds_the_saved_result_by_key_only(tmp_path: Path) -> None:
    assert lookup_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path)) is None
    result = refund_1001(tmp_path)
    assert lookup_refund({}, ctx(tmp_path)) == result
    assert lookup_refund({}, ctx(tmp_path, key="idk_other")) is None


def test_concurrent_submits_with_one_key_make_one_refund(tmp_path: Path) -> None:
    create_refund_draft({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    results: list[dict[str, Any]] = []
    errors: list[Exception] = []

    def submit() -> None:
        try:
            results.append(
                submit_refund({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
            )
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert len(ledger_refunds(tmp_path / "payments.db")) == 1


def test_ledger_env_var_overrides_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "other" / "ledger.db"
    monkeypatch.setenv("TOOLLOOP_LEDGER", str(elsewhere))
    assert ledger_path(ctx(tmp_path)) == elsewhere
    refund_1001(tmp_path)
    assert len(ledger_refunds(elsewhere)) == 1
    assert not (tmp_path / "payments.db").exists()


def test_delayed_submit_times_out_but_the_refund_is_committed_and_reconcilable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLLOOP_REFUND_DELAY_MS", "300")
    registry = load_registry(SHIPPED)
    submit = dataclasses.replace(registry.tools["submit_refund"], timeout_ms=100)
    create_refund_draft({"order_id": "ord_1001", "amount_cents": 4999}, ctx(tmp_path))
    arguments = {"order_id": "ord_1001", "amount_cents": 4999}
    outcome = execute(submit, arguments, ctx(tmp_path))
    assert outcome.status == "timed_out"
    # the handler committed before it slept: the refund lands while toolloop has given up on it
    # (waited for here, bounded, so a loaded machine cannot race the lookup against the commit)
    deadline = time.monotonic() + 10
    while not ledger_refunds(tmp_path / "payments.db") and time.monotonic() < deadline:
        time.sleep(0.01)
    # the reconcile question gets its own time, not the 100 ms the submit was cut at
    found = reconcile(dataclasses.replace(submit, timeout_ms=5000), arguments, ctx(tmp_path))
    assert found is not None and found.status == "ok"
    assert found.value == {
        "refund_id": "rf_1001_1",
        "order_id": "ord_1001",
        "amount_cents": 4999,
        "status": "submitted",
    }
    time.sleep(0.35)  # let the abandoned handler finish before tmp_path goes away


def test_shipped_registry_runs_the_whole_flow_through_the_dispatcher(tmp_path: Path) -> None:
    tools = load_registry(SHIPPED).tools
    order = execute(tools["get_order"], {"order_id": "ord_1002"}, ctx(tmp_path))
    assert order.status == "ok" and order.value["amount_cents"] == 1250
    missing = execute(tools["get_order"], {"order_id": "ord_9"}, ctx(tmp_path))
    assert (missing.status, missing.error) == ("tool_error", "order ord_9 not found")
    arguments = {"order_id": "ord_1002", "amount_cents": 1250}
    assert execute(tools["create_refund_draft"], arguments, ctx(tmp_path)).status == "ok"
    submitted = execute(tools["submit_refund"], arguments, ctx(tmp_path))
    assert submitted.status == "ok" and submitted.value["refund_id"] == "rf_1002_1"
