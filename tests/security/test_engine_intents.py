"""Security review 2026-12-03, M4, L7 and the call-id half of H1: a call is (response id, call
id), so a call id reused in a later turn is another call, approved and bound as its own; an
answer repeating an earlier (response id, call id) pair fails; and an intent whose outcome is
unknown is never attempted again.

Each test runs the real engine (the scripted model, or the Gemini generateContent adapter
over a local transport) against real registries and handlers in a temporary folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.paths import REGISTRY
from support.scripted import GUARDS, answer, call, final, repeated_answer, reuse_script

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.loop import OperationTerminal
from toolloop_cli.engine.states import CallState, OpState
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations, views
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store

HANDLER = """
import time
def send(arguments, context):
    with open(context.data_dir / "effects.log", "a") as f:
        f.write(f"{arguments['msg']} {context.idempotency_key} {context.call_id}\\n")
    time.sleep(0.6)  # the effect happened; the handler overruns its 200 ms timeout
    return {"sent": True}
"""

REGISTRY_TEXT = """
registry: unk
revision: "1"
policy: {{revision: p1, approvers: [ops-lead]}}
tools:
  send_payment:
    schema_version: v1
    description: send a payment
    risk: write
    timeout_ms: 200
    handler: "m4_sendmod:send"
    approval: {approval}
    idempotency: {{key_fields: [msg]}}
    parameters:
      type: object
      properties: {{msg: {{type: string}}}}
      required: [msg]
      additionalProperties: false
"""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store.db")


def verified(store: Store) -> None:
    report = verify_store(store)
    assert report.ok, [m.line() for m in report.mismatches]


def scripted(registry: Path) -> operations.RunOptions:
    return operations.RunOptions(
        task="t", registry=registry, provider="scripted", model="scripted-model"
    )


# -- M4 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("approval", ["never", "always"])
def test_a_reproposed_intent_whose_outcome_is_unknown_is_not_attempted_again(
    store: Store, tmp_path: Path, approval: str
) -> None:
    """After --force-continue, the same intent under a new call id answers outcome_unknown."""
    (tmp_path / "m4_sendmod.py").write_text(HANDLER)
    registry = tmp_path / "reg.yaml"
    registry.write_text(REGISTRY_TEXT.format(approval=approval))
    first = [answer("resp_u0", call("send_payment", {"msg": "pay-100"}, "call_1"))]
    started = operations.start(store, scripted(registry), transport=ScriptedTransport(first))
    op_id = started.operation.operation_id
    if approval == "always":
        (apr,) = store.approvals(op_id)
        approvals.approve(store, apr.approval_id, "ops-lead")
        started = operations.resume(store, op_id, transport=ScriptedTransport([]))
    assert started.target is OpState.ESCALATED  # call_1: UNKNOWN_OUTCOME, no reconcile handler
    again = ScriptedTransport(
        [answer("resp_u1", call("send_payment", {"msg": "pay-100"}, "call_2")), final("done")]
    )
    result = operations.resume(
        store, op_id, force_continue=True, decided_by="ops-lead", transport=again
    )
    time.sleep(0.8)  # every abandoned handler has finished before the effects are counted
    assert result.target is OpState.COMPLETED, result.operation.reason
    effects = (tmp_path / "effects.log").read_text().splitlines()
    assert len(effects) == 1 and effects[0].endswith(" call_1")  # one attempt at the intent
    first_call, second = store.calls(op_id)
    assert (first_call.state, second.state) == (CallState.FAILED, CallState.DUPLICATE)
    assert second.idempotency_key == first_call.idempotency_key
    assert second.model_result == {**(first_call.model_result or {}), "duplicate_of": "call_1"}
    assert second.model_result["error"]["code"] == "outcome_unknown"
    assert len(store.approvals(op_id)) == (1 if approval == "always" else 0)  # nobody re-asked
    verified(store)


# -- L7 -------------------------------------------------------------------------------------


def test_an_answer_repeating_an_earlier_response_and_call_id_fails_the_operation(
    store: Store,
) -> None:
    """The same (response id, call id) again is a malformed answer: FAILED, not wedged."""
    transport = ScriptedTransport(repeated_answer())
    result = operations.start(store, scripted(GUARDS), transport=transport)
    assert result.target is OpState.FAILED
    reason = result.operation.reason or ""
    assert "malformed payload" in reason and "'call_X'" in reason and "'resp_SAME'" in reason
    assert "turn 0" in reason
    op_id = result.operation.operation_id
    assert [(c.turn_idx, c.arguments) for c in store.calls(op_id)] == [(0, {"n": 1})]
    assert len(transport.requests) == 2
    with pytest.raises(OperationTerminal, match="already FAILED"):
        operations.resume(store, op_id, transport=transport)
    assert len(transport.requests) == 2  # nothing is sent again
    verified(store)


# -- H1: a call id reused across turns --------------------------------------------------------


def _reused_then_approved(store: Store) -> tuple[str, ScriptedTransport]:
    """The review's reuse.yaml, run to the submit's approval, approved and resumed."""
    transport = ScriptedTransport(reuse_script())
    result = operations.start(store, scripted(REGISTRY), transport=transport)
    assert result.target is OpState.WAITING_APPROVAL, result.operation.reason
    op_id = result.operation.operation_id
    (apr,) = store.approvals(op_id)
    assert (apr.response_id, apr.call_id, apr.tool) == ("resp_t2", "call_X", "submit_refund")
    shown = views.approval_view(store, apr.approval_id)["call"]  # what the approver is shown
    assert shown["arguments"] == {"order_id": "ord_1001", "amount_cents": 4999}
    assert (shown["response_id"], shown["turn"]) == ("resp_t2", 2)
    assert ledger_refunds(store.data_dir / "payments.db") == []  # nothing before the decision
    approvals.approve(store, apr.approval_id, "ops-lead")
    done = operations.resume(store, op_id, transport=transport)
    assert done.target is OpState.COMPLETED, done.operation.reason
    return op_id, transport


def test_a_call_id_reused_in_a_later_turn_is_its_own_call_approved_with_its_own_arguments(
    store: Store,
) -> None:
    """A provider may name a later turn's call like an earlier one: it is another call, run
    only once a person approved what it does (its own arguments, not the 1-cent draft's)."""
    op_id, transport = _reused_then_approved(store)
    calls = store.calls(op_id)
    assert [(c.response_id, c.call_id, c.name, c.state) for c in calls] == [
        ("resp_t0", "call_X", "create_refund_draft", CallState.SUCCEEDED),
        ("resp_t1", "call_Y", "create_refund_draft", CallState.SUCCEEDED),
        ("resp_t2", "call_X", "submit_refund", CallState.SUCCEEDED),
    ]
    (refund,) = ledger_refunds(store.data_dir / "payments.db")
    assert refund["amount_cents"] == 4999 and refund["idempotency_key"] == calls[2].idempotency_key
    assert calls[0].model_result and calls[0].model_result["result"]["amount_cents"] == 1
    sent = transport.requests[3].body["input"][-1]  # the submit's own result, under its id
    assert (sent["call_id"], sent["content"]) == ("call_X", calls[2].model_result)
    verified(store)


def test_the_audited_binding_is_the_one_of_the_call_of_that_response(store: Store) -> None:
    op_id, _ = _reused_then_approved(store)
    earlier, _, later = store.calls(op_id)
    assert earlier.call_binding_sha256 and later.call_binding_sha256
    assert earlier.call_binding_sha256 != later.call_binding_sha256
    assert store.audited_binding(op_id, "resp_t0", "call_X") == earlier.call_binding_sha256
    assert store.audited_binding(op_id, "resp_t2", "call_X") == later.call_binding_sha256
    assert store.audited_binding(op_id, "resp_t1", "call_X") is None


# -- Gemini generateContent: ids the adapter makes up never collide ----------------------------


class GeminiAnswers:
    """A transport answering generateContent requests from a list of bodies (no network)."""

    name = "test"

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        body = json.dumps(self.bodies[len(self.requests) - 1]).encode()
        return HttpResponse(status=200, headers={"content-type": "application/json"}, body=body)


def gemini(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """An answer without ``responseId``, as some proxies send (the ids are then made up)."""
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
    }


def test_made_up_gemini_call_ids_never_collide_across_identical_answers(store: Store) -> None:
    """Two identical answers without a response id: two calls, the second a repeat, not INVALID."""
    same = gemini([{"functionCall": {"name": "echo", "args": {"n": 1}}}])
    transport = GeminiAnswers([same, same, gemini([{"text": "done"}])])
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="gemini-generate", model="gemini-2.5-flash"
    )
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.COMPLETED, result.operation.reason
    first, second = store.calls(result.operation.operation_id)
    assert first.call_id != second.call_id
    assert first.call_id.startswith("gcall_") and second.call_id.startswith("gcall_")
    assert (first.state, second.state) == (CallState.SUCCEEDED, CallState.DUPLICATE)
    assert (second.model_result or {})["repeat_of"] == first.call_id
    for request in transport.requests[1:]:  # a made-up id is never sent to Gemini
        responses = [
            p["functionResponse"]
            for c in request.body["contents"]
            for p in c["parts"]
            if "functionResponse" in p
        ]
        assert responses and all("id" not in r for r in responses)
    verified(store)


def test_made_up_gemini_call_ids_never_collide_under_a_gateways_constant_response_id(
    store: Store,
) -> None:
    """A gateway sending one ``responseId`` with every answer: the repeated call is a second
    call of its own turn, not a malformed payload."""
    same = {**gemini([{"functionCall": {"name": "echo", "args": {"n": 1}}}]), "responseId": "r"}
    done = {**gemini([{"text": "done"}]), "responseId": "r"}
    transport = GeminiAnswers([same, same, done])
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="gemini-generate", model="gemini-2.5-flash"
    )
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.COMPLETED, result.operation.reason
    first, second = store.calls(result.operation.operation_id)
    assert (first.response_id, second.response_id) == ("r", "r")
    assert second.call_id == f"{first.call_id}_t1"  # the first keeps the adapter's id
    assert (first.state, second.state) == (CallState.SUCCEEDED, CallState.DUPLICATE)
    verified(store)


def test_a_provider_call_id_repeated_under_a_constant_response_id_is_still_refused(
    store: Store,
) -> None:
    """Only ids the adapter made up are qualified: a provider's own id said twice is a
    repeated answer, FAILED as before."""
    call = {"functionCall": {"id": "fc_1", "name": "echo", "args": {"n": 1}}}
    same = {**gemini([call]), "responseId": "r"}
    transport = GeminiAnswers([same, same])
    options = operations.RunOptions(
        task="t", registry=GUARDS, provider="gemini-generate", model="gemini-2.5-flash"
    )
    result = operations.start(store, options, transport=transport)
    assert result.target is OpState.FAILED
    assert "malformed payload" in (result.operation.reason or "")
    verified(store)
