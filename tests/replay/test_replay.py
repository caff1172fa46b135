"""``toolloop replay``: shipped transcripts replay clean; changes are found and named; exit 17."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

from toolloop_cli.engine.states import EXIT_CODES, OpState
from toolloop_cli.examples.refunds import ledger_refunds

BRANCHES = ROOT / "transcripts" / "branches" / "openai"
SHIPPED = sorted((ROOT / "transcripts").rglob("*.yaml"))
TIMEOUT_ENV = {"TOOLLOOP_REFUND_DELAY_MS": "600"}


def expected_state(path: Path) -> str:
    """The state a transcript ends in: its toolloop metadata says, the demo completes."""
    meta = yaml.safe_load(path.read_text()).get("toolloop")
    return str(meta["state"]) if meta else "COMPLETED"


def replay(cli: Invoke, path: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    return cli("replay", str(path), "--json", *extra, env=env)


@pytest.mark.parametrize("mode", ["recorded", "live"])
@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_transcript_replays_without_divergence(
    cli: Invoke, path: Path, mode: str
) -> None:
    extra = ["--results", mode, "--strict-requests"]
    if mode == "live":
        extra += ["--registry", str(REGISTRY), "--approve-as", "ops-lead"]
    result = replay(cli, path, *extra, env=TIMEOUT_ENV)
    out = json_out(result)
    state = expected_state(path)
    assert (out["divergences"], out["state"]) == ([], state)
    assert result.exit_code == EXIT_CODES.get(OpState(state), 0)
    assert out["task"] == TASK  # taken from the first request's user input
    assert out["results"] == mode


def changed_registry(tmp_path: Path) -> Path:
    """The refund registry with get_order answering a different status."""
    (tmp_path / "changed_refunds.py").write_text(
        "from toolloop_cli.examples import refunds\n\n\n"
        "def get_order(arguments, context):\n"
        "    return {**refunds.get_order(arguments, context), 'status': 'lost'}\n"
    )
    document = yaml.safe_load(REGISTRY.read_text())
    document["tools"]["get_order"]["handler"] = "changed_refunds:get_order"
    path = tmp_path / "refunds-changed.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_changed_handler_result_is_reported_with_its_call_and_path(
    cli: Invoke, tmp_path: Path
) -> None:
    result = replay(
        cli, BRANCHES / "happy_path.yaml", "--registry", str(changed_registry(tmp_path))
    )
    assert result.exit_code == 17, result.output
    out = json_out(result)
    (divergence,) = out["divergences"]
    get_order = next(c for c in out["calls"] if c["name"] == "get_order")
    assert divergence["kind"] == "result"
    assert divergence["turn"] == 1  # carried by the second request
    assert divergence["call_id"] == get_order["call_id"]
    assert divergence["path"] == "$.result.status"
    assert (divergence["recorded"], divergence["replayed"]) == ("delivered", "lost")


def test_divergences_are_printed_for_people_too(cli: Invoke, tmp_path: Path) -> None:
    registry = changed_registry(tmp_path)
    result = cli("replay", str(BRANCHES / "happy_path.yaml"), "--registry", str(registry))
    assert result.exit_code == 17
    assert "1 divergence(s) from the recording" in result.stdout
    assert "$.result.status" in result.stdout


def test_a_changed_tool_declaration_is_one_divergence_at_its_path(
    cli: Invoke, tmp_path: Path
) -> None:
    document = yaml.safe_load(REGISTRY.read_text())
    document["tools"]["get_order"]["description"] = "Look up an order."
    registry = tmp_path / "refunds.yaml"
    registry.write_text(yaml.safe_dump(document))
    result = replay(cli, BRANCHES / "happy_path.yaml", "--registry", str(registry))
    assert result.exit_code == 17
    (divergence,) = json_out(result)["divergences"]
    assert (divergence["kind"], divergence["path"]) == (
        "tools",
        "$.tools.get_order.description",
    )


def edited_cassette(tmp_path: Path, source: Path, edit: Any) -> Path:
    document = yaml.safe_load(source.read_text())
    edit(document)
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_strict_requests_compares_whole_bodies_except_caller_fields(
    cli: Invoke, tmp_path: Path
) -> None:
    def edit(document: dict[str, Any]) -> None:
        request = document["interactions"][0]["request"]
        body = yaml.safe_load(request["body"])  # JSON is YAML
        request["body"] = {**body, "temperature": 0.2, "metadata": {"ticket": "T-1"}}

    path = edited_cassette(tmp_path, BRANCHES / "happy_path.yaml", edit)
    assert json_out(replay(cli, path))["divergences"] == []
    strict = replay(cli, path, "--strict-requests")
    assert strict.exit_code == 17
    (divergence,) = json_out(strict)["divergences"]
    assert (divergence["kind"], divergence["turn"], divergence["path"]) == (
        "request",
        0,
        "$.temperature",
    )


def test_a_recording_that_ends_on_unanswered_calls_stops_where_it_stops(
    cli: Invoke, tmp_path: Path
) -> None:
    """Another tool's recording that ends on a call nobody answered: nothing runs, no request
    the recording never had is sent, and the operation ends INCOMPLETE saying why."""

    def edit(document: dict[str, Any]) -> None:
        del document["interactions"][-1]
        del document["toolloop"]

    path = edited_cassette(tmp_path, BRANCHES / "happy_path.yaml", edit)
    result = replay(cli, path)
    out = json_out(result)
    assert (result.exit_code, out["state"], out["divergences"]) == (12, "INCOMPLETE", [])
    assert "the recording ends here" in out["reason"]
    last = [c for c in out["calls"] if c["state"] == "NOT_EXECUTED"]
    assert last and all(c["call_id"] in out["reason"] for c in last)
    assert len(out["turns"]) == 3  # no fourth request was sent


def test_stopping_before_the_recording_did_is_reported(cli: Invoke, tmp_path: Path) -> None:
    def edit(document: dict[str, Any]) -> None:
        document["toolloop"]["guards"]["max_turns"] = 2

    path = edited_cassette(tmp_path, BRANCHES / "happy_path.yaml", edit)
    out = json_out(replay(cli, path))
    assert out["state"] == "BUDGET_EXHAUSTED"
    kinds = [(d["kind"], d["turn"]) for d in out["divergences"]]
    assert ("missing_request", 2) in kinds and ("missing_request", 3) in kinds
    assert ("state", None) in kinds


def test_a_live_replay_without_a_decision_waits_and_resumes_like_any_operation(
    cli: Invoke,
) -> None:
    waiting = replay(cli, REFUND_OPENAI, "--registry", str(REGISTRY))
    assert waiting.exit_code == 10, waiting.output
    out = json_out(waiting)
    assert out["state"] == "WAITING_APPROVAL" and out["divergences"] == []
    (apr,) = [a["approval_id"] for a in out["approvals"] if a["status"] == "PENDING"]
    done = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert done.exit_code == 0, done.output
    assert json_out(done)["state"] == "COMPLETED"
    shown = json_out(cli("show", out["operation_id"], "--json"))
    assert shown["transport"] == "replay"
    assert [c["state"] for c in shown["calls"]] == ["SUCCEEDED"] * 3


def test_approve_as_is_checked_against_the_policy(cli: Invoke) -> None:
    args = ["--registry", str(REGISTRY), "--approve-as", "mallory"]
    result = replay(cli, REFUND_OPENAI, *args)
    assert result.exit_code == 17
    (divergence,) = json_out(result)["divergences"]
    assert divergence["kind"] == "approval"
    assert "mallory may not decide approvals" in divergence["message"]


def test_approve_as_decisions_are_audited(cli: Invoke, store_path: Path) -> None:
    out = json_out(
        replay(cli, REFUND_OPENAI, "--registry", str(REGISTRY), "--approve-as", "finance")
    )
    (approval,) = out["approvals"]
    assert (approval["status"], approval["decided_by"]) == ("APPROVED", "finance")
    from toolloop_cli.store import open_store

    log = open_store(store_path).transitions(out["operation_id"])
    decided = [t for t in log if t["kind"] == "approval"]
    assert [t["reason"] for t in decided] == ["replay --approve-as"]


def test_live_results_need_a_registry(cli: Invoke) -> None:
    result = cli("replay", str(REFUND_OPENAI), "--results", "live")
    assert result.exit_code == 2
    assert "give --registry FILE" in result.stderr


def test_live_replays_use_a_fresh_ledger_each_time(cli: Invoke) -> None:
    args = ["--registry", str(REGISTRY), "--approve-as", "ops-lead"]
    first = json_out(replay(cli, BRANCHES / "happy_path.yaml", *args))
    second = json_out(replay(cli, BRANCHES / "happy_path.yaml", *args))
    assert first["divergences"] == second["divergences"] == []
    assert first["state"] == second["state"] == "COMPLETED"
    assert first["replay"]["data_dir"] != second["replay"]["data_dir"]
    for out in (first, second):
        assert len(ledger_refunds(Path(out["replay"]["data_dir"]) / "payments.db")) == 1


def test_a_replay_is_an_operation_that_show_and_verify_accept(cli: Invoke) -> None:
    for extra in ([], ["--registry", str(REGISTRY), "--approve-as", "ops-lead"]):
        out = json_out(replay(cli, BRANCHES / "approval_expired.yaml", *extra))
        assert out["state"] == "COMPLETED"
        shown = cli("show", out["operation_id"], "--json")
        assert shown.exit_code == 0
        assert json_out(shown)["calls"] == out["calls"]
        verified = cli("verify", out["operation_id"])
        assert verified.exit_code == 0, verified.output
