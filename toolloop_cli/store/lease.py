"""Operation leases: one process at a time runs an operation.

``resume``, ``step`` and ``start`` take a lease on the operation (a row in ``leases``, written
in its own transaction, by compare-and-set on the token it replaces) before they step it and
give it back when they stop; a worker ``claim``s the first runnable operation it can. A
second process meets ``OperationBusy`` (exit 2, one line naming the holder) instead of
racing the first.

A lease whose holder died is not waited for: it is stale once it expires, or at once when
its holder ran on this host and that process is gone (or is this very process and no longer
holds it). While a lease is held, a keeper thread renews it every fifth of its TTL over a
connection of its own, whatever the runner is doing (a long handler, a slow model, a wait
for the write lock), so only a holder that is gone or frozen loses it.

A lease that expired is taken over, and then two things keep a side effect single:
- *the fence*: the holder's store commits nothing once its token is no longer in the row
  (``Store.fence``, checked in the committing transaction), so a runner that lost its lease
  starts no handler after the takeover, and stores nothing more;
- *the inherited attempt*: a lease taken over at its expiry from a holder not shown to be
  gone is ``inherited``; a call that holder left EXECUTING may still be in its handler, so
  the engine reconciles it only once that handler's timeout has passed.

Leases are operational, not business records: they are not part of the audit chain, so their
transactions (``Store.lease_transaction``) do not wait for the store's write lock on
PostgreSQL. There row locks keep claimers apart: a worker's candidates are read
``FOR UPDATE SKIP LOCKED``, so concurrent workers take different operations instead of
queueing on one, and the compare-and-set makes a lost race a clean ``OperationBusy``.

A host is named by ``TOOLLOOP_HOST_ID`` (else the machine's host name): leases held on
another host are only ever taken over at their expiry.
"""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime

from toolloop_cli.errors import OperationBusy, StoreError

from .connection import Connection
from .repo import Store

__all__ = ["DEFAULT_TTL_S", "HOST_ENV", "Lease", "OperationBusy", "acquire", "claim", "held"]

#: How long a lease lasts without renewal (seconds).
DEFAULT_TTL_S = 300.0
#: names this process's host in leases (else the host name)
HOST_ENV = "TOOLLOOP_HOST_ID"


def host_id() -> str:
    """The host this process's leases name: ``TOOLLOOP_HOST_ID``, else the host name."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


#: tokens of the leases this process holds right now
_ACTIVE: set[str] = set()


@dataclass
class Lease:
    """A held lease: renewed by its keeper until ``release`` gives it back."""

    store: Store
    operation_id: str
    token: str
    ttl_s: float
    now: Callable[[], float] = time.time
    #: taken over at the expiry of a holder not shown to be gone: it may still be running
    inherited: bool = False
    #: the keeper found the row holding another token: the lease was taken over
    lost: bool = False
    _keeper: _Keeper | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.store.fence(self.operation_id, self.token)
        self._keeper = _Keeper(self)

    def check(self) -> None:
        """Raise ``OperationBusy`` if the lease was taken over (checked between steps)."""
        if self.lost:
            raise OperationBusy(
                f"operation {self.operation_id}: this process lost its lease to another "
                "process (it ran past the lease's expiry); stopped after the last commit"
            )

    def release(self) -> None:
        """Give the lease back; a failed write leaves it to expire (this pid's is stale)."""
        try:
            self.store.release()  # held state changes commit under the lease (fenced)
        finally:
            if self._keeper is not None:
                self._keeper.stop()
            _ACTIVE.discard(self.token)
            try:
                with self.store.lease_transaction():
                    self.store.conn.execute(
                        "DELETE FROM leases WHERE operation_id = ? AND token = ?",
                        (self.operation_id, self.token),
                    )
            except StoreError:
                pass
            finally:
                self.store.fence(self.operation_id, None)


class _Keeper:
    """A thread that renews one lease every fifth of its TTL, over its own connection
    (opened at the first renewal: a short run never opens one). A renewal that finds another
    token in the row marks the lease ``lost``; one that fails (a locked or dropped
    database) is tried again at the next tick, on a new connection."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"lease {lease.operation_id}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        lease = self.lease
        conn: Connection | None = None
        try:
            while not self.stopped.wait(lease.ttl_s / 5):
                try:
                    if conn is None:
                        if lease.store.reconnect is None:
                            return  # a store that cannot open a second connection
                        conn = lease.store.reconnect()
                    cur = conn.execute(
                        "UPDATE leases SET expires_at = ? WHERE operation_id = ? AND token = ?",
                        (lease.now() + lease.ttl_s, lease.operation_id, lease.token),
                    )
                except (sqlite3.Error, StoreError):
                    _closed(conn)
                    conn = None
                    continue
                if cur.rowcount != 1:
                    lease.lost = not self.stopped.is_set()
                    return
        finally:
            _closed(conn)

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not threading.current_thread():
            self.thread.join()


def _closed(conn: Connection | None) -> None:
    """Close ``conn`` if there is one (a broken one may fail to close: it is gone anyway)."""
    if conn is not None:
        with suppress(sqlite3.Error, OSError):
            conn.close()


def acquire(
    store: Store,
    operation_id: str,
    *,
    ttl_s: float | None = None,
    now: Callable[[], float] = time.time,
) -> Lease:
    """Take the operation's lease, or raise ``OperationBusy`` naming its live holder."""
    ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
    token = _own_token()
    try:
        with store.lease_transaction():
            row = store.conn.execute(
                "SELECT token, pid, host, expires_at FROM leases WHERE operation_id = ?",
                (operation_id,),
            ).fetchone()
            moment = now()
            if row is not None and not _stale(row, moment):
                raise _busy(operation_id, row)
            if not _write(store, operation_id, token, row[0] if row else None, moment, ttl):
                raise OperationBusy(
                    f"operation {operation_id} was just taken by another process; "
                    "try again when it has finished"
                )
            inherited = row is not None and _may_still_run(row)
    except BaseException:
        _ACTIVE.discard(token)
        raise
    return Lease(store, operation_id, token, ttl, now, inherited=inherited)


def claim(
    store: Store,
    candidates: str,
    parameters: Sequence[object],
    *,
    ttl_s: float | None = None,
    now: Callable[[], float] = time.time,
    skip: Collection[str] = (),
) -> Lease | None:
    """The lease of the first operation ``candidates`` lists whose lease is free or stale.

    ``candidates`` selects (operation id, lease token, pid, host, expiry) of operations in
    the order to try them (the lease columns NULL where none is held); on PostgreSQL it is
    read ``FOR UPDATE OF`` the operation rows ``SKIP LOCKED``, so a concurrent claimer sees
    other operations. Operations in ``skip`` are passed over. None when no listed lease can
    be taken.
    """
    ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
    sql = candidates + (" FOR UPDATE OF o SKIP LOCKED" if store.postgres else "")
    token = _own_token()
    taken: str | None = None
    inherited = False
    try:
        with store.lease_transaction():
            moment = now()
            for op_id, held_by, pid, host, expires_at in store.conn.execute(sql, parameters):
                if op_id in skip:
                    continue
                row = (held_by, pid, host, expires_at)
                if held_by is not None and not _stale(row, moment):
                    continue
                if _write(store, str(op_id), token, held_by, moment, ttl):
                    taken = str(op_id)
                    inherited = held_by is not None and _may_still_run(row)
                    break
    finally:
        if taken is None:
            _ACTIVE.discard(token)
    return None if taken is None else Lease(store, taken, token, ttl, now, inherited=inherited)


def _own_token() -> str:
    """A new lease token, counted as this process's own before its row can be committed.

    Another thread of this process that reads the row must see a live holder: were the token
    added only once the write committed, a thread reading in between would find a lease of
    this pid that this process does not hold, judge it stale, and run the operation a second
    time. The caller gives the token up when no lease was written with it.
    """
    token = secrets.token_hex(8)
    _ACTIVE.add(token)
    return token


def _write(
    store: Store, operation_id: str, token: str, replaces: str | None, moment: float, ttl: float
) -> bool:
    """Write this process's lease if the row still holds ``replaces`` (None: no row); False
    when another process wrote it first."""
    cur = store.conn.execute(
        "INSERT INTO leases (operation_id, token, pid, host, acquired_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id) DO UPDATE SET"
        " token = excluded.token, pid = excluded.pid, host = excluded.host,"
        " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at"
        " WHERE leases.token = ?",
        # a token is never empty: a row that appeared since the read is never overwritten
        (operation_id, token, os.getpid(), host_id(), moment, moment + ttl, replaces or ""),
    )
    return bool(cur.rowcount == 1)


#: the largest process id a signal can be sent to (a C ``pid_t``)
_MAX_PID = 2**31 - 1
#: the latest moment a message shows (``datetime`` ends at year 9999)
_LATEST = 253_402_300_799.0


def _expiry(row: tuple[str, int, str, float]) -> float | None:
    """The lease's expiry in epoch seconds; None for a value toolloop never writes (text, a
    NULL): such a row, written around toolloop, holds nothing and counts as stale."""
    value: object = row[3]
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
        return None
    return float(value)


def _busy(operation_id: str, row: tuple[str, int, str, float]) -> OperationBusy:
    expiry = _expiry(row)
    assert expiry is not None  # a lease without one is stale, never busy
    until = datetime.fromtimestamp(min(expiry, _LATEST), UTC).isoformat(timespec="seconds")
    return OperationBusy(
        f"operation {operation_id} is being run by another process "
        f"(pid {row[1]} on {row[2]}, until {until}); try again when it has finished"
    )


@contextmanager
def held(store: Store, operation_id: str, *, ttl_s: float | None = None) -> Iterator[Lease]:
    """The operation's lease for the duration of the block."""
    lease = acquire(store, operation_id, ttl_s=ttl_s)
    try:
        yield lease
    finally:
        lease.release()


def _stale(row: tuple[str, int, str, float], moment: float) -> bool:
    """The lease may be taken: it expired (or holds no expiry toolloop wrote), or its holder
    is shown to be gone."""
    expiry = _expiry(row)
    return expiry is None or expiry <= moment or not _may_still_run(row)


def _may_still_run(row: tuple[str, int, str, float]) -> bool:
    """Whether the lease's holder may still be running (whatever its expiry says): on
    another host nothing shows it gone; on this one, a process that is gone, or this very
    process no longer holding the token (a release that failed), is."""
    token, stored, host, _ = row
    if host != host_id():
        return True
    pid: object = stored  # as read: a row written around toolloop holds anything
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= _MAX_PID:
        # no process toolloop wrote (0 and below name process groups, and past a C int
        # no process can be asked): nothing shows it gone
        return True
    if pid == os.getpid():
        return token in _ACTIVE
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
