"""Forked children that a failpoint or a timer kills, and a pool to spread cases over cores.

``os.fork`` (not ``python -m`` starts) keeps a kill case cheap: the child already has every
module imported. A child never touches a SQLite connection of its parent (the harness
opens stores only inside the function it runs) and leaves with ``os._exit``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from toolloop_cli.wiring import failpoints

T = TypeVar("T")

#: a child's exit code when the function it ran raised (its traceback goes to stderr)
CHILD_ERROR = 70


def fork_call(
    fn: Callable[[], Any], *, failpoint: str | None = None, kill_after_s: float | None = None
) -> int:
    """Run ``fn`` in a forked child; return its wait status as ``-signal`` or an exit code.

    ``failpoint`` (``name:nth``) arms ``TOOLLOOP_FAILPOINT`` in the child only;
    ``kill_after_s`` has the parent SIGKILL the child after that many seconds.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            faulthandler.dump_traceback_later(100, exit=True)
            failpoints.reset()
            if failpoint:
                os.environ["TOOLLOOP_FAILPOINT"] = failpoint
            else:
                os.environ.pop("TOOLLOOP_FAILPOINT", None)
            fn()
        except BaseException:
            traceback.print_exc()
            code = CHILD_ERROR
        finally:
            os._exit(code)
    if kill_after_s is not None:
        deadline = time.monotonic() + kill_after_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _code(status)
            time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    return _code(status)


def _code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def pool_map(
    work: Callable[[T], dict[str, Any]], cases: Sequence[T], workers: int | None = None
) -> list[dict[str, Any]]:
    """``[work(case) for case in cases]`` spread over forked workers (one per core).

    Each worker returns its results as JSON lines through a pipe; a worker that dies is a
    failure of every case it had left.
    """
    workers = max(1, min(workers or os.cpu_count() or 1, len(cases)))
    if workers == 1:
        return [work(case) for case in cases]
    slices = [list(range(i, len(cases), workers)) for i in range(workers)]
    running: list[tuple[int, int, list[int]]] = []
    for indexes in slices:
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the worker
            os.close(read_fd)
            code = 0
            try:
                with os.fdopen(write_fd, "w") as out:
                    for i in indexes:
                        out.write(json.dumps({"i": i, **work(cases[i])}) + "\n")
                        out.flush()
            except BaseException:
                traceback.print_exc()
                code = CHILD_ERROR
            finally:
                os._exit(code)
        os.close(write_fd)
        running.append((pid, read_fd, indexes))
    results: dict[int, dict[str, Any]] = {}
    for pid, read_fd, indexes in running:
        with os.fdopen(read_fd) as stream:
            for line in stream:
                row = json.loads(line)
                results[row.pop("i")] = row
        _, status = os.waitpid(pid, 0)
        for i in indexes:
            results.setdefault(i, {"problems": [f"worker died (status {status})"]})
    return [results[i] for i in range(len(cases))]


def flatten(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every problem any row reported, prefixed with its case."""
    return [f"{row.get('case')}: {p}" for row in rows for p in row.get("problems", [])]
