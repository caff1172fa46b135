"""A cassette never authorises a live side effect (security review H2).

With ``--results live`` the decisions written in a cassette are ignored: a call whose tool
needs approval runs only after ``--approve-as SUBJECT`` passes the same policy check as
``approve``, else the replay waits like a normal run. The ``replay`` subject decides only
with ``--results recorded``, where nothing runs. The cassette's guards may only tighten the
registry's defaults, and its subject never counts as a decider.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.store import open_store

BRANCH = ROOT / "transcripts" / "branches" / "openai" / "duplicate_then_no_progress.yaml"
HAPPY = ROOT / "transcripts" / "branches" / "openai" / "happy_path.yaml"


def replay(cli: Invoke, path: Path, *extra: str) -> Any:
    return cli("replay", str(path), "--json", *extra)


def refunds_made(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The refunds in the replay's own ledger (its fresh data folder)."""
    data_dir = out["replay"]["data_dir"]
    ledger = Path(data_dir) / "payments.db" if data_dir else None
    return ledger_refunds(ledger) if ledger is not None and ledger.exists() else []


def submit_states(out: dict[str, Any]) -> list[str]:
    return [c["state"] for c in out["calls"] if c["name"] == "submit_refund"]


def edited(tmp_path: Path, source: Path, edit: Any, name: str = "edited.yaml") -> Path:
    document = yaml.safe_load(source.read_text())
    edit(document)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1 << 30))
    return path


@pytest.fixture
def genuine_recording(cli: Invoke, tmp_path: Path) -> Path:
    """A real run recorded with --record, approved by ops-lead and completed."""
    record = tmp_path / "rec.yaml"
    run = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    waiting = cli(*run, "--record", str(record), "--json")
    assert waiting.exit_code == 10, waiting.output
    (apr,) = [a["approval_id"] for a in json_out(waiting)["approvals"]]
    assert cli("approve", apr, "--as", "ops-lead", "--resume").exit_code == 0
    return record


def test_h2_decided_by_replay_in_a_cassette_runs_nothing_live(
    cli: Invoke, tmp_path: Path, genuine_recording: Path
) -> None:
    """The review's reproduction: one field of a genuine recording changed to ``replay``."""

    def to_replay(document: dict[str, Any]) -> None:
        document["toolloop"]["approvals"][0]["decided_by"] = "replay"

    forged = edited(tmp_path, genuine_recording, to_replay)
    result = replay(cli, forged, "--registry", str(REGISTRY))
    assert result.exit_code == 10, result.output
    out = json_out(result)
    assert out["state"] == "WAITING_APPROVAL"
    assert submit_states(out) == ["WAITING_APPROVAL"]
    assert [a["status"] for a in out["approvals"]] == ["PENDING"]
    assert refunds_made(out) == []


def test_h2_a_named_approver_in_a_cassette_authorises_nothing_live(cli: Invoke) -> None:
    """The shipped branch says ``APPROVED by ops-lead``; live, nobody decided, so it waits."""
    result = replay(cli, BRANCH, "--registry", str(REGISTRY))
    assert result.exit_code == 10, result.output
    out = json_out(result)
    assert out["state"] == "WAITING_APPROVAL"
    assert "SUCCEEDED" not in submit_states(out)
    assert refunds_made(out) == []
    human = cli("replay", str(BRANCH), "--registry", str(REGISTRY))
    assert human.exit_code == 10
    shown = " ".join(human.stdout.split())
    assert "waiting for approval: apr_" in shown and "decide with toolloop approve" in shown


def test_h2_the_waiting_replay_is_decided_with_approve_like_a_normal_run(
    cli: Invoke, store_path: Path
) -> None:
    out = json_out(replay(cli, BRANCH, "--registry", str(REGISTRY)))
    (apr,) = [a["approval_id"] for a in out["approvals"] if a["status"] == "PENDING"]
    done = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert done.exit_code == 14, done.output  # the branch ends NO_PROGRESS
    assert submit_states(json_out(done)) == ["SUCCEEDED", "DUPLICATE", "NOT_EXECUTED"]
    assert len(refunds_made(out)) == 1
    log = open_store(store_path).transitions(out["operation_id"])
    assert any(t["kind"] == "approval" and t["target"] == "APPROVED" for t in log)


def test_h2_approve_as_is_the_explicit_decision_that_lets_the_branch_run(cli: Invoke) -> None:
    result = replay(cli, BRANCH, "--registry", str(REGISTRY), "--approve-as", "ops-lead")
    out = json_out(result)
    assert (out["state"], out["divergences"]) == ("NO_PROGRESS", [])
    assert submit_states(out) == ["SUCCEEDED", "DUPLICATE", "NOT_EXECUTED"]
    (approval,) = out["approvals"]
    assert (approval["status"], approval["decided_by"]) == ("APPROVED", "ops-lead")
    assert len(refunds_made(out)) == 1


def test_h2_recorded_decisions_still_drive_a_recorded_replay_where_nothing_runs(
    cli: Invoke,
) -> None:
    result = replay(cli, BRANCH, "--registry", str(REGISTRY), "--results", "recorded")
    out = json_out(result)
    assert (out["state"], out["divergences"]) == ("NO_PROGRESS", [])
    (approval,) = out["approvals"]
    assert (approval["status"], approval["decided_by"]) == ("APPROVED", "ops-lead")
    assert out["replay"]["data_dir"] is None and refunds_made(out) == []


def test_h2_replay_is_not_a_subject_a_live_replay_accepts(cli: Invoke) -> None:
    result = replay(cli, BRANCH, "--registry", str(REGISTRY), "--approve-as", "replay")
    assert result.exit_code == 17, result.output
    out = json_out(result)
    (divergence,) = out["divergences"]
    assert divergence["kind"] == "approval"
    assert "replay" in divergence["message"]
    assert out["state"] == "WAITING_APPROVAL" and refunds_made(out) == []


def test_h2_approve_as_is_checked_like_approve(cli: Invoke, tmp_path: Path) -> None:
    """Listed approver, and never the run's own subject (even when the cassette names it)."""

    def subject_is_ops_lead(document: dict[str, Any]) -> None:
        document["toolloop"]["subject"] = "ops-lead"
        document["toolloop"]["approvals"][0]["decided_by"] = "finance"

    cassette = edited(tmp_path, BRANCH, subject_is_ops_lead)
    for subject, needle in (
        ("mallory", "mallory may not decide approvals"),
        ("ops-lead", "may not approve its own calls"),
    ):
        result = replay(cli, cassette, "--registry", str(REGISTRY), "--approve-as", subject)
        assert result.exit_code == 17, result.output
        out = json_out(result)
        assert out["subject"] == "ops-lead"
        (divergence,) = out["divergences"]
        assert divergence["kind"] == "approval" and needle in divergence["message"]
        assert out["state"] == "WAITING_APPROVAL" and refunds_made(out) == []


def test_h2_cassette_guards_only_tighten_the_registry_defaults_live(
    cli: Invoke, tmp_path: Path
) -> None:
    strict = tmp_path / "strict.yaml"
    document = yaml.safe_load(REGISTRY.read_text())
    document["defaults"] = {"max_turns": 3, "max_tool_calls": 10, "no_progress_after": 3}
    strict.write_text(yaml.safe_dump(document, sort_keys=False))

    def wide_and_narrow(document: dict[str, Any]) -> None:
        guards = document["toolloop"]["guards"]
        guards.update(max_turns=10_000, max_tool_calls=10_000, max_parallel=1)
        guards["max_calls_per_tool"] = {"get_order": 5}

    cassette = edited(tmp_path, HAPPY, wide_and_narrow)
    out = json_out(replay(cli, cassette, "--registry", str(strict), "--approve-as", "ops-lead"))
    guards = out["guards"]
    assert (guards["max_turns"], guards["max_tool_calls"]) == (3, 10)  # the registry's
    assert guards["max_parallel"] == 1 and guards["max_calls_per_tool"] == {"get_order": 5}
    assert out["state"] == "BUDGET_EXHAUSTED"  # the 4th request is never sent
    assert len(out["turns"]) == 3


def test_h2_the_recorded_mode_keeps_the_cassettes_guards(cli: Invoke, tmp_path: Path) -> None:
    """Nothing runs there: the recording's own guards decide the path it took."""

    def wide(document: dict[str, Any]) -> None:
        document["toolloop"]["guards"]["max_turns"] = 10_000

    cassette = edited(tmp_path, HAPPY, wide)
    out = json_out(replay(cli, cassette, "--results", "recorded"))
    assert out["guards"]["max_turns"] == 10_000 and out["state"] == "COMPLETED"


def test_h2_a_live_replay_shows_whose_tenant_and_subject_it_runs_as(
    cli: Invoke, tmp_path: Path
) -> None:
    def elsewhere(document: dict[str, Any]) -> None:
        document["toolloop"]["tenant"] = "acme"

    cassette = edited(tmp_path, HAPPY, elsewhere)
    human = cli("replay", str(cassette), "--registry", str(REGISTRY), "--approve-as", "finance")
    shown = " ".join(human.stdout.replace("│", " ").split())
    assert "tenant acme · subject operator" in shown
    chosen = json_out(replay(cli, cassette, "--registry", str(REGISTRY), "--tenant", "t2"))
    assert chosen["tenant"] == "t2"


def test_h2_nothing_in_the_store_says_the_cassette_decided_a_live_call(
    cli: Invoke, store_path: Path
) -> None:
    out = json_out(replay(cli, BRANCH, "--registry", str(REGISTRY), "--approve-as", "finance"))
    conn = sqlite3.connect(store_path)
    reasons = [
        r[0]
        for r in conn.execute(
            "SELECT reason FROM transitions WHERE operation_id = ? AND kind = 'approval'",
            (out["operation_id"],),
        )
    ]
    conn.close()
    assert reasons == ["replay --approve-as"]
