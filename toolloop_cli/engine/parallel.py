"""Running one turn's approved calls: concurrently up to ``max_parallel``, sequential tools alone.

Only handlers run in worker threads; every store write (intents before, results after) happens
on the calling thread, one transaction per state change, so the store needs no locking and a
crash leaves each call either not started, EXECUTING (intent committed) or finished.
Results are committed as they complete, so one slow or failing call never holds back or
cancels its siblings' committed results; the model still receives them in proposal order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def batches(items: Sequence[T], sequential: Callable[[T], bool]) -> list[list[T]]:
    """Split ``items`` (in the model's order) into batches: a sequential item is alone."""
    out: list[list[T]] = []
    current: list[T] = []
    for item in items:
        if sequential(item):
            if current:
                out.append(current)
                current = []
            out.append([item])
        else:
            current.append(item)
    if current:
        out.append(current)
    return out


#: Worker threads are kept for the life of the process: starting threads per turn costs more
#: than most handlers. Each handler still runs under its own timeout inside the dispatcher.
_POOL_SIZE = 64
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: a pool it inherited would take work
    and never run it. The child starts its own on first use."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="toolloop-call")
        return _pool


def run_all(items: Sequence[T], work: Callable[[T], R], max_parallel: int) -> Iterator[tuple[T, R]]:
    """Yield ``(item, work(item))`` as each finishes, with at most ``max_parallel`` running."""
    if max_parallel <= 1 or len(items) <= 1:
        for item in items:
            yield item, work(item)
        return
    pool = _shared_pool()
    waiting = list(reversed(items))
    running: dict[Future[R], T] = {}
    while waiting or running:
        while waiting and len(running) < max_parallel:
            item = waiting.pop()
            running[pool.submit(work, item)] = item
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            yield running.pop(future), future.result()
