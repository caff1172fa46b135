"""What a report is built from: divergences kept by ``replay``, tenants, the command's output."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from report_helpers import (
    APPROVER,
    BRANCHES,
    diverging_registry,
    json_of,
    replay,
    toolloop,
    write_report,
)
from support.scripted import answer, call, final, run_script, turn

from toolloop_cli.report.data import report_data
from toolloop_cli.store import open_store


def test_a_replay_keeps_its_divergences_on_the_audited_operation(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    registry = diverging_registry(tmp_path)
    result = toolloop(
        store_path,
        "replay",
        str(BRANCHES / "happy_path.yaml"),
        "--registry",
        str(registry),
        *APPROVER,
        "--json",
    )
    assert result.exit_code == 17
    out = json_of(result)
    kept = open_store(store_path).get_operation(out["operation_id"]).divergence_check
    printed = [{k: v for k, v in d.items() if k != "operation_id"} for d in out["divergences"]]
    assert kept == {"requests": 4, "divergences": printed}
    assert toolloop(store_path, "verify").exit_code == 0
    with closing(sqlite3.connect(store_path)) as conn:  # dropping the finding is detected
        conn.execute("UPDATE operations SET divergence_json = NULL")
        conn.commit()
    tampered = toolloop(store_path, "verify", "--json")
    assert tampered.exit_code == 20
    fields = {(m["table"], m["field"]) for m in json_of(tampered)["mismatches"]}
    assert ("operations", "divergence_json") in fields


def test_a_recorded_value_without_canonical_form_is_kept_as_its_text(tmp_path: Path) -> None:
    """A hostile recording's NaN cannot stop the replay from keeping what it found."""
    cassette = tmp_path / "nan.yaml"
    text = (BRANCHES / "happy_path.yaml").read_text()
    needle = '\\"amount_cents\\":4999,\\"currency\\"'
    assert needle in text
    cassette.write_text(text.replace(needle, '\\"amount_cents\\":NaN,\\"currency\\"'))
    store_path = tmp_path / "store.db"
    op_id = replay(store_path, cassette)
    check = open_store(store_path).get_operation(op_id).divergence_check
    assert check is not None
    (kept,) = check["divergences"]
    assert (kept["kind"], kept["path"]) == ("result", "$.result.amount_cents")
    assert (kept["recorded"], kept["replayed"]) == ("NaN", 4999)
    data = report_data(open_store(store_path), op_id)
    assert data["replay"]["divergences"] == [kept]
    json.dumps(data, allow_nan=False)  # the report data is plain JSON


def test_a_replay_without_divergence_and_one_from_before_they_were_kept(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    op_id = replay(store_path, BRANCHES / "happy_path.yaml")
    data = report_data(open_store(store_path), op_id)
    assert data["replay"] is not None and data["replay"]["divergences"] == []
    assert data["diff"] is None
    with closing(sqlite3.connect(store_path)) as conn:  # as a replay made before this change
        conn.execute("UPDATE operations SET divergence_json = NULL")
        conn.commit()
    assert report_data(open_store(store_path), op_id)["replay"]["divergences"] is None


def test_the_command_prints_one_json_object_with_json(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    op_id = replay(
        store_path, BRANCHES / "happy_path.yaml", "--registry", str(diverging_registry(tmp_path))
    )
    target = tmp_path / "out" / "report.html"
    result = toolloop(store_path, "report", op_id, "-o", str(target), "--json")
    assert result.exit_code == 0
    assert json_of(result) == {
        "operation_id": op_id,
        "state": "COMPLETED",
        "report": str(target),
        "verified": True,
        "divergences": 1,
        "differences": None,
    }
    assert target.read_text().startswith("<!doctype html>")


def test_another_tenants_operations_are_not_found(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    ours = replay(
        store_path,
        BRANCHES / "happy_path.yaml",
        "--registry",
        str(diverging_registry(tmp_path)),
        "--tenant",
        "acme",
    )
    theirs = replay(
        store_path, BRANCHES / "happy_path.yaml", "--results", "recorded", "--tenant", "globex"
    )
    target = tmp_path / "r.html"
    hidden = toolloop(store_path, "report", theirs, "-o", str(target), "--tenant", "acme")
    assert hidden.exit_code == 2 and f"no operation {theirs}" in hidden.stderr
    against = toolloop(
        store_path, "report", ours, "-o", str(target), "--tenant", "acme", "--against", theirs
    )
    assert against.exit_code == 2 and f"no operation {theirs}" in against.stderr
    assert not target.exists()
    write_report(store_path, ours, target, "--tenant", "acme")


def test_a_call_id_the_model_uses_in_two_turns_keeps_each_calls_own_history(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    answers = [
        turn(call("echo", {"n": 1}, call_id="same")),
        turn(call("not_a_tool", {}, call_id="same")),
        final(),
    ]
    result, _ = run_script(store, answers)
    assert result.target.value == "COMPLETED"
    first, second = report_data(store, result.operation.operation_id)["calls"]
    assert first["call_id"] == second["call_id"] == "same"
    assert [h["target"] for h in first["history"]] == [
        "PROPOSED",
        "APPROVED",
        "EXECUTING",
        "SUCCEEDED",
    ]
    assert [h["target"] for h in second["history"]] == ["PROPOSED", "INVALID"]


def test_a_log_entry_that_names_its_response_belongs_to_that_responses_call(
    tmp_path: Path,
) -> None:
    """Two turns name their call ``same``: an entry carrying a response id is its call's,
    wherever it stands in the log; one without (an older store) falls back to its turn."""
    from toolloop_cli.report.data import histories

    store = open_store(tmp_path / "store.db")
    answers = [
        answer("resp_a", call("echo", {"n": 1}, call_id="same")),
        answer("resp_b", call("echo", {"n": 2}, call_id="same")),
        final(),
    ]
    result, _ = run_script(store, answers)
    op_id = result.operation.operation_id
    first, second = report_data(store, op_id)["calls"]
    for shown in (first, second):
        assert [h["target"] for h in shown["history"]] == [
            "PROPOSED",
            "APPROVED",
            "EXECUTING",
            "SUCCEEDED",
        ]
        assert {h["response_id"] for h in shown["history"][1:]} == {shown["response_id"]}
    late = {"kind": "call", "call_id": "same", "source": "SUCCEEDED", "target": "SUCCEEDED"}
    log = [*store.transitions(op_id), {**late, "response_id": "resp_a", "reason": "named"}]
    log.append({**late, "response_id": None, "reason": "old"})
    found = histories(store.turns(op_id), store.calls(op_id), log)
    assert found[("call", 0, "same")][-1]["reason"] == "named"
    assert found[("call", 1, "same")][-1]["reason"] == "old"  # the latest turn with that id


def test_against_a_cassette_compares_with_the_recording_itself(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    op_id = replay(store_path, BRANCHES / "happy_path.yaml")
    store = open_store(store_path)
    same = report_data(store, op_id, against=str(BRANCHES / "happy_path.yaml"))["diff"]
    assert same == {
        "a": op_id,
        "b": str(BRANCHES / "happy_path.yaml"),
        "equal": True,
        "differences": [],
    }
    other = report_data(store, op_id, against=str(BRANCHES / "approval_expired.yaml"))["diff"]
    assert other["equal"] is False and other["differences"]


def test_without_output_the_report_is_named_after_the_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_path = tmp_path / "store.db"
    op_id = replay(store_path, BRANCHES / "happy_path.yaml")
    monkeypatch.chdir(tmp_path)
    result = toolloop(store_path, "report", op_id)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"report written: report-{op_id}.html"
    assert (tmp_path / f"report-{op_id}.html").read_text().startswith("<!doctype html>")
