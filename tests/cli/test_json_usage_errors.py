"""A bad command line under ``--json``: one JSON error object on stdout, one line on stderr, exit 2.

Click finds these errors while it parses, before any command runs; every other bad input is
reported the same way by the commands themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))

BAD_COMMAND_LINES = {
    "missing_argument": (("show", "--json"), "Missing argument"),
    "unknown_option": (("show", "op_x", "--bogus", "--json"), "No such option: --bogus"),
    "not_an_integer": (("runs", "--limit", "abc", "--json"), "'--limit'"),
    "below_minimum_turns": ((*RUN, "--max-turns", "0", "--json"), "'--max-turns'"),
    "below_minimum_concurrency": (("worker", "--concurrency", "0", "--json"), "'--concurrency'"),
    "unknown_command": (("nosuch", "--json"), "No such command"),
    "bad_per_tool_limit": ((*RUN, "--max-calls-per-tool", "x", "--json"), "TOOL=N"),
}


def _one_error_line(result: Any) -> str:
    stderr: str = result.stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_COMMAND_LINES))
def test_a_bad_command_line_is_one_json_error_object(cli: Invoke, case: str) -> None:
    args, needle = BAD_COMMAND_LINES[case]
    result = cli(*args)
    assert result.exit_code == 2
    payload = json_out(result)
    assert payload["error_type"] == "UsageError"
    assert needle in payload["error"]
    assert needle in _one_error_line(result)


def test_a_bad_durability_in_the_environment_is_one_json_error_object(cli: Invoke) -> None:
    result = cli("runs", "--json", env={"TOOLLOOP_DURABILITY": "garbage"})
    assert result.exit_code == 2
    assert "'--durability'" in json_out(result)["error"]
    assert "garbage" in _one_error_line(result)


def test_without_json_a_bad_command_line_keeps_the_usage_hint(cli: Invoke) -> None:
    result = cli("runs", "--limit", "abc")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "toolloop runs --help" in result.stderr


def test_a_store_is_not_created_by_a_refused_command_line(cli: Invoke, store_path: Path) -> None:
    assert cli(*RUN, "--max-turns", "0", "--json").exit_code == 2
    assert not store_path.exists()


def test_serve_takes_json_and_reports_a_bad_log_as_one_object(tmp_path: Path) -> None:
    args = ["serve", str(REFUND_OPENAI), "--port", "0", "--log", str(tmp_path), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2
    payload = json_out(result)
    assert payload["error_type"] == "UsageError" and "is a directory" in payload["error"]
    assert "is a directory" in _one_error_line(result)


def test_registry_import_mcp_takes_json(cli: Invoke) -> None:
    result = cli("registry", "import-mcp", "--json")
    assert result.exit_code == 2
    assert "--stdio" in json_out(result)["error"]
    _one_error_line(result)
