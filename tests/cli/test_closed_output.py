"""A reader that goes away (``toolloop run … | head -1``) costs the output, never the exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
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
