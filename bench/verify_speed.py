"""How fast ``toolloop verify`` checks a store, next to plain hashlib over the same bytes.

Builds a store through the library API, then times, best of R runs: with ``--ops N``, N
completed refund operations from the bundled OpenAI recording (approvals, a side effect);
with ``--calls N``, the bench workload (``workload.py``: turns of 3 read calls) in operations
of 200 turns until N calls are stored.

- ``verify_store``: read every row, walk the chain, compare rows, recompute every hash and
  rebuild every request through the adapter (what ``toolloop verify`` does);
- ``audit.verify`` on rows already in memory, without request rebuilding, then with the
  store's history rules (each record checked against the previous one of its row);
- the chain walk alone;
- ``hashlib.sha256`` over the same record bytes (the floor: one hash per record);
- ``seal`` of every record (what the engine pays per append, hashing only).

Usage: python bench/verify_speed.py [--ops N | --calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from toolloop_cli.audit.canonical import fast_canonical_bytes, sha256_hex
from toolloop_cli.audit.chain import walk
from toolloop_cli.audit.hashing import GENESIS, chain_link, seal
from toolloop_cli.audit.verify import verify
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import read_rows, verify_store
from toolloop_cli.store import open_store
from toolloop_cli.store.audit_rules import HISTORY_RULES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402

REGISTRY = ROOT / "registries" / "refunds.yaml"
TRANSCRIPT = ROOT / "transcripts" / "refund-openai.yaml"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."


class Clock:
    def __init__(self) -> None:
        self.moment = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)

    def now(self) -> datetime:
        self.moment += timedelta(milliseconds=1)
        return self.moment


def build(path: Path, count: int) -> None:
    store = open_store(path)
    clock = Clock()
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=TRANSCRIPT)
    for _ in range(count):
        op_id = operations.start(store, options, clock=clock).operation.operation_id
        (apr,) = store.pending_approvals()
        approvals.approve(store, apr.approval_id, "ops-lead", clock=clock)
        operations.resume(store, op_id, clock=clock)
    store.close()


def build_calls(path: Path, calls: int, turns: int = 200, per_turn: int = 3) -> int:
    """Operations of the bench workload, run to their end, until ``calls`` calls are stored."""
    from toolloop_cli.transcripts.cassette import load_cassette
    from toolloop_cli.transcripts.transport import ReplayTransport

    store = open_store(path)
    cassette = load_cassette(
        workload.write_cassette("openai", turns, per_turn, path.parent / "w.yaml")
    )
    options = operations.RunOptions(
        task=workload.TASK,
        registry=workload.REGISTRY,
        guard_overrides=workload.guard_overrides(turns, per_turn),
        provider="openai",
        model=workload.MODELS["openai"],
    )
    clock = Clock()
    made = 0
    while made < calls:
        done = operations.start(store, options, clock=clock, transport=ReplayTransport(cassette))
        assert done.target.value == "COMPLETED", done.operation.reason
        made += turns * per_turn
    store.close()
    return made


def _reseal(record: dict[str, Any]) -> object:
    """Hash a record again as the engine appends it (either layout): its canonical bytes,
    their hash and the link (the row hashes its writes state are taken as written)."""
    if record.get("kind") == "batch":
        digest = sha256_hex(fast_canonical_bytes(record))
        return chain_link(record["seq"], GENESIS, digest)
    return seal(record["seq"], GENESIS, record["kind"], record["row"])


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=25)
    parser.add_argument("--calls", type=int, default=0, help="build from the bench workload")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.db"
        started = time.perf_counter()
        if args.calls:
            made = build_calls(path, args.calls)
            what = f"{made} calls"
        else:
            build(path, args.ops)
            what = f"{args.ops} operations"
        built = time.perf_counter() - started
        store = open_store(path)
        rows = read_rows(store)
        records = len(rows.audit_log)
        data = [r["record"].encode("utf-8") for r in rows.audit_log]
        size = sum(len(d) for d in data)
        assert verify_store(store).ok
        parsed = [json.loads(r["record"]) for r in rows.audit_log]
        cases: list[tuple[str, Callable[[], object]]] = [
            ("verify_store (toolloop verify)", lambda: verify_store(store)),
            ("audit.verify, rows in memory", lambda: verify(rows)),
            ("audit.verify + history rules", lambda: verify(rows, rules=HISTORY_RULES)),
            ("chain walk only", lambda: walk(rows.audit_log)),
            ("hashlib.sha256 over the records", lambda: [hashlib.sha256(d).digest() for d in data]),
            (
                "seal (append-side hashing)",
                lambda: [_reseal(r) for r in parsed],
            ),
        ]
        print(f"store: {what}, {records} audit records, {size / 1e6:.2f} MB")
        print(f"built in {built:.1f} s")
        print(f"{'what':34} {'seconds':>9} {'MB/s':>8} {'records/s':>12} {'µs/record':>10}")
        for name, fn in cases:
            seconds = best(fn, args.repeat)
            rate = records / seconds
            mbs = size / 1e6 / seconds
            print(f"{name:34} {seconds:9.4f} {mbs:8.1f} {rate:12,.0f} {1e6 / rate:10.1f}")
        store.close()


if __name__ == "__main__":
    main()
