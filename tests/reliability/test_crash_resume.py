"""A process killed between approval and result commit resumes without a second refund."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.paths import PACKAGE, REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.wiring.failpoints import FAILPOINTS


def toolloop(
    store: Path, *args: str, failpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLLOOP_FAILPOINT"}
    if failpoint:
        env["TOOLLOOP_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "toolloop_cli", *args, "--store", str(store)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def approved_operation(cli: Invoke) -> str:
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--json"
    )
    view = json_out(result)
    (apr,) = [a for a in view["approvals"] if a["status"] == "PENDING"]
    assert cli("approve", apr["approval_id"], "--as", "ops-lead").exit_code == 0
    return str(view["operation_id"])


@pytest.mark.parametrize(
    ("failpoint", "final_call_state"),
    [
        ("after_intent_commit", "SUCCEEDED"),
        ("after_effect_before_result_commit", "RECONCILED"),
        ("before_model_request", "SUCCEEDED"),
    ],
)
def test_kill_then_resume_submits_the_refund_exactly_once(
    cli: Invoke, store_path: Path, failpoint: str, final_call_state: str
) -> None:
    op = approved_operation(cli)
    killed = toolloop(store_path, "resume", op, failpoint=failpoint)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = toolloop(store_path, "resume", op, "--json")
    assert resumed.returncode == 0, resumed.stderr
    shown = json_out(cli("show", op, "--json"))
    assert shown["state"] == "COMPLETED"
    submit = next(c for c in shown["calls"] if c["name"] == "submit_refund")
    assert submit["state"] == final_call_state
    refunds = ledger_refunds(store_path.parent / "payments.db")
    assert len(refunds) == 1
    assert refunds[0]["idempotency_key"] == submit["idempotency_key"]


def test_every_failpoint_name_is_documented_once() -> None:
    assert len(set(FAILPOINTS)) == len(FAILPOINTS)
    source = "".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    for name in FAILPOINTS:
        assert f'failpoint("{name}")' in source, name


@pytest.mark.parametrize(
    "command",
    [
        ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)),
        ("replay", str(REFUND_OPENAI)),
    ],
    ids=["run", "replay"],
)
def test_a_kill_right_after_the_start_commit_leaves_an_operation_resume_finishes(
    cli: Invoke, store_path: Path, command: tuple[str, ...]
) -> None:
    """``run`` and ``replay`` begin an operation the same way (``loop.begin``), so both stop
    at ``after_start_commit`` with the operation and its conversation stored, nothing sent."""
    killed = toolloop(store_path, *command, failpoint="after_start_commit")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (op,) = json_out(cli("runs", "--json"))["operations"]
    assert op["state"] == "MODEL_REQUESTED" and op["counters"]["requests"] == 0
    assert cli("verify").exit_code == 0
    resumed = toolloop(store_path, "resume", op["operation_id"], "--json")
    assert resumed.returncode in (0, 10), resumed.stderr
    assert cli("verify").exit_code == 0
