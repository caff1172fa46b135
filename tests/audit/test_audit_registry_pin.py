"""A pending call stays pinned to the registry it was allowed under; formatting does not count."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.stores import behind_its_back

from toolloop_cli.errors import RegistryDrift
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A private copy of the refunds registry the test may edit under a paused operation."""
    path = tmp_path / "registry" / "refunds.yaml"
    path.parent.mkdir()
    shutil.copy(REGISTRY, path)
    return path


def paused(cli: Invoke, registry: Path) -> tuple[str, str]:
    run = ("run", TASK, "--registry", str(registry), "--transcript", str(REFUND_OPENAI))
    result = cli(*run, "--json")
    assert result.exit_code == 10, result.output
    view = json_out(result)
    (apr,) = [a for a in view["approvals"] if a["status"] == "PENDING"]
    return str(view["operation_id"]), str(apr["approval_id"])


def edit(registry: Path, change: Any) -> None:
    doc = yaml.safe_load(registry.read_text())
    change(doc)
    registry.write_text(yaml.safe_dump(doc, sort_keys=False))


def store_rows(store_path: Path) -> list[tuple[Any, ...]]:
    with behind_its_back(store_path) as conn:
        return [
            *(tuple(r) for r in conn.execute("SELECT call_id, state FROM calls ORDER BY call_id")),
            *(tuple(r) for r in conn.execute("SELECT count(*) FROM audit_log")),
        ]


CHANGES = {
    "tool schema": lambda d: d["tools"]["submit_refund"]["parameters"]["properties"][
        "amount_cents"
    ].update(maximum=99_999_999),
    "tool timeout": lambda d: d["tools"]["submit_refund"].update(timeout_ms=9000),
    "tool removed": lambda d: d["tools"].pop("submit_refund"),
    "policy revision": lambda d: d["policy"].update(revision="pol-4"),
}
NEEDLES = {
    "tool schema": "submit_refund changed",
    "tool timeout": "submit_refund changed",
    "tool removed": "submit_refund was removed",
    "policy revision": "policy pol-3, the registry now has pol-4",
}


@pytest.mark.parametrize("decided", [False, True], ids=["pending", "approved"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_resume_refuses_when_the_registry_changed_under_a_pending_approval(
    cli: Invoke, store_path: Path, registry: Path, change: str, decided: bool
) -> None:
    op_id, apr = paused(cli, registry)
    if decided:
        assert cli("approve", apr, "--as", "ops-lead").exit_code == 0
    edit(registry, CHANGES[change])
    before = store_rows(store_path)
    result = cli("resume", op_id)
    assert result.exit_code == 2
    assert NEEDLES[change] in result.stderr and "not run" in result.stderr
    assert store_rows(store_path) == before  # nothing ran, nothing was written
    assert ledger_refunds(store_path.parent / "payments.db") == []
    drift = json_out(cli("verify", "--json"))
    assert cli("verify").exit_code == 20
    assert {m["table"] for m in drift["mismatches"]} == {"registry"}
    assert all(m["operation_id"] == op_id for m in drift["mismatches"])


ERROR_TYPES = {
    "tool schema": "RegistryDrift",
    "tool timeout": "RegistryDrift",
    "tool removed": "RegistryDrift",
    "policy revision": "ApprovalError",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_tool_is_registry_drift_with_exit_2_and_one_line(
    cli: Invoke, registry: Path, change: str
) -> None:
    """A changed or removed tool is its own error type; a changed policy stays an approval
    refusal. Either way the command exits 2 with one line naming what changed."""
    op_id, apr = paused(cli, registry)
    assert cli("approve", apr, "--as", "ops-lead").exit_code == 0
    edit(registry, CHANGES[change])
    result = cli("resume", op_id, "--json")
    assert result.exit_code == 2
    payload = json_out(result)
    assert payload["error_type"] == ERROR_TYPES[change]
    assert NEEDLES[change] in payload["error"] and "not run" in payload["error"]
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"error: {payload['error']}"
    ]


def test_the_same_registry_reordered_and_reformatted_is_accepted(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    op_id, apr = paused(cli, registry)
    doc = yaml.safe_load(registry.read_text())
    doc["tools"] = dict(reversed(list(doc["tools"].items())))
    registry.write_text("# reformatted\n" + yaml.safe_dump(doc, sort_keys=True, indent=4))
    assert cli("verify").exit_code == 0
    result = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert result.exit_code == 0, result.output
    assert json_out(result)["state"] == "COMPLETED"
    assert len(ledger_refunds(store_path.parent / "payments.db")) == 1
    verified = json_out(cli("verify", "--json"))
    assert verified["ok"] is True  # requests built with either tool order still rebuild
    assert verified["counts"]["requests_rebuilt"] == verified["counts"]["turns"]


def test_a_call_allowed_by_policy_does_not_run_under_a_changed_tool(
    store_path: Path, registry: Path
) -> None:
    """A crash left get_order APPROVED; the tool changed before the resume."""
    store = open_store(store_path)
    options = operations.RunOptions(task=TASK, registry=registry, transcript=REFUND_OPENAI)

    class Crash(Exception):
        pass

    def crash(kind: str, data: dict[str, object]) -> None:
        if kind == "transition" and data["target"] == "EXECUTING":
            raise Crash

    with pytest.raises(Crash):
        operations.start(store, options, on_event=crash)
    (op,) = store.list_operations()
    edit(registry, lambda d: d["tools"]["get_order"].update(max_result_bytes=100))
    with pytest.raises(RegistryDrift, match="get_order changed in the registry"):
        operations.resume(store, op.operation_id)
    (call,) = store.calls(op.operation_id)
    assert call.state.value == "APPROVED" and call.started_at is None
    report = verify_store(store)
    assert [(m.table, m.field, m.call_id) for m in report.mismatches] == [
        ("registry", "tool_sha256", call.call_id)
    ]
