"""The refund exercise end to end through the CLI: run, pause, approve, resume, complete."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.examples.refunds import ledger_refunds


def start_refund(cli: Invoke, *extra: str) -> dict[str, object]:
    result = cli(
        "run",
        TASK,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(REFUND_OPENAI),
        "--json",
        *extra,
    )
    assert result.exit_code == 10, result.output
    return json_out(result)


def pending_approval(view: dict[str, object]) -> str:
    approvals = view["approvals"]
    assert isinstance(approvals, list)
    (apr,) = [a for a in approvals if a["status"] == "PENDING"]
    return str(apr["approval_id"])


def test_run_pauses_for_approval_and_prints_the_commands(cli: Invoke) -> None:
    result = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    assert result.exit_code == 10
    assert "WAITING_APPROVAL" in result.stdout
    assert "toolloop approve apr_" in result.stdout
    assert "--as ops-lead --resume" in result.stdout
    assert "toolloop resume op_" in result.stdout


def test_approve_and_resume_completes_with_one_refund(cli: Invoke, store_path: Path) -> None:
    view = start_refund(cli)
    assert view["state"] == "WAITING_APPROVAL"
    apr = pending_approval(view)
    result = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert result.exit_code == 0, result.output
    done = json_out(result)
    assert done["state"] == "COMPLETED"
    assert done["final_text"]
    shown = json_out(cli("show", str(done["operation_id"]), "--json"))
    calls = {c["name"]: c for c in shown["calls"]}
    assert [c["state"] for c in shown["calls"]] == ["SUCCEEDED"] * 3
    assert set(calls) == {"get_order", "create_refund_draft", "submit_refund"}
    key = calls["submit_refund"]["idempotency_key"]
    assert key.startswith("idk_")
    refunds = ledger_refunds(store_path.parent / "payments.db")
    assert len(refunds) == 1
    assert refunds[0]["idempotency_key"] == key
    assert refunds[0]["amount_cents"] == 4999


def _store_rows(store_path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(store_path)
    try:
        return [
            *conn.execute("SELECT * FROM approvals ORDER BY approval_id"),
            *conn.execute("SELECT * FROM calls ORDER BY turn_idx"),
            *conn.execute("SELECT * FROM operations"),
        ]
    finally:
        conn.close()


def test_an_unlisted_approver_is_refused_and_nothing_changes(cli: Invoke, store_path: Path) -> None:
    apr = pending_approval(start_refund(cli))
    before = _store_rows(store_path)
    result = cli("approve", apr, "--as", "mallory")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "mallory may not decide" in lines[0]
    assert _store_rows(store_path) == before


def test_self_approval_is_refused_when_the_policy_forbids_it(cli: Invoke, store_path: Path) -> None:
    apr = pending_approval(start_refund(cli, "--subject", "ops-lead"))
    before = _store_rows(store_path)
    result = cli("approve", apr, "--as", "ops-lead")
    assert result.exit_code == 2
    assert "may not approve its own calls" in result.stderr
    assert _store_rows(store_path) == before


def test_a_second_decision_is_refused(cli: Invoke) -> None:
    apr = pending_approval(start_refund(cli))
    assert cli("approve", apr, "--as", "finance").exit_code == 0
    again = cli("approve", apr, "--as", "ops-lead", "--deny")
    assert again.exit_code == 2
    assert "already APPROVED" in again.stderr


def test_denial_reaches_the_model_as_an_error_envelope(cli: Invoke, store_path: Path) -> None:
    view = start_refund(cli)
    apr = pending_approval(view)
    result = cli("approve", apr, "--as", "finance", "--deny", "--reason", "customer is abroad")
    assert result.exit_code == 0
    resumed = json_out(cli("resume", str(view["operation_id"]), "--json"))
    submit = next(c for c in resumed["calls"] if c["name"] == "submit_refund")
    assert submit["state"] == "DENIED"
    assert submit["result"]["ok"] is False
    assert "customer is abroad" in submit["result"]["error"]["message"]
    assert ledger_refunds(store_path.parent / "payments.db") == []
    # the envelope was sent back as the function_call_output of the next request
    conn = sqlite3.connect(store_path)
    bodies = [r[0] for r in conn.execute("SELECT body FROM blobs")]
    conn.close()
    assert any("function_call_output" in b and "customer is abroad" in b for b in bodies)


def test_step_makes_exactly_one_transition(cli: Invoke) -> None:
    view = start_refund(cli)
    apr = pending_approval(view)
    op = str(view["operation_id"])
    cli("approve", apr, "--as", "ops-lead")
    first = cli("step", op)
    assert first.exit_code == 0
    assert first.stdout.strip() == "WAITING_APPROVAL -> EXECUTING"
    second = cli("step", op)
    assert second.stdout.strip() == "EXECUTING -> RESULTS_READY"
    shown = json_out(cli("show", op, "--json"))
    assert shown["state"] == "RESULTS_READY"


def test_resume_of_a_terminal_operation_runs_nothing(cli: Invoke, store_path: Path) -> None:
    view = start_refund(cli)
    cli("approve", pending_approval(view), "--as", "ops-lead", "--resume")
    before = _store_rows(store_path)
    result = cli("resume", str(view["operation_id"]))
    assert result.exit_code == 2
    assert "already COMPLETED" in result.stderr and "nothing was run" in result.stderr
    assert _store_rows(store_path) == before
    assert len(ledger_refunds(store_path.parent / "payments.db")) == 1


def test_pending_lists_the_waiting_approval(cli: Invoke) -> None:
    apr = pending_approval(start_refund(cli))
    listed = json_out(cli("pending", "--json"))
    assert [a["approval_id"] for a in listed["pending"]] == [apr]
    assert listed["pending"][0]["tool"] == "submit_refund"
