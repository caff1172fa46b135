"""``toolloop diff A B``: operations or cassettes side by side; exit 0 equal, 1 different."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT
from test_replay import changed_registry

from toolloop_cli.cli import render
from toolloop_cli.engine.compare import CallView, align_calls, json_diff

BRANCHES = ROOT / "transcripts" / "branches" / "openai"
HAPPY = BRANCHES / "happy_path.yaml"


def replayed(cli: Invoke, *args: str) -> str:
    """A replay of the happy path; live, its refund runs on an approver's explicit decision."""
    live = ("--approve-as", "ops-lead") if "--registry" in args else ()
    out = json_out(cli("replay", str(HAPPY), "--json", *args, *live))
    assert out["state"] == "COMPLETED", out["state"]
    return str(out["operation_id"])


def test_two_replays_of_one_transcript_have_no_differences(cli: Invoke) -> None:
    a = replayed(cli, "--registry", str(REGISTRY))
    b = replayed(cli, "--registry", str(REGISTRY))
    result = cli("diff", a, b, "--json")
    assert result.exit_code == 0, result.output
    assert json_out(result) == {"a": a, "b": b, "equal": True, "differences": []}


def test_one_changed_result_is_exactly_one_difference(cli: Invoke, tmp_path: Path) -> None:
    a = replayed(cli, "--registry", str(REGISTRY))
    b = replayed(cli, "--registry", str(changed_registry(tmp_path)))
    result = cli("diff", a, b, "--json")
    assert result.exit_code == 18
    (difference,) = json_out(result)["differences"]
    assert difference["path"] == "$.turns[0].calls[0].result.result.status"
    assert (difference["a"], difference["b"]) == ("delivered", "lost")
    assert difference["call_id_a"] == difference["call_id_b"]


def test_the_difference_is_shown_side_by_side(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = replayed(cli, "--registry", str(REGISTRY))
    b = replayed(cli, "--registry", str(changed_registry(tmp_path)))
    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=200, highlight=False))
    assert cli("diff", a, b).exit_code == 18
    shown = buffer.getvalue()
    assert "1 difference(s)" in shown
    assert "$.turns[0].calls[0].result.result.status" in shown
    assert "delivered" in shown and "lost" in shown


def test_two_cassettes_compare_by_replaying_their_recorded_results(cli: Invoke) -> None:
    same = cli("diff", str(HAPPY), str(HAPPY), "--json")
    assert same.exit_code == 0 and json_out(same)["equal"] is True
    other = cli("diff", str(HAPPY), str(BRANCHES / "duplicate_then_no_progress.yaml"), "--json")
    assert other.exit_code == 18
    paths = [d["path"] for d in json_out(other)["differences"]]
    assert "$.state" in paths
    assert "$.turns[4]" in paths  # the extra turn is only in B


def test_an_operation_and_a_cassette_compare(cli: Invoke) -> None:
    op = replayed(cli)
    result = cli("diff", op, str(HAPPY), "--json")
    assert result.exit_code == 0, result.output


def test_an_unknown_target_is_exit_2(cli: Invoke) -> None:
    result = cli("diff", "nothing-here", str(HAPPY))
    assert result.exit_code == 2
    assert "neither an operation id" in result.stderr


def test_json_diff_names_each_leaf_by_path() -> None:
    a = {"ok": True, "result": {"items": [1, 2], "n": 1, "odd key": "x"}}
    b = {"ok": True, "result": {"items": [1, 3, 4], "n": 1.0, "odd key": "y"}, "more": None}
    changes = [(c.path, c.kind) for c in json_diff(a, b)]
    assert changes == [
        ("$.result.items[1]", "changed"),
        ("$.result.items[2]", "only_b"),
        ("$.result['odd key']", "changed"),
        ("$.more", "only_b"),
    ]
    assert json_diff(True, 1) and json_diff("1", 1)  # JSON types are not coerced


def test_calls_align_by_id_first_then_by_position() -> None:
    def call(call_id: str, name: str) -> CallView:
        return CallView(call_id, name, {}, "SUCCEEDED", None)

    a = [call("c1", "get_order"), call("c2", "submit_refund")]
    b = [call("x9", "get_order"), call("c2", "submit_refund"), call("x8", "get_order")]
    pairs = [
        (p[0].call_id if p[0] else None, p[1].call_id if p[1] else None) for p in align_calls(a, b)
    ]
    assert pairs == [("c1", "x9"), ("c2", "c2"), (None, "x8")]
