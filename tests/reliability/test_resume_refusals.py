"""What ``resume`` refuses.

- Resuming or stepping an operation that is over is a typed error that sends nothing to the
  model and runs no tool.
- An approval is pinned to the tool definition and policy it was asked under: if the
  registry changed while the operation waited, the approved call is not run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.harness.ops import waiting_refund
from support.harness.scenario import REFUNDS, FixedClock
from support.scripted import call, final, handler_log, run_script, turn

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.loop import OperationTerminal
from toolloop_cli.errors import ApprovalError, RegistryDrift
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import Store, open_store

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store.db")


# -- 1d. terminal operations ----------------------------------------------------------------------

ENDINGS: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "COMPLETED": ([turn(call("echo", {"n": 1})), final()], {}),
    "REFUSED": ([{"refusal": "no"}], {}),
    "INCOMPLETE": ([{"truncated": "max_tokens"}], {}),
    "FAILED": ([{"error": 400}], {}),
    "NO_PROGRESS": ([turn(call("echo", {"n": 1}))] * 3, {"no_progress_after": 3}),
    "BUDGET_EXHAUSTED": (
        [turn(call("echo", {"n": 1})), turn(call("echo", {"n": 2}))],
        {"max_turns": 1},
    ),
    "ESCALATED": ([turn(call("needs_person"))], {}),
}
CASES = [(state, how) for state in ENDINGS for how in ("resume", "step", "force")] * (
    10 if SOAK else 1
)


@pytest.mark.parametrize(("state", "how"), CASES)
def test_an_operation_that_is_over_is_never_run_again(store: Store, state: str, how: str) -> None:
    answers, guards = ENDINGS[state]
    result, transport = run_script(store, answers, **guards)
    assert result.target.value == state
    op_id = result.operation.operation_id
    before = (len(transport.requests), len(handler_log(store)), store.transitions(op_id))
    fresh = ScriptedTransport([final()] * 3)
    with pytest.raises(OperationTerminal, match=state):
        if how == "step":
            operations.step(store, op_id, transport=fresh)
        elif how == "force" and state != "ESCALATED":
            operations.resume(
                store, op_id, force_continue=True, decided_by="ops-lead", transport=fresh
            )
        else:
            operations.resume(store, op_id, transport=fresh)
    assert fresh.requests == []
    assert (len(transport.requests), len(handler_log(store)), store.transitions(op_id)) == before
    assert store.get_operation(op_id).state.value == state


# -- 18. registry drift ---------------------------------------------------------------------------


def _drift(tmp_path: Path, change: str) -> Path:
    """A copy of the refunds registry, changed as named."""
    doc = yaml.safe_load(REFUNDS.read_text())
    submit = doc["tools"]["submit_refund"]
    match change:
        case "schema":
            submit["parameters"]["properties"]["memo"] = {"type": "string"}
        case "removed":
            del doc["tools"]["submit_refund"]
        case "description":  # any change to the tool changes its hash
            submit["description"] += " (v2)"
        case "timeout":
            submit["timeout_ms"] = 9000
        case "policy":
            doc["policy"]["revision"] = "pol-4"
        case "reordered":  # not a change: the parsed tool is the same
            doc["tools"] = dict(reversed(list(doc["tools"].items())))
    path = tmp_path / "refunds.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


DRIFTS = ["schema", "removed", "description", "timeout", "policy"]

#: a changed or removed tool is registry drift; a changed policy refuses the approval
REFUSED_AS: dict[str, type[Exception]] = {
    "schema": RegistryDrift,
    "removed": RegistryDrift,
    "description": RegistryDrift,
    "timeout": RegistryDrift,
    "policy": ApprovalError,
}


@pytest.mark.parametrize("change", DRIFTS * (10 if SOAK else 1))
def test_an_approved_call_is_not_run_after_its_registry_changed(
    tmp_path: Path, change: str
) -> None:
    registry = _drift(tmp_path, "none")
    store = open_store(tmp_path / "store.db")
    op_id, apr = waiting_refund(store, registry=registry)
    approvals.approve(store, apr, "ops-lead", clock=FixedClock())
    _drift(tmp_path, change)
    with pytest.raises(REFUSED_AS[change], match="nothing was run|the call was not run"):
        operations.resume(store, op_id, clock=FixedClock())
    assert ledger_refunds(tmp_path / "payments.db") == []
    submit = next(c for c in store.calls(op_id) if c.name == "submit_refund")
    assert submit.state.value in ("WAITING_APPROVAL", "APPROVED")
    assert store.get_operation(op_id).state.value in ("WAITING_APPROVAL", "EXECUTING")


def test_control_a_reordered_registry_is_not_drift(tmp_path: Path) -> None:
    registry = _drift(tmp_path, "none")
    store = open_store(tmp_path / "store.db")
    op_id, apr = waiting_refund(store, registry=registry)
    approvals.approve(store, apr, "ops-lead", clock=FixedClock())
    _drift(tmp_path, "reordered")
    assert operations.resume(store, op_id, clock=FixedClock()).target.value == "COMPLETED"
    assert len(ledger_refunds(tmp_path / "payments.db")) == 1
