"""``python -m toolloop_cli`` in a child whose own peak memory is measured.

A child forked straight from pytest starts with pytest's pages counted in its ``ru_maxrss``
(Linux carries the peak from before ``exec`` across it), so a worker that has grown to 300 MB
would make every child look that large. A small launcher process, itself started small, sets
the address-space guard, runs toolloop and writes the peak that ``wait4`` reports for it alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_LAUNCHER = """
import os, resource, subprocess, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
child = subprocess.Popen([sys.executable, "-m", "toolloop_cli", *sys.argv[3:]])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class Measured:
    """How a toolloop child ended: exit, output, its own peak RSS and wall time."""

    code: int
    stdout: str
    stderr: str
    max_rss_kib: int
    seconds: float
    killed: bool


def run_measured(
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    address_space_bytes: int = 1 << 30,
) -> Measured:
    """Run toolloop with ``args`` in ``cwd``; kill its process group after ``timeout_s``."""
    rss = cwd / "child.maxrss"
    rss.unlink(missing_ok=True)
    out, err = cwd / "child.stdout", cwd / "child.stderr"
    started = time.monotonic()
    killed = False
    with out.open("wb") as stdout, err.open("wb") as stderr:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(rss), str(address_space_bytes), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            code = launcher.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            code = launcher.wait()
            killed = True
    return Measured(
        code=code,
        stdout=out.read_text(errors="replace"),
        stderr=err.read_text(errors="replace"),
        max_rss_kib=int(rss.read_text()) if rss.exists() else 0,
        seconds=time.monotonic() - started,
        killed=killed,
    )
