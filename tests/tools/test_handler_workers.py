"""Handlers run on worker threads kept for the process: no thread per call, and a handler that
overran never holds up the next one."""

from __future__ import annotations

import threading

from toolloop_cli.tools import workers


def _run_and_wait(job_thread: list[int]) -> None:
    done = threading.Event()

    def job() -> None:
        job_thread.append(threading.get_ident())
        done.set()

    workers.start(job)
    assert done.wait(5)


def test_calls_one_after_another_reuse_the_same_worker_thread() -> None:
    threads: list[int] = []
    for _ in range(50):
        _run_and_wait(threads)
    # a worker goes back to idle just after its job reports done, so a call made at that
    # instant may start one more; never one per call
    assert len(set(threads)) <= 3, len(set(threads))
    assert threading.get_ident() not in threads


def test_a_handler_still_running_does_not_hold_up_the_next_call() -> None:
    release = threading.Event()
    stuck = threading.Event()

    def overran() -> None:
        stuck.set()
        release.wait(10)

    workers.start(overran)
    assert stuck.wait(5)
    try:
        threads: list[int] = []
        _run_and_wait(threads)  # another worker takes it while the first is still busy
    finally:
        release.set()
