"""Running one turn's approved calls: concurrently up to ``max_parallel``, sequential tools alone.

Only handlers run in worker threads (the toolbox's, kept for the process); every store write
(intents before, results after) happens on the calling thread, one transaction per state
change, so the store needs no locking and a crash leaves each call either not started,
EXECUTING (intent committed) or finished.
Results are committed as they complete, so one slow or failing call never holds back or
cancels its siblings' committed results; the model still receives them in proposal order.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


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


class Finished(Generic[R]):
    """Work that was done when it was started (a recording's answer): nothing to wait for."""

    expires = float("-inf")

    def __init__(self, value: R) -> None:
        self.value = value

    def finish(self) -> R:
        return self.value


class Running(Protocol[R_co]):
    """Work started elsewhere: ``finish`` waits for it until ``expires`` (monotonic)."""

    @property
    def expires(self) -> float: ...

    def finish(self) -> R_co: ...


#: starts one item's work and calls the callback (from any thread) once it is done
Start = Callable[[T, Callable[[], None]], Running[R]]


class Patience:
    """What to do once the calling thread has waited ``seconds`` with work still running
    (``then``, called once, on the calling thread)."""

    def __init__(self, seconds: float, then: Callable[[], None]) -> None:
        self.until = time.monotonic() + seconds
        self.then: Callable[[], None] | None = then

    def left(self) -> float:
        """Seconds until ``then`` is due (infinite once it has been called)."""
        return self.until - time.monotonic() if self.then is not None else float("inf")

    def run_out(self) -> None:
        then, self.then = self.then, None
        if then is not None:
            then()


def run_all(
    items: Sequence[T],
    start: Start[T, R],
    max_parallel: int,
    patience: Patience | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield ``(item, result)`` as each item's work finishes or its time is up, with at most
    ``max_parallel`` running at once.

    The calling thread starts the work (each item on a thread of the handlers' pool) and then
    sleeps until one of them reports back: one hand-off per item, and nothing else to wake.
    ``patience``, if given, runs out once while the calling thread waits past it.
    """
    done: queue.SimpleQueue[int] = queue.SimpleQueue()
    waiting = list(reversed(list(enumerate(items))))
    running: dict[int, tuple[T, Running[R]]] = {}
    while waiting or running:
        while waiting and len(running) < max(1, max_parallel):
            k, item = waiting.pop()
            running[k] = (item, start(item, partial(done.put, k)))
        item, work = running.pop(_next(done, running, patience))
        yield item, work.finish()


def _next(
    done: queue.SimpleQueue[int],
    running: Mapping[int, tuple[T, Running[R]]],
    patience: Patience | None,
) -> int:
    """The first running item to report back, or the first whose time is up (reports of
    items already given up on are skipped)."""
    while True:
        first = min(running, key=lambda k: running[k][1].expires)
        left = running[first][1].expires - time.monotonic()
        due = patience.left() if patience is not None else float("inf")
        try:
            wait = min(left, due)
            k = done.get(timeout=wait) if wait > 0 else done.get_nowait()
        except queue.Empty:
            if patience is not None and due <= left:
                patience.run_out()
                continue
            return first
        if k in running:
            return k
