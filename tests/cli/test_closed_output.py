"""Output a person cannot use: a reader that goes away (``| head``), a text too long to show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK


@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_stdout_keeps_the_operations_exit_code(tmp_path: Path, as_json: bool) -> None:
    """Rich ended the command with exit 1 ("a bug") at the first line it could not write,
    whatever the run had done; the run now goes on and exits 10, WAITING_APPROVAL."""
    command = [
        sys.executable, "-m", "toolloop_cli", "run", TASK, "--registry", str(REGISTRY),
        "--transcript", str(REFUND_OPENAI), "--store", str(tmp_path / "store.db"),
    ]  # fmt: skip
    if as_json:
        command.append("--json")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 10, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    shown = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "runs", "--store", str(tmp_path / "store.db"),
         "--json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert '"WAITING_APPROVAL"' in shown.stdout  # the run went on to its pause


def test_a_huge_final_text_is_shown_in_part_and_whole_in_json(cli: Invoke, tmp_path: Path) -> None:
    """A model's 2 MB answer without a space: Rich's wrapping of it into the panel took time
    growing faster than the text (5 MB: 25 s). The terminal shows the first
    ``SHOWN_TEXT_CHARS`` characters and says how many more ``--json`` has."""
    from support.harness.scenario import write_cassette

    from toolloop_cli.cli.panels import SHOWN_TEXT_CHARS

    text = "x" * 2_000_000
    cassette = write_cassette(tmp_path / "long.yaml", [text])
    shown = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(cassette))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count("x") < SHOWN_TEXT_CHARS + 1000
    assert (
        f"… {2_000_000 - SHOWN_TEXT_CHARS:,} more characters not shown here: --json has it all"
        in shown.stdout
    )
    (view,) = json_out(cli("runs", "--json"))["operations"]
    whole = json_out(cli("show", view["operation_id"], "--json"))
    assert whole["final_text"] == text
