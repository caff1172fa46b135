"""Parallel speedup: one turn of 8 calls to a handler that sleeps 200 ms, --max-parallel 8 vs 1.

Run: .venv/bin/python bench/parallel.py   (prints one table; no assertions, figures only)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.loop import StepResult
from toolloop_cli.service import operations
from toolloop_cli.store import Store, open_store

ROOT = Path(__file__).resolve().parent.parent
#: the test suite's guard registry: its ``slow`` tool sleeps for ``ms`` (a data file, read only)
GUARDS = ROOT / "tests" / "fixtures" / "registries" / "guards.yaml"


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"calls": list(calls)}


def final(text: str = "done") -> dict[str, Any]:
    return {"text": text}


def run_script(
    store: Store, answers: list[dict[str, Any]], max_parallel: int
) -> tuple[StepResult, ScriptedTransport]:
    transport = ScriptedTransport(answers)
    options = operations.RunOptions(
        task="parallel calls",
        registry=GUARDS,
        provider="scripted",
        model="scripted-model",
        guard_overrides={"max_parallel": max_parallel},
    )
    return operations.start(store, options, transport=transport), transport


CALLS, SLEEP_MS, REPEATS = 8, 200, 5


def one_run(max_parallel: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(Path(folder) / "store.db")
        answers = [turn(*[call("slow", {"ms": SLEEP_MS, "n": i}) for i in range(CALLS)]), final()]
        started = time.perf_counter()
        result, _ = run_script(store, answers, max_parallel=max_parallel)
        elapsed = time.perf_counter() - started
        assert result.target.value == "COMPLETED", result.operation.reason
        store.close()
        return elapsed


def main() -> None:
    rows = {}
    for variant, parallel in (("sequential (--max-parallel 1)", 1), ("--max-parallel 8", 8)):
        times = [one_run(parallel) for _ in range(REPEATS)]
        rows[variant] = times
    base = statistics.median(rows["sequential (--max-parallel 1)"])
    print(f"{CALLS} calls x {SLEEP_MS} ms, median of {REPEATS} runs")
    print(f"{'variant':32} {'median s':>9} {'min-max s':>14} {'ratio':>7}")
    for variant, times in rows.items():
        med = statistics.median(times)
        print(f"{variant:32} {med:9.3f} {min(times):6.3f}-{max(times):6.3f} {med / base:7.3f}")


if __name__ == "__main__":
    main()
