"""The crash harness over an MCP side effect: a forked run is SIGKILLed between the intent
commit and the result commit of ``submit_refund`` served by a real MCP server (stdio), then a
resume in a new process state reconciles by the same idempotency key: one refund, never two."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness.children import fork_call
from support.mcp_servers import announced, refund_registry, stdio_entry
from support.scripted import answer, call, final, run_script

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import operations
from toolloop_cli.store import open_store
from toolloop_cli.tools.mcp_client import close_all

pytestmark = pytest.mark.timeout(180)
REFUND = {"order_id": "ord_1001", "amount_cents": 4999}


@pytest.fixture(autouse=True)
def _close_servers() -> Iterator[None]:
    close_all()  # a forked child must not inherit a live connection
    yield
    close_all()


@pytest.mark.parametrize(
    ("boundary", "settled"),
    [
        # the effect happened, its result was never committed: the server confirms the key
        ("after_effect_before_result_commit", "RECONCILED"),
        # killed before the request was sent: no record of the key, so it runs (once)
        ("after_intent_commit", "SUCCEEDED"),
    ],
)
def test_a_kill_around_an_mcp_side_effect_resumes_to_exactly_one_refund(
    tmp_path: Path, boundary: str, settled: str
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    entry = stdio_entry(ledger)
    registry = refund_registry(
        tmp_path, entry, announced(entry), submit_refund={"approval": "never"}
    )
    store_path = tmp_path / "store.db"
    script = [
        answer("resp_1", call("create_refund_draft", REFUND, "call_1")),
        answer("resp_2", call("submit_refund", REFUND, "call_2")),
        final("refunded"),
    ]

    def crashing_run() -> None:
        run_script(open_store(store_path), script, registry=registry)

    # the second side-effect boundary is submit_refund's (the first is the draft's)
    status = fork_call(crashing_run, failpoint=f"{boundary}:2")
    assert status == -signal.SIGKILL
    store = open_store(store_path)
    (op,) = store.list_operations()
    submit = next(c for c in store.calls(op.operation_id) if c.name == "submit_refund")
    assert submit.state.value == "EXECUTING"  # the intent was committed, the result was not
    refunds_before = ledger_refunds(ledger / "payments.db")
    assert len(refunds_before) == (1 if settled == "RECONCILED" else 0)

    done = operations.resume(store, op.operation_id, transport=ScriptedTransport([final("ok")]))
    assert done.operation.state.value == "COMPLETED"
    submit = next(c for c in store.calls(op.operation_id) if c.name == "submit_refund")
    assert submit.state.value == settled
    (refund,) = ledger_refunds(ledger / "payments.db")
    assert refund["idempotency_key"] == submit.idempotency_key
    assert submit.model_result is not None
    assert submit.model_result["result"]["refund_id"] == refund["refund_id"]
