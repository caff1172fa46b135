"""Registry tools served by a real MCP server (tests/tools/mcp_refund_server.py), over stdio
and streamable HTTP on loopback: the refund flow, schema pins, unlisted tools, a hanging
server cancelled at the timeout, a crashing one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke
from support.mcp_servers import announced, http_server, refund_registry, stdio_entry
from support.scripted import answer, call, final, run_script

from toolloop_cli.errors import RegistryError
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store
from toolloop_cli.tools.mcp_client import close_all
from toolloop_cli.tools.registry import load_registry

pytestmark = pytest.mark.timeout(120)

REFUND = {"order_id": "ord_1001", "amount_cents": 4999}


@pytest.fixture(autouse=True)
def _close_servers() -> Iterator[None]:
    yield
    close_all()


def _served(transport: str, ledger: Path, variant: str = "") -> AbstractContextManager[Any]:
    if transport == "stdio":
        return nullcontext(stdio_entry(ledger, variant))
    return http_server(ledger, variant)


def _pins(ledger: Path) -> dict[str, dict[str, Any]]:
    """What the well-behaved server announces: the schemas an owner reviewed and pinned."""
    return announced(stdio_entry(ledger))


def _refund_script() -> list[dict[str, Any]]:
    return [
        answer("resp_1", call("get_order", {"order_id": "ord_1001"}, "call_1")),
        answer("resp_2", call("create_refund_draft", REFUND, "call_2")),
        answer("resp_3", call("submit_refund", REFUND, "call_3")),
        final("refunded"),
    ]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_refund_flow_over_mcp_with_approval_completes_with_one_refund(
    tmp_path: Path, transport: str
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    with _served(transport, ledger) as entry:
        registry = refund_registry(tmp_path, entry, _pins(ledger))
        store = open_store(tmp_path / "store.db")
        paused, scripted = run_script(store, _refund_script(), registry=registry)
        assert paused.operation.state.value == "WAITING_APPROVAL"
        assert ledger_refunds(ledger / "payments.db") == []
        (pending,) = store.pending_approvals()
        approvals.approve(store, pending.approval_id, "ops-lead")
        done = operations.resume(store, paused.operation.operation_id, transport=scripted)
    assert done.operation.state.value == "COMPLETED"
    (refund,) = ledger_refunds(ledger / "payments.db")
    submit = next(c for c in store.calls(done.operation.operation_id) if c.name == "submit_refund")
    assert submit.state.value == "SUCCEEDED"
    # the key toolloop derived is the one the server was told in _meta and refunded under
    assert refund["idempotency_key"] == submit.idempotency_key
    assert submit.model_result is not None
    assert submit.model_result["result"]["refund_id"] == refund["refund_id"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_that_changed_a_tools_schema_is_refused_at_load(
    tmp_path: Path, transport: str
) -> None:
    pins = _pins(tmp_path)
    with _served(transport, tmp_path, "changed_schema") as entry:
        registry = refund_registry(tmp_path, entry, pins)
        with pytest.raises(RegistryError) as caught:
            load_registry(registry)
    message = str(caught.value)
    assert "tools.get_order.input_schema_sha256" in message
    assert "announces tool 'get_order' with input schema sha256:" in message
    assert "not the pinned" in message


def test_a_tool_the_server_adds_is_never_offered_to_the_model(tmp_path: Path) -> None:
    entry = stdio_entry(tmp_path, "extra_tool")
    assert "refund_everything" in announced(entry)  # the server does offer it
    registry = refund_registry(tmp_path, entry, _pins(tmp_path))
    loaded = load_registry(registry)
    assert loaded.get("refund_everything") is None
    store = open_store(tmp_path / "store.db")
    script = [answer("resp_1", call("get_order", {"order_id": "ord_1001"})), final("ok")]
    result, transport = run_script(store, script, registry=registry)
    assert result.operation.state.value == "COMPLETED"
    for request in transport.requests:
        assert request.body["tools"] == ["get_order", "create_refund_draft", "submit_refund"]
    # and a model that names it anyway gets an unknown-tool refusal, nothing runs
    script = [answer("resp_1", call("refund_everything", {"confirm": True})), final("ok")]
    result, _ = run_script(store, script, registry=registry)
    (refused,) = store.calls(result.operation.operation_id)
    assert refused.state.value == "INVALID"


def test_a_hanging_side_effect_is_cancelled_at_its_timeout_and_reconciled(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    pins = _pins(ledger)
    entry = stdio_entry(ledger, "hang_submit")
    registry = refund_registry(
        tmp_path, entry, pins, submit_refund={"timeout_ms": 600, "approval": "never"}
    )
    store = open_store(tmp_path / "store.db")
    script = [
        answer("resp_2", call("create_refund_draft", REFUND, "call_2")),
        answer("resp_3", call("submit_refund", REFUND, "call_3")),
        final("refunded"),
    ]
    result, _ = run_script(store, script, registry=registry)
    submit = next(
        c for c in store.calls(result.operation.operation_id) if c.name == "submit_refund"
    )
    # the server committed the refund and then hung: the timeout gave up, the key found it
    assert submit.state.value == "RECONCILED"
    (refund,) = ledger_refunds(ledger / "payments.db")
    assert submit.model_result is not None
    assert submit.model_result["result"]["refund_id"] == refund["refund_id"]
    audit = submit.protected_audit or {}
    assert audit.get("reconciled") is True
    # the server was told to stop: its handler saw the cancellation of this very request
    assert "toolloop/idempotency_key" in (ledger / "cancelled").read_text()
    assert result.operation.state.value == "COMPLETED"


def test_a_server_crashing_mid_call_leaves_unknown_outcome_with_the_reason(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    pins = _pins(ledger)
    entry = stdio_entry(ledger, "crash_submit")
    registry = refund_registry(tmp_path, entry, pins, submit_refund={"approval": "never"})
    store = open_store(tmp_path / "store.db")
    script = [
        answer("resp_2", call("create_refund_draft", REFUND, "call_2")),
        answer("resp_3", call("submit_refund", REFUND, "call_3")),
        final("refunded"),
    ]
    result, _ = run_script(store, script, registry=registry)
    op = result.operation
    submit = next(c for c in store.calls(op.operation_id) if c.name == "submit_refund")
    assert submit.state.value == "UNKNOWN_OUTCOME"
    assert op.state.value == "ESCALATED"
    assert "outcome unknown for call(s) call_3" in str(op.reason)
    audit = submit.protected_audit or {}
    assert "closed the connection" in str(audit.get("error"))
    assert "closed the connection" in str(audit.get("reconcile"))
    assert len(ledger_refunds(ledger / "payments.db")) == 1  # it did happen: a person checks


def _one_tool_registry(tmp_path: Path, server: dict[str, Any], tool: dict[str, Any]) -> Path:
    doc = {
        "registry": "mcp-form",
        "revision": "1",
        "policy": {"revision": "p1", "approvers": ["ops-lead"]},
        "mcp_servers": server,
        "tools": {
            "get_order": {
                "schema_version": "v1",
                "description": "Look up an order.",
                "risk": "read",
                "handler": "mcp:refunds/get_order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
                **tool,
            }
        },
    }
    path = tmp_path / "form.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(path: Path, **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(RegistryError) as caught:
        load_registry(path, **kwargs)
    return list(caught.value.problems)


def test_an_mcp_tool_without_a_pin_or_with_an_unknown_server_is_refused(tmp_path: Path) -> None:
    entry = {"refunds": stdio_entry(tmp_path)}
    problems = _problems(_one_tool_registry(tmp_path, entry, {}), import_handlers=False)
    assert problems == [
        ("tools.get_order.input_schema_sha256", "an mcp: tool needs its pinned 'sha256:<64 hex>'")
    ]
    pin = {"input_schema_sha256": "sha256:" + "0" * 64, "handler": "mcp:billing/get_order"}
    problems = _problems(_one_tool_registry(tmp_path, entry, pin), import_handlers=False)
    assert problems == [
        ("tools.get_order.handler", "names server 'billing', which is not in mcp_servers")
    ]


def test_a_server_that_cannot_start_is_a_problem_of_its_entry(tmp_path: Path) -> None:
    entry = {"refunds": {"command": str(tmp_path / "no-such-server")}}
    pin = {"input_schema_sha256": "sha256:" + "0" * 64}
    ((where, message),) = _problems(_one_tool_registry(tmp_path, entry, pin))
    assert where == "mcp_servers.refunds"
    assert message.startswith("cannot list its tools:")


def test_loading_without_imports_starts_no_server(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    script = f"open({str(marker)!r}, 'w').close()"
    entry = {"refunds": {"command": sys.executable, "args": ["-c", script]}}
    pin = {"input_schema_sha256": "sha256:" + "0" * 64}
    loaded = load_registry(_one_tool_registry(tmp_path, entry, pin), import_handlers=False)
    assert loaded.imported is False
    assert not marker.exists()


def test_registry_check_names_the_changed_pin_and_exits_2(cli: Invoke, tmp_path: Path) -> None:
    registry = refund_registry(tmp_path, stdio_entry(tmp_path, "changed_schema"), _pins(tmp_path))
    result = cli("registry", "check", str(registry))
    assert result.exit_code == 2
    assert "tools.get_order.input_schema_sha256: server 'refunds' announces" in result.stderr
    assert "Traceback" not in result.stderr
