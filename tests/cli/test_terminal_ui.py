"""The terminal for operators (issue 17): tables and panels at 80 columns, coloured by state,
``--json`` unchanged, and progress as one line per turn on stderr (raw transitions with
``--verbose``)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pexpect
from rich.console import Console
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.store import open_store

#: lines that are commands to copy: printed whole, never wrapped
_COMMANDS = ("  approve:", "  deny:", "  resume:", "  next:")
WIDE = 80


def waiting_refund(cli: Invoke) -> dict[str, Any]:
    result = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    assert result.exit_code == 10, result.output
    (op,) = json_out(cli("runs", "--json"))["operations"]
    return dict(op)


def too_wide(output: str) -> list[str]:
    return [
        line for line in output.splitlines() if len(line) > WIDE and not line.startswith(_COMMANDS)
    ]


def test_show_runs_and_pending_fit_80_columns(cli: Invoke) -> None:
    op = waiting_refund(cli)
    env = {"COLUMNS": str(WIDE)}
    for args in (("show", op["operation_id"]), ("runs",), ("pending",)):
        result = cli(*args, env=env)
        assert result.exit_code == 0, result.output
        assert too_wide(result.stdout) == [], args
    approved = cli("approve", only_approval(cli), "--as", "ops-lead", "--resume", env=env)
    assert approved.exit_code == 0
    assert too_wide(approved.stdout) == []
    assert "COMPLETED" in approved.stdout and "final text" in approved.stdout


def only_approval(cli: Invoke) -> str:
    (pending,) = json_out(cli("pending", "--json"))["pending"]
    return str(pending["approval_id"])


def test_long_unbroken_values_still_fit_80_columns(cli: Invoke) -> None:
    """A 300-character word in the task, a 251-character subject: each folds instead of
    widening a table."""
    word = "x" * 300
    result = cli(
        "run",
        TASK + " " + word,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(REFUND_OPENAI),
        "--subject",
        "s" + word[:250],  # a name is at most 256 characters
        env={"COLUMNS": str(WIDE)},
    )
    assert result.exit_code == 10, result.output
    assert too_wide(result.stdout) == []
    for args in (("runs",), ("pending",)):
        listed = cli(*args, env={"COLUMNS": str(WIDE)})
        assert too_wide(listed.stdout) == [], args


def test_json_output_keeps_every_design_field(cli: Invoke) -> None:
    """design.md §8: adding fields is fine; none of these may go or be renamed."""
    op = waiting_refund(cli)
    view = json_out(cli("show", op["operation_id"], "--json"))
    top = {"operation_id", "state", "provider", "api_family", "model", "tenant", "subject"}
    assert top | {"final_text", "reason", "turns", "calls", "approvals"} <= set(view)
    assert {"index", "response_id", "outcome", "finish_reason"} <= set(view["turns"][0])
    call_fields = {"response_id", "call_id", "name", "arguments", "state", "idempotency_key"}
    assert call_fields | {"result"} <= set(view["calls"][0])
    assert {"approval_id", "call_id", "status", "expires_at"} <= set(view["approvals"][0])
    pending = json_out(cli("pending", "--json"))
    assert set(pending) == {"pending", "escalated"}
    assert {"approval_id", "operation_id", "call_id", "tool", "status"} <= set(
        pending["pending"][0]
    )
    runs = json_out(cli("runs", "--json"))
    assert set(runs) == {"operations"} and runs["operations"][0]["state"] == "WAITING_APPROVAL"


def _coloured(renderable: Any) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=WIDE, force_terminal=True, color_system="standard").print(renderable)
    return buffer.getvalue()


def test_panels_are_coloured_by_state(cli: Invoke, store_path: Path) -> None:
    from toolloop_cli.cli import panels

    op = waiting_refund(cli)
    view = json_out(cli("show", op["operation_id"], "--json"))
    waiting = _coloured(panels.operation_header(view))
    assert "\x1b[33m╭" in waiting  # yellow: waiting for a person
    assert "\x1b[1;33mWAITING_APPROVAL" in waiting
    done = {**view, "state": "COMPLETED"}
    assert "\x1b[32m╭" in _coloured(panels.operation_header(done))  # green
    failed = {**view, "state": "FAILED"}
    assert "\x1b[31m╭" in _coloured(panels.operation_header(failed))  # red
    escalated = {**view, "state": "ESCALATED"}
    assert "\x1b[35m╭" in _coloured(panels.operation_header(escalated))  # magenta
    store = open_store(store_path)
    assert store.get_operation(op["operation_id"]).state.value == "WAITING_APPROVAL"


def test_progress_is_one_line_per_turn_on_stderr(cli: Invoke) -> None:
    result = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    assert result.exit_code == 10
    assert result.stderr.splitlines() == [
        "turn 0  get_order SUCCEEDED",
        "turn 1  create_refund_draft SUCCEEDED",
        "turn 2  submit_refund WAITING_APPROVAL  · operation WAITING_APPROVAL",
    ]
    assert "turn 0  get_order" not in result.stdout  # progress never mixes with the result
    approved = cli("approve", only_approval(cli), "--as", "ops-lead", "--resume")
    assert approved.stderr.splitlines() == [
        "turn 2  submit_refund SUCCEEDED",
        "turn 3  final text  · operation COMPLETED",
    ]


def test_verbose_adds_the_raw_transitions_and_call_moves(cli: Invoke) -> None:
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--verbose"
    )
    lines = result.stderr.splitlines()
    assert "  MODEL_REQUESTED -> VALIDATING" in lines
    assert "  VALIDATING -> WAITING_APPROVAL" in lines
    assert any(x.startswith("    call call_") and x.endswith("get_order: SUCCEEDED") for x in lines)
    assert "turn 1  create_refund_draft SUCCEEDED" in lines
    (op,) = json_out(cli("runs", "--json"))["operations"]
    resumed = cli("resume", op["operation_id"], "--verbose")
    assert resumed.exit_code == 10  # still waiting: nothing moved, and it says so
    quiet = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    assert " -> " not in quiet.stderr


def test_json_mode_prints_no_progress(cli: Invoke) -> None:
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--json"
    )
    assert result.stderr == ""
    assert json.loads(result.stdout)["state"] == "WAITING_APPROVAL"


def test_on_a_terminal_the_turns_show_as_a_status_line(store_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "toolloop_cli", "run", TASK, "--registry", str(REGISTRY)]
        + ["--transcript", str(REFUND_OPENAI), "--store", str(store_path)],
        env={**env, "TERM": "xterm-256color"},
        encoding="utf-8",
        timeout=60,
        dimensions=(60, 80),
    )
    child.expect(pexpect.EOF)
    screen = child.before
    assert isinstance(screen, str)
    child.close()
    assert child.exitstatus == 10
    assert "turn 2" in screen and "submit_refund" in screen
    assert "MODEL_REQUESTED -> VALIDATING" not in screen
