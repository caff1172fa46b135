"""Parallel calls of a turn, sequential tools, async handlers; escalation to a person."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.scripted import call, final, handler_log, run_script, turn

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.loop import OperationTerminal
from toolloop_cli.service import operations
from toolloop_cli.store import Store, open_store


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


def test_results_come_back_in_call_order_whatever_finished_first(store: Store) -> None:
    slow_first = turn(
        call("slow", {"ms": 200, "n": 1}),
        call("slow", {"ms": 10, "n": 2}),
        call("slow", {"ms": 100, "n": 3}),
    )
    result, transport = run_script(store, [slow_first, final()], max_parallel=3)
    assert result.target.value == "COMPLETED"
    finished = [e["call_id"] for e in handler_log(store)]
    assert finished[0].endswith("_1")  # the 10 ms call finished first
    sent = transport.requests[1].body["input"]
    results = [item["call_id"] for item in sent if item.get("role") == "tool"]
    assert results == ["call_turn1_0", "call_turn1_1", "call_turn1_2"]


def test_sequential_tools_never_overlap(store: Store) -> None:
    calls = [call("one_at_a_time", {"n": i}) for i in range(6)]
    calls.insert(3, call("slow", {"ms": 30, "n": 9}))
    result, _ = run_script(store, [turn(*calls), final()], max_parallel=8)
    assert result.target.value == "COMPLETED"
    overlaps = [e["overlap"] for e in handler_log(store) if e["tool"] == "one_at_a_time"]
    assert overlaps == [1] * 6


def test_async_handlers_run(store: Store) -> None:
    result, _ = run_script(store, [turn(call("async_echo", {"n": 5})), final()])
    assert result.target.value == "COMPLETED"
    (c,) = store.calls(result.operation.operation_id)
    assert c.model_result == {"ok": True, "result": {"async": {"n": 5}}}


def test_a_failing_call_does_not_cancel_its_siblings(store: Store) -> None:
    answers = [
        turn(call("slow", {"ms": 50, "n": 1}), call("slow", {"ms": 99999}), call("echo", {"n": 3})),
        final(),
    ]
    result, _ = run_script(store, answers, max_parallel=3)
    assert result.target.value == "COMPLETED"
    states = [c.state.value for c in store.calls(result.operation.operation_id)]
    assert states == ["SUCCEEDED", "INVALID", "SUCCEEDED"]


def escalated(store: Store) -> str:
    result, _ = run_script(store, [turn(call("needs_person")), final("after the person")])
    assert result.target.value == "ESCALATED"
    assert "a person must decide" in str(result.operation.reason)
    return result.operation.operation_id


def test_a_handler_can_escalate_and_resume_needs_force(store: Store) -> None:
    op_id = escalated(store)
    with pytest.raises(OperationTerminal, match="--force-continue"):
        operations.resume(store, op_id, transport=ScriptedTransport([final()]))
    assert len(handler_log(store)) == 1


def test_force_continue_is_an_audited_operator_decision(store: Store) -> None:
    op_id = escalated(store)
    transport = ScriptedTransport([final("after the person")])
    done = operations.resume(
        store, op_id, force_continue=True, decided_by="ops-lead", transport=transport
    )
    assert done.target.value == "COMPLETED"
    forced = [
        t for t in store.transitions(op_id) if "forced continue by ops-lead" in (t["reason"] or "")
    ]
    assert forced and forced[0]["source"] == "ESCALATED"
    sent = transport.requests[0].body["input"]
    (tool_result,) = [i for i in sent if i.get("role") == "tool"]
    assert tool_result["content"]["error"]["code"] == "escalated"


def test_force_continue_needs_a_listed_operator(store: Store) -> None:
    from toolloop_cli.errors import ApprovalError, UsageError

    op_id = escalated(store)
    with pytest.raises(UsageError, match="--as"):
        operations.resume(store, op_id, force_continue=True, transport=ScriptedTransport([]))
    with pytest.raises(ApprovalError, match="mallory"):
        operations.resume(
            store, op_id, force_continue=True, decided_by="mallory", transport=ScriptedTransport([])
        )


def test_escalations_are_listed_by_show_and_pending(store: Store, cli: Invoke) -> None:
    op_id = escalated(store)
    shown = json_out(cli("show", op_id, "--json"))
    assert shown["state"] == "ESCALATED" and "a person must decide" in shown["reason"]
    pending = json_out(cli("pending", "--json"))
    assert [o["operation_id"] for o in pending["escalated"]] == [op_id]
    human = cli("pending")
    assert "ESCALATED" in human.stdout and "--force-continue" in human.stdout
    refused = cli("resume", op_id)
    assert refused.exit_code == 2 and "--force-continue" in refused.stderr


def test_a_forked_child_runs_parallel_calls_with_its_own_worker_threads() -> None:
    """The handlers' threads are kept for the process; a child forked after the parent used
    them has none of those threads, so it must start its own rather than wait forever on
    the old ones."""
    import os

    from toolloop_cli.engine.parallel import run_all
    from toolloop_cli.tools import workers

    def doubled(x: int, on_done: Callable[[], None]) -> _OnThread:
        return _OnThread(lambda: x * 2, on_done, workers.start)

    assert sorted(r or 0 for _, r in run_all([1, 2, 3], doubled, 3)) == [2, 4, 6]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            import faulthandler

            faulthandler.dump_traceback_later(20, exit=True)
            code = 0 if sorted(r or 0 for _, r in run_all([1, 2], doubled, 2)) == [2, 4] else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class _OnThread:
    """``fn`` run by ``start`` on another thread, waited for at most 10 s."""

    def __init__(
        self,
        fn: Callable[[], int],
        on_done: Callable[[], None],
        start: Callable[[Callable[[], None]], None],
    ) -> None:
        self.expires = time.monotonic() + 10
        self.value: int | None = None
        self.done = threading.Event()

        def job() -> None:
            self.value = fn()
            self.done.set()
            on_done()

        start(job)

    def finish(self) -> int | None:
        self.done.wait(max(0.0, self.expires - time.monotonic()))
        return self.value


def test_run_all_yields_each_item_as_it_ends_and_gives_up_on_one_past_its_time() -> None:
    from toolloop_cli.engine.parallel import run_all
    from toolloop_cli.tools import workers

    release = threading.Event()

    def start(x: int, on_done: Callable[[], None]) -> _OnThread:
        def work() -> int:
            if x == 1:
                release.wait(5)  # the slow one: still running when its time is up
            return x

        running = _OnThread(work, on_done, workers.start)
        running.expires = time.monotonic() + (0.3 if x == 1 else 5)
        return running

    began = time.monotonic()
    order = [(item, value) for item, value in run_all([1, 2, 3], start, 3)]
    release.set()
    assert [item for item, _ in order] == [2, 3, 1] or [item for item, _ in order] == [3, 2, 1]
    assert order[-1] == (1, None)  # given up on: no value
    assert time.monotonic() - began < 4  # not held by the slow one past its time
