"""Running one turn's approved calls: concurrently up to ``max_parallel``, sequential tools alone.

Only handlers run in worker threads; every store write (intents before, results after) happens
on the calling thread, one transaction per state change, so the store needs no locking and a
crash leaves each call either not started, EXECUTING (intent committed) or finished.
Results are committed as they complete, so one slow or failing call never holds back or
cancels its siblings' committed results; the model still receives them in proposal order.
"""

from __future__ import annotations

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


def run_all(items: Sequence[T], work: Callable[[T], R], max_parallel: int) -> Iterator[tuple[T, R]]:
    """Yield ``(item, work(item))`` as each finishes, with at most ``max_parallel`` running."""
    if max_parallel <= 1 or len(items) <= 1:
        for item in items:
            yield item, work(item)
        return
    with ThreadPoolExecutor(max_workers=min(max_parallel, len(items))) as pool:
        running: dict[Future[R], T] = {pool.submit(work, item): item for item in items}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                yield running.pop(future), future.result()
