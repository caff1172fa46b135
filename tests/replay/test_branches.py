"""The six branches of the refund exercise, replayed with live handlers against fresh ledgers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

from toolloop_cli.examples.refunds import ledger_refunds

BRANCHES = ROOT / "transcripts" / "branches"
PROVIDERS = ("openai", "anthropic", "gemini")
STATES = {
    "happy_path": "COMPLETED",
    "max_tokens_mid_call": "INCOMPLETE",
    "unknown_tool": "COMPLETED",
    "approval_expired": "COMPLETED",
    "submit_timeout_reconciled": "COMPLETED",
    "duplicate_then_no_progress": "NO_PROGRESS",
}
DELAY = {"TOOLLOOP_REFUND_DELAY_MS": "600"}
#: live handlers run only on an operator's decision, never on one written in the cassette
APPROVER = ("--approve-as", "ops-lead")


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def live(
    cli: Invoke, provider: str, branch: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    path = BRANCHES / provider / f"{branch}.yaml"
    result = cli("replay", str(path), "--registry", str(REGISTRY), *APPROVER, "--json", env=env)
    out = json_out(result)
    assert out["divergences"] == [], out["divergences"]
    assert out["state"] == STATES[branch]
    return out


def refunds(out: dict[str, Any]) -> list[dict[str, Any]]:
    return ledger_refunds(Path(out["replay"]["data_dir"]) / "payments.db")


def calls_named(out: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for c in out["calls"] if c["name"] == name]


def test_the_shipped_branches_are_the_six_listed(provider: str) -> None:
    folder = BRANCHES / provider
    assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(STATES)
    for name, state in STATES.items():
        meta = yaml.safe_load((folder / f"{name}.yaml").read_text())["toolloop"]
        assert (meta["provider"], meta["state"]) == (provider, state)


def test_happy_path_completes_with_one_refund(cli: Invoke, provider: str) -> None:
    out = live(cli, provider, "happy_path")
    assert [c["state"] for c in out["calls"]] == ["SUCCEEDED"] * 3
    assert len(refunds(out)) == 1


def test_max_tokens_mid_call_is_incomplete_and_the_cut_call_never_runs(
    cli: Invoke, provider: str
) -> None:
    out = live(cli, provider, "max_tokens_mid_call")
    assert out["turns"][-1]["outcome"] == "TRUNCATED"
    raw = {"openai": "max_output_tokens", "anthropic": "max_tokens", "gemini": "incomplete"}
    assert out["turns"][-1]["finish_reason"] == raw[provider]  # each API's own word
    assert calls_named(out, "submit_refund") == []
    assert refunds(out) == []


def test_an_unknown_tool_gets_an_error_envelope_and_the_model_recovers(
    cli: Invoke, provider: str
) -> None:
    out = live(cli, provider, "unknown_tool")
    (unknown,) = calls_named(out, "refund_order")
    assert unknown["state"] == "INVALID"
    assert unknown["result"]["error"]["code"] == "unknown_tool"
    assert out["final_text"]
    assert len(refunds(out)) == 1


def test_an_expired_approval_is_not_run_and_the_reproposal_gets_a_fresh_one(
    cli: Invoke, provider: str
) -> None:
    out = live(cli, provider, "approval_expired")
    first, second = calls_named(out, "submit_refund")
    assert first["state"] == "EXPIRED"
    assert first["result"]["error"]["code"] == "approval_expired"
    assert second["state"] == "SUCCEEDED"
    expired, approved = out["approvals"]
    assert (expired["status"], approved["status"]) == ("EXPIRED", "APPROVED")
    assert (expired["decided_by"], approved["decided_by"]) == (None, "ops-lead")
    assert expired["approval_id"] != approved["approval_id"]
    assert len(refunds(out)) == 1


def test_a_submit_timeout_is_reconciled_through_the_key_never_submitted_twice(
    cli: Invoke, provider: str
) -> None:
    out = live(cli, provider, "submit_timeout_reconciled", env=DELAY)
    (submit,) = calls_named(out, "submit_refund")
    assert submit["state"] == "RECONCILED"
    (refund,) = refunds(out)
    assert refund["idempotency_key"] == submit["idempotency_key"]
    assert submit["result"]["result"] == refund["result"]


def test_without_the_slow_downstream_the_timeout_branch_reports_its_call_state(
    cli: Invoke, provider: str
) -> None:
    path = BRANCHES / provider / "submit_timeout_reconciled.yaml"
    result = cli("replay", str(path), "--registry", str(REGISTRY), *APPROVER, "--json")
    assert result.exit_code == 17
    (divergence,) = json_out(result)["divergences"]
    assert divergence["kind"] == "call_state"
    assert (divergence["recorded"], divergence["replayed"]) == ("RECONCILED", "SUCCEEDED")


def test_a_repeated_identical_call_is_duplicate_then_no_progress(
    cli: Invoke, provider: str
) -> None:
    result = cli(
        "replay",
        str(BRANCHES / provider / "duplicate_then_no_progress.yaml"),
        "--registry",
        str(REGISTRY),
        *APPROVER,
    )
    assert result.exit_code == 14
    out = live(cli, provider, "duplicate_then_no_progress")
    first, again, third = calls_named(out, "submit_refund")
    assert (first["state"], again["state"], third["state"]) == (
        "SUCCEEDED",
        "DUPLICATE",
        "NOT_EXECUTED",
    )
    assert again["result"]["duplicate_of"] == first["call_id"]
    assert again["result"]["result"] == first["result"]["result"]
    assert "no progress" in out["reason"]
    assert len(refunds(out)) == 1


def test_the_readme_table_states_each_branch_and_its_terminal_state() -> None:
    readme = (BRANCHES / "README.md").read_text()
    for name, state in STATES.items():
        row = next(line for line in readme.splitlines() if f"openai/{name}.yaml" in line)
        assert f"| {state} |" in row
        assert all(f"`{p}/{name}.yaml`" in row for p in PROVIDERS)


def test_the_generator_reproduces_the_shipped_transcripts(tmp_path: Path) -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "scripts.gen_branches", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generated.returncode == 0, generated.stderr
    for provider in PROVIDERS:
        for name in STATES:
            shipped = (BRANCHES / provider / f"{name}.yaml").read_bytes()
            assert (tmp_path / provider / f"{name}.yaml").read_bytes() == shipped, name
    assert (tmp_path / "README.md").read_bytes() == (BRANCHES / "README.md").read_bytes()
