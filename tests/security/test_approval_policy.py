"""Who may decide an approval, under which policy, and until when (security review M2, L6).

An approval is pinned to the canonical hash of the policy it was requested under and is
decided against that policy. A registry whose ``policy`` block was edited without a revision
bump while the approval waited refuses ``approve`` and ``resume`` before anything runs.
Deciding after expiry is refused both ways. Stores made before the pin still open, verify
and fall back to the revision check.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.audit_log import rewrite_as_row_records, row_writes
from support.cli import Invoke, json_out
from support.clock import FakeClock
from support.harness.ops import refused_records, waiting_refund
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.scripted import GUARDS, call, final, run_script, turn

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.errors import ApprovalError
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store
from toolloop_cli.tools import policy as rules
from toolloop_cli.tools.registry import Policy, load_registry


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A private copy of the refunds registry that a test edits while an approval waits."""
    path = tmp_path / "registry" / "refunds.yaml"
    path.parent.mkdir()
    shutil.copy(REGISTRY, path)
    return path


def paused(cli: Invoke, registry: Path, *extra: str) -> tuple[str, str]:
    run = ("run", TASK, "--registry", str(registry), "--transcript", str(REFUND_OPENAI))
    result = cli(*run, "--json", *extra)
    assert result.exit_code == 10, result.output
    view = json_out(result)
    (apr,) = [a for a in view["approvals"] if a["status"] == "PENDING"]
    return str(view["operation_id"]), str(apr["approval_id"])


def edit_policy(registry: Path, **changes: Any) -> None:
    """Change the registry's policy block, keeping its revision (the M2 edit)."""
    doc = yaml.safe_load(registry.read_text())
    doc["policy"].update(changes)
    registry.write_text(yaml.safe_dump(doc, sort_keys=False))


def one_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def rows(store_path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(store_path)
    try:
        return [
            *conn.execute("SELECT * FROM approvals ORDER BY approval_id"),
            *conn.execute("SELECT * FROM calls ORDER BY rowid"),
            *conn.execute("SELECT * FROM operations"),
        ]
    finally:
        conn.close()


SELF_APPROVAL_EDIT = {
    "approvers": ["ops-lead", "finance", "operator"],
    "forbid_self_approval": False,
}


# -- M2: the policy is pinned by its hash ---------------------------------------------------


def test_m2_adding_yourself_to_approvers_without_a_revision_bump_does_not_let_you_approve(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    """The review's reproduction: the run's own subject edits the policy and approves."""
    op_id, apr = paused(cli, registry)
    refused = cli("approve", apr, "--as", "operator")
    assert refused.exit_code == 2 and "operator may not decide" in one_line(refused)
    edit_policy(registry, **SELF_APPROVAL_EDIT)
    before = rows(store_path)
    result = cli("approve", apr, "--as", "operator", "--resume")
    assert result.exit_code == 2, result.output
    line = one_line(result)
    assert "changed without a revision bump" in line and "pol-3" in line
    assert rows(store_path) == before  # nothing decided, nothing ran
    assert ledger_refunds(store_path.parent / "payments.db") == []
    store = open_store(store_path)
    assert store.get_approval(apr).status == "PENDING"
    assert "changed without a revision bump" in refused_records(store, op_id)[-1]["reason"]


def test_m2_a_listed_approver_cannot_approve_under_an_edited_policy_either(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    _, apr = paused(cli, registry)
    edit_policy(registry, approval_ttl_s=7200)
    result = cli("approve", apr, "--as", "ops-lead")
    assert result.exit_code == 2
    assert "changed without a revision bump" in one_line(result)
    assert ledger_refunds(store_path.parent / "payments.db") == []


@pytest.mark.parametrize("decided", [False, True], ids=["pending", "approved"])
def test_m2_resume_refuses_a_call_whose_policy_changed_without_a_revision_bump(
    cli: Invoke, store_path: Path, registry: Path, decided: bool
) -> None:
    op_id, apr = paused(cli, registry)
    if decided:
        assert cli("approve", apr, "--as", "ops-lead").exit_code == 0
    edit_policy(registry, **SELF_APPROVAL_EDIT)
    before = rows(store_path)
    result = cli("resume", op_id)
    assert result.exit_code == 2, result.output
    line = one_line(result)
    assert "changed without a revision bump" in line and "not run" in line
    assert rows(store_path) == before
    assert ledger_refunds(store_path.parent / "payments.db") == []
    drift = json_out(cli("verify", "--json"))
    assert {(m["table"], m["field"]) for m in drift["mismatches"]} == {
        ("registry", "policy_sha256")
    }


def test_m2_a_deny_is_decided_against_the_pinned_policy(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    op_id, apr = paused(cli, registry)
    edit_policy(registry, **SELF_APPROVAL_EDIT)
    by_intruder = cli("approve", apr, "--as", "operator", "--deny")
    assert by_intruder.exit_code == 2
    assert "operator may not decide approvals under policy pol-3" in one_line(by_intruder)
    by_approver = cli("approve", apr, "--as", "finance", "--deny", "--reason", "policy edited")
    assert by_approver.exit_code == 0, by_approver.output
    resumed = json_out(cli("resume", op_id, "--json"))
    submit = next(c for c in resumed["calls"] if c["name"] == "submit_refund")
    assert submit["state"] == "DENIED"
    assert ledger_refunds(store_path.parent / "payments.db") == []


def test_m2_a_deny_needs_only_the_pinned_policy_not_the_registry_file(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    _, apr = paused(cli, registry)
    registry.unlink()
    refused = cli("approve", apr, "--as", "operator", "--deny")
    assert refused.exit_code == 2 and "operator may not decide" in one_line(refused)
    approve = cli("approve", apr, "--as", "ops-lead")  # approving needs the registry
    assert approve.exit_code == 2
    denied = cli("approve", apr, "--as", "ops-lead", "--deny", "--json")
    assert denied.exit_code == 0, denied.output
    assert json_out(denied)["decision"]["status"] == "DENIED"


def test_m2_the_pinned_policy_hash_is_on_the_approval_the_operation_and_the_audit_log(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    op_id, apr = paused(cli, registry)
    pinned = load_registry(registry).policy.policy_sha256
    store = open_store(store_path)
    assert store.get_approval(apr).policy_sha256 == pinned
    assert store.get_operation(op_id).policy_sha256 == pinned
    records = [w["row"] for w in row_writes(store.conn) if w["kind"] in ("approval", "operation")]
    assert records and all(r["policy_sha256"] == pinned for r in records)
    (body,) = store.conn.execute("SELECT body FROM blobs WHERE sha256 = ?", (pinned,)).fetchone()
    assert rules.policy_from_document(json.loads(body)) == load_registry(registry).policy
    view = json_out(cli("show", op_id, "--json"))
    assert view["registry"]["policy_sha256"] == pinned
    assert view["approvals"][0]["policy_sha256"] == pinned


def test_m2_a_tampered_pinned_policy_is_found_by_verify(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    """The approval's pinned hash is an audited column: editing it is a mismatch."""
    _, apr = paused(cli, registry)
    conn = sqlite3.connect(store_path)
    conn.execute("UPDATE approvals SET policy_sha256 = ? WHERE approval_id = ?", ("x", apr))
    conn.commit()
    conn.close()
    report = json_out(cli("verify", "--json"))
    found = {(m["table"], m["field"]) for m in report["mismatches"]}
    assert ("approvals", "policy_sha256") in found


@pytest.mark.parametrize("tamper", ["deleted", "rewritten"])
def test_m2_a_tampered_pinned_block_is_refused_and_found_by_verify(
    cli: Invoke, store_path: Path, registry: Path, tamper: str
) -> None:
    """Rewriting the stored block (say, to add yourself) does not change whom it lets decide."""
    _, apr = paused(cli, registry, "--subject", "mallory")
    pinned = load_registry(registry).policy.policy_sha256
    conn = sqlite3.connect(store_path)
    if tamper == "deleted":
        conn.execute("DELETE FROM blobs WHERE sha256 = ?", (pinned,))
    else:
        forged = rules.policy_document(Policy("pol-3", ("ops-lead", "mallory"), 3600, False))
        conn.execute("UPDATE blobs SET body = ? WHERE sha256 = ?", (json.dumps(forged), pinned))
    conn.commit()
    conn.close()
    result = cli("approve", apr, "--as", "mallory", "--deny")
    assert result.exit_code == 2
    assert f"the policy pinned as {pinned} is missing or altered" in one_line(result)
    assert open_store(store_path).get_approval(apr).status == "PENDING"
    report = json_out(cli("verify", "--json"))
    found = {(m["table"], m["key"]) for m in report["mismatches"]}
    assert ("blobs", pinned) in found


def test_m2_the_same_policy_reformatted_is_the_same_hash(
    cli: Invoke, store_path: Path, registry: Path
) -> None:
    _, apr = paused(cli, registry)
    doc = yaml.safe_load(registry.read_text())
    doc["policy"] = dict(reversed(list(doc["policy"].items())))
    registry.write_text("# reformatted\n" + yaml.safe_dump(doc, sort_keys=True, indent=4))
    result = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert result.exit_code == 0, result.output
    assert json_out(result)["state"] == "COMPLETED"


# -- L6: expiry is refused both ways ------------------------------------------------------------

REQUESTED = datetime(2020, 3, 1, 9, 0, tzinfo=UTC)  # long past: expired for the CLI's clock


@pytest.mark.parametrize("deny", [False, True], ids=["approve", "deny"])
def test_l6_deciding_after_expiry_is_refused_both_ways_and_logged(
    store_path: Path, deny: bool
) -> None:
    store = open_store(store_path)
    op_id, apr = waiting_refund(store, clock=FakeClock(REQUESTED))
    expires_at = store.get_approval(apr).expires_at
    at_expiry = FakeClock(REQUESTED + timedelta(seconds=3600))
    with pytest.raises(ApprovalError, match=f"expired at {expires_at}"):
        approvals.approve(store, apr, "ops-lead", deny=deny, reason="late", clock=at_expiry)
    assert store.get_approval(apr).status == "PENDING"
    (refusal,) = refused_records(store, op_id)
    assert f"expired at {expires_at}" in refusal["reason"]
    in_time = FakeClock(REQUESTED + timedelta(seconds=3600) - timedelta(milliseconds=1))
    decided = approvals.approve(store, apr, "ops-lead", deny=deny, clock=in_time)
    assert decided.status == ("DENIED" if deny else "APPROVED")


def test_l6_the_cli_refuses_a_late_denial_with_one_line(cli: Invoke, store_path: Path) -> None:
    store = open_store(store_path)
    op_id, apr = waiting_refund(store, clock=FakeClock(REQUESTED))
    store.close()
    result = cli("approve", apr, "--as", "ops-lead", "--deny", "--reason", "late")
    assert result.exit_code == 2
    assert "expired at" in one_line(result)
    store = open_store(store_path)
    assert store.get_approval(apr).status == "PENDING"
    assert len(refused_records(store, op_id)) == 1


# -- the rules themselves (tools/policy.py) ------------------------------------------------------

POLICY = Policy("pol-3", ("ops-lead", "finance"), 3600, True)


def test_may_decide_names_each_refusal() -> None:
    assert rules.may_decide(POLICY, "ops-lead", "operator") is None
    unlisted = rules.may_decide(POLICY, "mallory", "operator")
    assert unlisted is not None
    assert "mallory may not decide approvals under policy pol-3" in unlisted
    own = rules.may_decide(POLICY, "ops-lead", "ops-lead")
    assert own is not None and "may not approve its own calls" in own
    allowed = Policy("pol-3", ("ops-lead",), 3600, False)
    assert rules.may_decide(allowed, "ops-lead", "ops-lead") is None
    for label in ("", "ops-lead ", "OPS-LEAD"):  # exact names only
        assert rules.may_decide(POLICY, label, "operator") is not None


def test_may_force_continue_needs_a_listed_approver() -> None:
    assert rules.may_force_continue(POLICY, "finance") is None
    refused = rules.may_force_continue(POLICY, "operator")
    assert refused is not None and "may not continue escalated operations" in refused


def test_expiry_is_now_before_expires_at() -> None:
    due = "2026-12-01T11:00:00.000000Z"
    moment = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    assert rules.expiry_problem("apr_1", due, moment - timedelta(microseconds=1)) is None
    assert f"expired at {due}" in str(rules.expiry_problem("apr_1", due, moment))


def test_the_pin_compares_revision_then_hash_and_old_pins_by_revision_only() -> None:
    sha = POLICY.policy_sha256
    assert rules.pin_problem("pol-3", sha, "pol-3", sha) is None
    bumped = rules.pin_problem("pol-3", sha, "pol-4", "sha256:other")
    assert bumped is not None and "policy pol-3, the registry now has pol-4" in bumped
    edited = rules.pin_problem("pol-3", sha, "pol-3", "sha256:other")
    assert edited is not None and "changed without a revision bump" in edited
    assert rules.pin_problem("pol-3", None, "pol-3", "sha256:other") is None  # before the pin


def test_the_policy_hash_covers_every_field_and_round_trips() -> None:
    document = rules.policy_document(POLICY)
    assert sha256_of(document) == POLICY.policy_sha256
    assert rules.policy_from_document(document) == POLICY
    for changed in (
        Policy("pol-3", ("ops-lead", "finance", "operator"), 3600, True),
        Policy("pol-3", ("ops-lead", "finance"), 7200, True),
        Policy("pol-3", ("ops-lead", "finance"), 3600, False),
        Policy("pol-4", ("ops-lead", "finance"), 3600, True),
    ):
        assert changed.policy_sha256 != POLICY.policy_sha256
    with pytest.raises(ValueError, match="not a policy"):
        rules.policy_from_document({"revision": "pol-3", "approvers": "ops-lead"})


# -- stores made before the pin -------------------------------------------------------------------


def _downgrade(store_path: Path) -> None:
    """Make a store exactly as the code before the policy pin wrote it.

    The operation was run with no policy hash (so its rows and call bindings are what that
    code wrote); here the two columns go, the migration's record goes, and the audit
    records lose the key they never had, re-sealed into the chain as they were written.
    """
    conn = sqlite3.connect(store_path)

    def unpinned(kind: str, row: dict[str, Any]) -> dict[str, Any]:
        if kind in ("operation", "approval"):
            assert row.pop("policy_sha256") is None
        return row

    rewrite_as_row_records(conn, unpinned)  # that code wrote one record per row write
    conn.execute("ALTER TABLE approvals DROP COLUMN policy_sha256")
    conn.execute("ALTER TABLE operations DROP COLUMN policy_sha256")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'policy_pin'")
    conn.commit()
    conn.close()


def test_a_store_from_before_the_pin_migrates_verifies_and_falls_back_to_the_revision_check(
    cli: Invoke, store_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(Policy, "policy_sha256", property(lambda self: None))
        store = open_store(store_path)
        op_id, apr = waiting_refund(store, registry=registry, clock=SystemClock())
        store.close()
    _downgrade(store_path)
    conn = sqlite3.connect(store_path)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(approvals)")}
    conn.close()
    assert "policy_sha256" not in columns  # the old schema

    unmigrated = cli("verify")  # verify opens stores read-only: it migrates nothing
    assert unmigrated.exit_code == 2 and "policy_pin" in unmigrated.stderr
    store = open_store(store_path)  # any other opening migrates it
    assert store.get_approval(apr).policy_sha256 is None
    assert store.get_operation(op_id).policy_sha256 is None
    store.close()
    verified = cli("verify")  # the records written before the pin still verify
    assert verified.exit_code == 0, verified.output

    doc = yaml.safe_load(registry.read_text())
    doc["policy"]["revision"] = "pol-4"
    registry.write_text(yaml.safe_dump(doc, sort_keys=False))
    bumped = cli("resume", op_id)  # the revision is still pinned
    assert bumped.exit_code == 2 and "policy pol-3, the registry now has pol-4" in bumped.stderr
    shutil.copy(REGISTRY, registry)
    done = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert done.exit_code == 0, done.output
    assert json_out(done)["state"] == "COMPLETED"
    assert cli("verify").exit_code == 0
    assert verify_store(open_store(store_path)).ok


# -- M11: the decider's name is a label ----------------------------------------------------------


def test_m11_approve_help_says_the_name_is_recorded_not_authenticated(cli: Invoke) -> None:
    result = cli("approve", "--help")
    text = " ".join(result.output.replace("│", " ").split())
    assert "the decider's name, recorded; not authenticated" in text
    assert "whoever can write the store can decide" in text


def test_m2_force_continue_refuses_under_a_policy_edited_without_a_revision_bump(
    store_path: Path, tmp_path: Path
) -> None:
    """``resume --force-continue --as`` goes through the same rules and the same pin."""
    folder = tmp_path / "guards"
    shutil.copytree(GUARDS.parent, folder)
    registry = folder / GUARDS.name
    store = open_store(store_path)
    result, _ = run_script(store, [turn(call("needs_person")), final()], registry=registry)
    op_id = result.operation.operation_id
    assert result.target.value == "ESCALATED"

    def force(subject: str) -> Any:
        transport = ScriptedTransport([final("after the person")])
        return operations.resume(
            store, op_id, force_continue=True, decided_by=subject, transport=transport
        )

    with pytest.raises(ApprovalError, match="operator may not continue escalated operations"):
        force("operator")
    edit_policy(registry, approvers=["ops-lead", "operator"])
    with pytest.raises(ApprovalError, match="changed without a revision bump"):
        force("operator")
    assert store.get_operation(op_id).state.value == "ESCALATED"
