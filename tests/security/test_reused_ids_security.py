"""A provider that reuses call ids across turns cannot make one call's approval or result
apply to another.

A call is (operation, response id, call id). Here every turn names its calls ``call_0``,
``call_1``: two refund submits in two turns are both ``call_0``. Proven with the real engine,
the refund registry and its ledger, and the scripted model:

(a) an approval decided for one turn's ``call_0`` is never applied to the other turn's
    ``call_0``, in either order, and a call pointed at the other turn's approval is refused
    before anything runs;
(b) each turn's results go back paired with that turn's calls, and a sealed result copied
    from the other ``call_0`` is refused before anything is sent;
(c) ``verify`` is clean on such a store and still finds a tampered result of either call,
    under that call's own key, whether the hashes were recomputed or not.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.audit_log import append_record
from support.paths import REGISTRY
from support.scripted import answer, call, final

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.audit.binding import call_binding_sha256, result_sha256
from toolloop_cli.engine.states import ApprovalStatus, CallState, OpState
from toolloop_cli.errors import TamperedStore
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations, views
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store

FIRST = {"order_id": "ord_1001", "amount_cents": 4999}
SECOND = {"order_id": "ord_1002", "amount_cents": 1250}


def script() -> list[dict[str, Any]]:
    """Two drafts, then one submit per turn, each submit named call_0."""
    return [
        answer(
            "resp_t0",
            call("create_refund_draft", FIRST, "call_0"),
            call("create_refund_draft", SECOND, "call_1"),
        ),
        answer("resp_t1", call("submit_refund", FIRST, "call_0")),
        answer("resp_t2", call("submit_refund", SECOND, "call_0")),
        final("done"),
    ]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store.db")


def options() -> operations.RunOptions:
    return operations.RunOptions(
        task="t", registry=REGISTRY, provider="scripted", model="scripted-model"
    )


def ledger(store: Store) -> list[str]:
    return [r["order_id"] for r in ledger_refunds(store.data_dir / "payments.db")]


def submit(store: Store, op_id: str, response_id: str) -> Any:
    found = store.get_call(op_id, response_id, "call_0")
    assert found is not None and found.name == "submit_refund"
    return found


def pending(store: Store, op_id: str) -> Any:
    (apr,) = [a for a in store.approvals(op_id) if a.status is ApprovalStatus.PENDING]
    return apr


def decide(store: Store, approval_id: str, decision: str) -> None:
    if decision == "approve":
        approvals.approve(store, approval_id, "ops-lead")
    else:
        approvals.approve(store, approval_id, "finance", deny=True, reason="not this one")


def verified(store: Store) -> None:
    report = verify_store(store)
    assert report.ok, [m.line() for m in report.mismatches]


def completed(store: Store) -> tuple[str, ScriptedTransport]:
    """Both submits approved: the operation COMPLETED with two refunds."""
    transport = ScriptedTransport(script())
    op_id = operations.start(store, options(), transport=transport).operation.operation_id
    for _ in range(2):
        approvals.approve(store, pending(store, op_id).approval_id, "ops-lead")
        result = operations.resume(store, op_id, transport=transport)
    assert result.target is OpState.COMPLETED, result.operation.reason
    return op_id, transport


# -- (a) approvals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "decisions", [("approve", "deny"), ("deny", "approve")], ids=["approve-deny", "deny-approve"]
)
def test_an_approval_for_one_turns_call_0_is_never_applied_to_another_turns_call_0(
    store: Store, decisions: tuple[str, str]
) -> None:
    transport = ScriptedTransport(script())
    started = operations.start(store, options(), transport=transport)
    assert started.target is OpState.WAITING_APPROVAL
    op_id = started.operation.operation_id
    first = pending(store, op_id)
    assert (first.response_id, first.call_id) == ("resp_t1", "call_0")
    assert views.approval_view(store, first.approval_id)["call"]["arguments"] == FIRST
    decide(store, first.approval_id, decisions[0])
    again = operations.resume(store, op_id, transport=transport)

    # turn 2's call_0 waits for its own approval: turn 1's decision is not its decision
    assert again.target is OpState.WAITING_APPROVAL
    second = pending(store, op_id)
    assert second.approval_id != first.approval_id
    assert (second.response_id, second.call_id) == ("resp_t2", "call_0")
    later = submit(store, op_id, "resp_t2")
    assert (later.state, later.approval_id) == (CallState.WAITING_APPROVAL, second.approval_id)
    shown = views.approval_view(store, second.approval_id)["call"]
    assert (shown["arguments"], shown["response_id"], shown["turn"]) == (SECOND, "resp_t2", 2)
    assert ledger(store) == (["ord_1001"] if decisions[0] == "approve" else [])

    decide(store, second.approval_id, decisions[1])
    done = operations.resume(store, op_id, transport=transport)
    assert done.target is OpState.COMPLETED, done.operation.reason
    # and turn 2's decision changed nothing of turn 1's call or approval
    states = {"approve": CallState.SUCCEEDED, "deny": CallState.DENIED}
    assert submit(store, op_id, "resp_t1").state is states[decisions[0]]
    assert submit(store, op_id, "resp_t2").state is states[decisions[1]]
    statuses = {"approve": ApprovalStatus.APPROVED, "deny": ApprovalStatus.DENIED}
    assert store.get_approval(first.approval_id).status is statuses[decisions[0]]
    assert store.get_approval(second.approval_id).status is statuses[decisions[1]]
    orders = {"approve": ["ord_1001"], "deny": []}[decisions[0]] + {
        "approve": ["ord_1002"],
        "deny": [],
    }[decisions[1]]
    assert ledger(store) == orders
    decided = [t for t in store.transitions(op_id) if t["kind"] == "approval"]
    assert [(t["response_id"], t["call_id"]) for t in decided] == [
        ("resp_t1", "call_0"),
        ("resp_t2", "call_0"),
    ]
    verified(store)


def test_a_call_pointed_at_the_other_turns_approval_is_refused_before_it_runs(
    store: Store, tmp_path: Path
) -> None:
    """Turn 1's call_0 was approved; turn 2's call_0 is made to name that approval."""
    transport = ScriptedTransport(script())
    op_id = operations.start(store, options(), transport=transport).operation.operation_id
    first = pending(store, op_id)
    approvals.approve(store, first.approval_id, "ops-lead")
    assert operations.resume(store, op_id, transport=transport).target is OpState.WAITING_APPROVAL
    conn = sqlite3.connect(tmp_path / "store.db")
    conn.execute(
        "UPDATE calls SET approval_id = ? WHERE response_id = 'resp_t2' AND call_id = 'call_0'",
        (first.approval_id,),
    )
    conn.commit()
    conn.close()
    # the approval a call waits on must name that call, before its decision is applied
    with pytest.raises(TamperedStore, match="which names call call_0 of response resp_t1 "):
        operations.resume(store, op_id, transport=transport)
    assert ledger(store) == ["ord_1001"]  # the second refund never ran
    assert submit(store, op_id, "resp_t2").state is CallState.WAITING_APPROVAL
    report = verify_store(store)
    assert {(m.table, m.key, m.field) for m in report.mismatches} >= {
        ("calls", f"{op_id}/resp_t2/call_0", "approval_id")
    }


# -- (b) results -----------------------------------------------------------------------------


def test_each_turns_results_go_back_paired_with_that_turns_calls(store: Store) -> None:
    op_id, transport = completed(store)
    turn1, turn2 = submit(store, op_id, "resp_t1"), submit(store, op_id, "resp_t2")
    assert turn1.model_result["result"]["order_id"] == "ord_1001"
    assert turn2.model_result["result"]["order_id"] == "ord_1002"

    def results(request: Any) -> list[tuple[str, Any]]:
        return [
            (i["call_id"], i["content"]) for i in request.body["input"] if i.get("role") == "tool"
        ]

    assert results(transport.requests[2])[-1] == ("call_0", turn1.model_result)
    assert results(transport.requests[3])[-1] == ("call_0", turn2.model_result)
    assert results(transport.requests[3])[-2] == ("call_0", turn1.model_result)
    verified(store)


def test_a_sealed_result_copied_from_the_other_call_0_is_never_sent(
    store: Store, tmp_path: Path
) -> None:
    """Turn 1's call_0 result, hash and binding copied onto turn 2's call_0 before it is
    sent: the binding names its response and turn, so the result set is refused."""
    transport = ScriptedTransport(script())
    op_id = operations.start(store, options(), transport=transport).operation.operation_id
    approvals.approve(store, pending(store, op_id).approval_id, "ops-lead")
    operations.resume(store, op_id, transport=transport)
    approvals.approve(store, pending(store, op_id).approval_id, "ops-lead")
    while store.get_operation(op_id).state is not OpState.RESULTS_READY:
        operations.step(store, op_id, transport=transport)
    sent_before = len(transport.requests)
    conn = sqlite3.connect(tmp_path / "store.db")
    conn.execute(
        "UPDATE calls SET (model_result_json, protected_audit_json, result_sha256,"
        " call_binding_sha256) = (SELECT model_result_json, protected_audit_json,"
        " result_sha256, call_binding_sha256 FROM calls WHERE response_id = 'resp_t1')"
        " WHERE response_id = 'resp_t2' AND call_id = 'call_0'"
    )
    conn.commit()
    conn.close()
    result = operations.step(store, op_id, transport=transport)
    assert result.target is OpState.ESCALATED
    assert "results not sent: integrity check failed" in (result.operation.reason or "")
    assert len(transport.requests) == sent_before  # nothing was sent


# -- (c) verify ------------------------------------------------------------------------------


def forge(path: Path, response_id: str, *, reseal: bool) -> None:
    """Rewrite one call_0's result; with ``reseal`` also its hashes and a record at the tail,
    as someone with write access and toolloop's own functions would."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("BEGIN IMMEDIATE")
    key = "WHERE response_id = ? AND call_id = 'call_0'"
    row = dict(conn.execute(f"SELECT * FROM calls {key}", (response_id,)).fetchone())
    result = json.loads(row["model_result_json"])
    result["result"]["amount_cents"] = 1
    row["model_result_json"] = json.dumps(result)
    conn.execute(
        f"UPDATE calls SET model_result_json = ? {key}", (row["model_result_json"], response_id)
    )
    if reseal:
        op = dict(conn.execute("SELECT * FROM operations").fetchone())
        digest = result_sha256(result, json.loads(row["protected_audit_json"]))
        row.update(result_sha256=digest, call_binding_sha256=call_binding_sha256(op, row, digest))
        conn.execute(
            f"UPDATE calls SET result_sha256 = ?, call_binding_sha256 = ? {key}",
            (row["result_sha256"], row["call_binding_sha256"], response_id),
        )
        append_record(conn, "call", row)
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.parametrize("reseal", [False, True], ids=["row", "resealed"])
@pytest.mark.parametrize("response_id", ["resp_t1", "resp_t2"])
def test_verify_finds_a_tampered_result_of_either_call_0_under_its_own_key(
    store: Store, tmp_path: Path, response_id: str, reseal: bool
) -> None:
    op_id, _ = completed(store)
    verified(store)  # clean first: two calls named call_0 are two calls
    store.close()
    path = tmp_path / "store.db"
    forge(path, response_id, reseal=reseal)
    report = verify_store(open_store(path))
    assert not report.ok
    about_calls = {(m.key.split(" ")[0], m.field) for m in report.mismatches if m.table == "calls"}
    assert about_calls and {k for k, _ in about_calls} == {f"{op_id}/{response_id}/call_0"}
    assert "model_result_json" in {f for _, f in about_calls}
    original = {"resp_t1": '"amount_cents":4999', "resp_t2": '"amount_cents":1250'}[response_id]
    sent = [m for m in report.mismatches if '"role":"tool"' in str(m.expected)]
    assert sent and all(original in str(m.expected) for m in sent)  # what the model was sent
    assert all(m.call_id == "call_0" for m in report.mismatches if m.table == "calls")
