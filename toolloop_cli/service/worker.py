"""Workers: processes that take runnable operations from a shared store and run them.

An operation is runnable when it is mid-loop (its model request, validation, execution or
results not done) or waits for approvals none of which is still pending (decided, or past
its expiry), and no live process holds its lease. A worker takes one by taking its lease
(``store/lease.py``: written under the store's write lock, so two workers never both hold
it; a lease whose holder died is stale at its expiry, or at once on the holder's host) and
runs it with ``operations.resume`` to a pause or an end, renewing the lease as it steps. The
exactly-once rules are the engine's: intents before side effects, reconcile by idempotency
key, escalation for what cannot be known. A killed worker's operations are resumed by the
next worker that finds their lease stale.

On PostgreSQL a worker sleeps on ``LISTEN`` (``Store.announce_runnable`` notifies when an
operation is submitted or an approval decided) and looks again at least every
``poll_s``; on SQLite it looks every ``poll_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from toolloop_cli.engine.clock import iso
from toolloop_cli.errors import OperationBusy, ToolloopError
from toolloop_cli.store import Store, open_store

from . import operations

#: the states a worker steps an operation out of (WAITING_APPROVAL only once nothing pends)
_MID_LOOP = ("MODEL_REQUESTED", "VALIDATING", "EXECUTING", "RESULTS_READY")

_RUNNABLE = f"""
SELECT o.operation_id FROM operations o
  LEFT JOIN leases l ON l.operation_id = o.operation_id
 WHERE (o.state IN ({", ".join(f"'{s}'" for s in _MID_LOOP)})
        OR (o.state = 'WAITING_APPROVAL' AND NOT EXISTS (
              SELECT 1 FROM approvals a WHERE a.operation_id = o.operation_id
                 AND a.status = 'PENDING' AND a.expires_at > ?)))
   AND (l.operation_id IS NULL OR l.expires_at <= ? OR l.host = ?)
 ORDER BY o.updated_at, o.operation_id
 LIMIT ?
"""


def runnable(store: Store, *, host: str, limit: int = 20, now: float | None = None) -> list[str]:
    """Operations a worker on ``host`` may try to take now, oldest change first.

    A lease held on this host is listed too: whether its holder is alive only this host can
    tell, and taking the lease decides it.
    """
    moment = time.time() if now is None else now
    stamp = iso(datetime.fromtimestamp(moment, UTC))
    rows = store.conn.execute(_RUNNABLE, (stamp, moment, host, limit)).fetchall()
    return [str(r[0]) for r in rows]


@dataclass
class WorkerStats:
    """What a worker did: operations stepped, and how each run stopped."""

    taken: int = 0
    busy: int = 0
    failed: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, state: str) -> None:
        with self.lock:
            self.taken += 1
            self.ended[state] = self.ended.get(state, 0) + 1


@dataclass
class WorkerOptions:
    store: str
    concurrency: int = 1
    #: stop once nothing is runnable (else run until ``stop`` is set)
    drain: bool = False
    poll_s: float = 1.0
    tenant: str | None = None


def run_worker(
    options: WorkerOptions,
    *,
    stop: threading.Event | None = None,
    on_taken: Callable[[str, str], None] | None = None,
) -> WorkerStats:
    """Run ``concurrency`` threads (each with its own store connection) until ``stop`` is set,
    or, with ``drain``, until none of them finds anything runnable."""
    import socket

    stop = stop or threading.Event()
    stats = WorkerStats()
    host = socket.gethostname()
    errors: list[BaseException] = []

    def loop() -> None:
        store = open_store(options.store)
        wake = _Waker(options.store, options.poll_s) if store.postgres else None
        try:
            while not stop.is_set():
                if _take_one(store, host, stats, options.tenant, on_taken):
                    continue
                if options.drain:
                    return
                if wake is not None:
                    wake.wait()
                else:
                    stop.wait(options.poll_s)
        except BaseException as exc:  # reported by run_worker, never lost in a thread
            errors.append(exc)
            stop.set()
        finally:
            if wake is not None:
                wake.close()
            store.close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(options.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return stats


def _take_one(
    store: Store,
    host: str,
    stats: WorkerStats,
    tenant: str | None,
    on_taken: Callable[[str, str], None] | None,
) -> bool:
    """Run the first runnable operation whose lease this worker gets; False if none."""
    for op_id in runnable(store, host=host):
        try:
            result = operations.resume(store, op_id, tenant=tenant)
        except OperationBusy:
            with stats.lock:
                stats.busy += 1
            continue
        except ToolloopError:
            # the operation cannot go on here (its registry is gone, its state moved under
            # us): counted, and left as stored for an operator
            with stats.lock:
                stats.failed += 1
            continue
        state = result.operation.state.value
        stats.count(state)
        if on_taken is not None:
            on_taken(op_id, state)
        return True
    return False


class _Waker:
    """A PostgreSQL connection that LISTENs for runnable operations."""

    def __init__(self, url: str, poll_s: float) -> None:
        import psycopg

        from toolloop_cli.store.postgres import RUNNABLE_CHANNEL

        self.poll_s = poll_s
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(f"LISTEN {RUNNABLE_CHANNEL}")

    def wait(self) -> None:
        """Return on the first notification, or after ``poll_s``."""
        for _ in self.conn.notifies(timeout=self.poll_s, stop_after=1):
            break

    def close(self) -> None:
        self.conn.close()
