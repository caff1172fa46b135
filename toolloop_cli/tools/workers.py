"""The threads handlers run in, kept for the life of the process.

A handler runs in a thread so that its caller can stop waiting for it (its timeout, the
operation's deadline); starting a thread per call costs more than most handlers. A worker
that finishes a job waits for the next one; one whose handler overran is still busy, so the
next job gets another worker (an idle one, or a new one). Workers are daemon threads: a
handler that never returns does not keep the process alive.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["start"]

Job = Callable[[], None]


class _Worker:
    def __init__(self, pool: _Pool) -> None:
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.pool = pool
        thread = threading.Thread(target=self._serve, name="toolloop-handler", daemon=True)
        thread.start()

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job()
            finally:
                self.pool.idle(self)


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def start(self, job: Job) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        worker.jobs.put(job)

    def idle(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)


_pool = _Pool()


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: it starts workers of its own."""
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_in_child)


def start(job: Job) -> None:
    """Run ``job`` on a worker thread (it reports back itself; exceptions are its own)."""
    _pool.start(job)
