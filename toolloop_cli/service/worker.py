"""Workers: processes that take runnable operations from a shared store and run them.

An operation is runnable when it is mid-loop (its model request, validation, execution or
results not done) or waits for approvals none of which is still pending (decided, or past
its expiry), and no live process holds its lease. A worker ``claim``s one (``store/lease.py``:
its candidates read ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the lease written by
compare-and-set, so two workers never both hold it; a lease whose holder died is stale at its
expiry, or at once on the holder's host) and runs it with ``operations.resume`` to a pause or
an end, renewing the lease as it steps. The exactly-once rules are the engine's: intents
before side effects, reconcile by idempotency key, escalation for what cannot be known. A
killed worker's operations are resumed by the next worker that finds their lease stale.

On PostgreSQL a worker's threads borrow connections from a pool (``store/pg_pool.py``) and
sleep on ``LISTEN`` (``Store.announce_runnable`` notifies when an operation is submitted or
an approval decided), looking again at least every ``poll_s``; on SQLite each thread keeps
its own connection and looks every ``poll_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from toolloop_cli.engine.clock import iso
from toolloop_cli.errors import OperationBusy, StoreBusy, ToolloopError, UsageError
from toolloop_cli.store import Store, lease, open_store

from . import operations

if TYPE_CHECKING:
    import psycopg

#: the states a worker steps an operation out of (WAITING_APPROVAL only once nothing pends)
_MID_LOOP = ("MODEL_REQUESTED", "VALIDATING", "EXECUTING", "RESULTS_READY")

_RUNNABLE = f"""
SELECT o.operation_id, l.token, l.pid, l.host, l.expires_at FROM operations o
  LEFT JOIN leases l ON l.operation_id = o.operation_id
 WHERE (o.state IN ({", ".join(f"'{s}'" for s in _MID_LOOP)})
        OR (o.state = 'WAITING_APPROVAL' AND NOT EXISTS (
              SELECT 1 FROM approvals a WHERE a.operation_id = o.operation_id
                 AND a.status = 'PENDING' AND a.expires_at > ?)))
   AND (l.operation_id IS NULL OR l.expires_at <= ? OR l.host = ?)
   AND (CAST(? AS TEXT) IS NULL OR o.tenant = ?)
 ORDER BY o.updated_at, o.operation_id
 LIMIT ?"""

#: takes in a row that find an operation listed as runnable still waiting, before it is
#: passed over (one is a race with another process; three, a store at odds with itself)
_STALLS = 3

#: how many candidates one claim looks at (and, on PostgreSQL, locks for its moment)
_CLAIM_BATCH = 4


def _candidates(host: str, tenant: str | None, limit: int) -> tuple[object, ...]:
    moment = time.time()
    stamp = iso(datetime.fromtimestamp(moment, UTC))
    return (stamp, moment, host, tenant, tenant, limit)


def runnable(store: Store, *, tenant: str | None = None, limit: int = 20) -> list[str]:
    """Operations a worker of this host may try to take now, oldest change first.

    A lease held on this host is listed too: whether its holder is alive only this host can
    tell, and claiming the lease decides it.
    """
    params = _candidates(lease.host_id(), tenant, limit)
    return [str(r[0]) for r in store.conn.execute(_RUNNABLE, params).fetchall()]


def claim(
    store: Store,
    *,
    tenant: str | None = None,
    ttl_s: float | None = None,
    skip: Collection[str] = (),
) -> lease.Lease | None:
    """The lease of the oldest runnable operation no live process holds, or None; those in
    ``skip`` (ones this worker could not run) are passed over."""
    params = _candidates(lease.host_id(), tenant, _CLAIM_BATCH + len(skip))
    return lease.claim(store, _RUNNABLE, params, ttl_s=ttl_s, skip=skip)


@dataclass
class WorkerStats:
    """What a worker did: operations stepped, and how each run stopped."""

    taken: int = 0
    #: runs that lost their lease to another process, and claims that met a lease row
    #: another process held locked past lock_timeout (nothing taken; looked at again)
    busy: int = 0
    failed: int = 0
    #: operations that could not go on here: not taken again by this worker (a store written
    #: around toolloop, a registry gone), else a drain would take the same one for ever
    not_run: set[str] = field(default_factory=set)
    #: operations taken that were found still waiting, and how many times in a row
    stalled: dict[str, int] = field(default_factory=dict)
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
    #: the lease a taken operation is held by, renewed as it steps (None: the default)
    lease_ttl_s: float | None = None


def run_worker(
    options: WorkerOptions,
    *,
    stop: threading.Event | None = None,
    on_taken: Callable[[str, str], None] | None = None,
) -> WorkerStats:
    """Run ``concurrency`` threads (each with its own store connection) until ``stop`` is set,
    or, with ``drain``, until none of them finds anything runnable."""
    stop = stop or threading.Event()
    stats = WorkerStats()
    errors: list[BaseException] = []
    stores, close = _store_source(options)

    def loop() -> None:
        wake = None
        try:
            with stores() as borrow:
                with borrow() as probe:
                    if probe.postgres:
                        wake = _Waker(options.store, options.poll_s)
                while not stop.is_set():
                    with borrow() as store:
                        _refuse_vanished(store, options.store)
                        took = _take_one(store, stats, options, on_taken)
                    if took:
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

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(options.concurrency)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        close()
    if errors:
        raise errors[0]
    return stats


#: lends a store for one take
_Borrow = Callable[[], AbstractContextManager[Store]]


def _store_source(
    options: WorkerOptions,
) -> tuple[Callable[[], AbstractContextManager[_Borrow]], Callable[[], None]]:
    """Where a worker thread gets its store for each take, for as long as the thread runs:
    a pooled PostgreSQL connection per take, or (SQLite) a connection of the thread's own,
    kept across its takes and closed by that thread when it ends."""
    from toolloop_cli.store.postgres import is_postgres_url

    if is_postgres_url(options.store):
        from toolloop_cli.store.pg_pool import PgStorePool

        pool = PgStorePool(options.store, options.concurrency)

        @contextmanager
        def pooled() -> Iterator[_Borrow]:
            yield pool.store

        return pooled, pool.close

    @contextmanager
    def own() -> Iterator[_Borrow]:
        # a worker runs what was submitted: a mistyped path is "no store at PATH", never a
        # new, empty store to wait on
        store = open_store(options.store, must_exist=True)

        @contextmanager
        def lend() -> Iterator[Store]:
            yield store

        try:
            yield lend
        finally:
            store.close()

    return own, lambda: None


def _refuse_vanished(store: Store, location: str) -> None:
    """A SQLite store deleted (or moved) while the worker runs: its open connection still
    reads the old file, so the worker would poll a store nobody can reach for ever."""
    if store.path is not None and not store.path.exists():
        raise UsageError(f"no store at {location}: it was removed while the worker ran")


def _take_one(
    store: Store,
    stats: WorkerStats,
    options: WorkerOptions,
    on_taken: Callable[[str, str], None] | None,
) -> bool:
    """Claim the oldest runnable operation and run it to a pause or an end; False if none."""
    with stats.lock:
        skip = set(stats.not_run)
    try:
        taken = claim(store, tenant=options.tenant, ttl_s=options.lease_ttl_s, skip=skip)
    except StoreBusy:
        # a lease row another process held locked past lock_timeout (one frozen mid-commit):
        # nothing taken this time; the next look tries again
        with stats.lock:
            stats.busy += 1
        return False
    if taken is None:
        return False
    op_id = taken.operation_id
    try:
        result = operations.resume(store, op_id, tenant=options.tenant, taken=taken)
    except OperationBusy:
        # the lease was lost mid-run (this run outlived its expiry): another worker has it
        with stats.lock:
            stats.busy += 1
        return True
    except ToolloopError as exc:
        # the operation cannot go on here (its registry is gone, its row was written around
        # toolloop, its store connection was lost): counted, left as stored for an operator
        # or another worker, and not taken again by this one
        with stats.lock:
            stats.failed += 1
            stats.not_run.add(op_id)
        if on_taken is not None:
            on_taken(op_id, f"not run: {exc}")
        return True
    if result.waiting is not None and result.steps == 1:
        # listed as runnable (no approval pending), yet it still waits on one. Once, that is
        # a race (another process ran it on to a new approval after it was listed); taken
        # again and again, the store disagrees with itself (a row written around toolloop):
        # taking it once more would change nothing, and a drain would never end
        with stats.lock:
            stats.stalled[op_id] = stalls = stats.stalled.get(op_id, 0) + 1
            if stalls >= _STALLS:
                stats.failed += 1
                stats.not_run.add(op_id)
        if stalls >= _STALLS and on_taken is not None:
            on_taken(op_id, f"not run: listed as runnable, yet {result.waiting}")
        return True
    with stats.lock:
        stats.stalled.pop(op_id, None)
    state = result.operation.state.value
    stats.count(state)
    if on_taken is not None:
        on_taken(op_id, state)
    return True


class _Waker:
    """A PostgreSQL connection that LISTENs for runnable operations.

    A connection that is lost (a server restart, a fail-over, ``pg_terminate_backend``) is
    opened again at the next wait, not the end of the worker: the wait it broke returns at
    once (a notification sent meanwhile was missed, so the worker looks), and while the
    server cannot be reached the worker looks every ``poll_s``."""

    def __init__(self, url: str, poll_s: float) -> None:
        self.url = url
        self.poll_s = poll_s
        self.conn: psycopg.Connection[Any] | None = self._listen()

    def _listen(self) -> psycopg.Connection[Any] | None:
        """A new listening connection; None when the server cannot be reached now."""
        import psycopg

        from toolloop_cli.store.pg_settings import connect_kwargs
        from toolloop_cli.store.postgres import RUNNABLE_CHANNEL

        try:
            conn = psycopg.connect(self.url, autocommit=True, **connect_kwargs(self.url))
        except psycopg.Error:
            return None
        try:
            conn.execute(f"LISTEN {RUNNABLE_CHANNEL}")
        except psycopg.Error:
            _close(conn)
            return None
        return conn

    def wait(self) -> None:
        """Return on the first notification, or after ``poll_s``; at once when the
        connection was lost (and opened again)."""
        import psycopg

        if self.conn is None:
            self.conn = self._listen()
            if self.conn is None:
                time.sleep(self.poll_s)
            return
        try:
            for _ in self.conn.notifies(timeout=self.poll_s, stop_after=1):
                break
        except psycopg.Error:
            _close(self.conn)
            self.conn = self._listen()

    def close(self) -> None:
        if self.conn is not None:
            _close(self.conn)
            self.conn = None


def _close(conn: psycopg.Connection[Any]) -> None:
    """Close ``conn`` (a lost one may fail to: it is gone anyway)."""
    import psycopg

    with suppress(psycopg.Error, OSError):
        conn.close()
