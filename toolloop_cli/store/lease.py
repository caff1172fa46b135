"""Operation leases: one process at a time runs an operation.

``resume``, ``step`` and ``start`` take a lease on the operation (a row in ``leases``, written
in its own transaction, by compare-and-set on the token it replaces) before they step it and
give it back when they stop; a worker ``claim``s the first runnable operation it can. A
second process meets ``OperationBusy`` (exit 2, one line naming the holder) instead of
racing the first. The lease is belt and braces: every state change is already a
compare-and-set on the stored state, so two runners could never both commit the same
intent; the lease makes the loser fail fast and say why.

A lease whose holder died is not waited for: it is stale once it expires, or at once when
its holder ran on this host and that process is gone (or is this very process and no longer
holds it). A holder renews its lease as it steps (``renew_if_due``), so a long run keeps it.
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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from toolloop_cli.errors import OperationBusy, StoreError

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
    """A held lease; ``release`` gives it back, ``renew_if_due`` keeps it alive."""

    store: Store
    operation_id: str
    token: str
    ttl_s: float
    now: Callable[[], float] = time.time
    renewed_at: float = field(default_factory=time.monotonic)

    def renew_if_due(self) -> None:
        """Push the expiry out once a fifth of the TTL has passed; fail if it was taken."""
        if time.monotonic() - self.renewed_at < self.ttl_s / 5:
            return
        with self.store.lease_transaction():
            cur = self.store.conn.execute(
                "UPDATE leases SET expires_at = ? WHERE operation_id = ? AND token = ?",
                (self.now() + self.ttl_s, self.operation_id, self.token),
            )
            if cur.rowcount != 1:
                raise OperationBusy(
                    f"operation {self.operation_id}: this process lost its lease to another "
                    "process (it ran past the lease's expiry); stopped after the last commit"
                )
        self.renewed_at = time.monotonic()

    def release(self) -> None:
        """Give the lease back; a failed write leaves it to expire (this pid's is stale)."""
        _ACTIVE.discard(self.token)
        try:
            with self.store.lease_transaction():
                self.store.conn.execute(
                    "DELETE FROM leases WHERE operation_id = ? AND token = ?",
                    (self.operation_id, self.token),
                )
        except StoreError:
            pass


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
    except BaseException:
        _ACTIVE.discard(token)
        raise
    return Lease(store, operation_id, token, ttl, now)


def claim(
    store: Store,
    candidates: str,
    parameters: Sequence[object],
    *,
    ttl_s: float | None = None,
    now: Callable[[], float] = time.time,
) -> Lease | None:
    """The lease of the first operation ``candidates`` lists whose lease is free or stale.

    ``candidates`` selects (operation id, lease token, pid, host, expiry) of operations in
    the order to try them (the lease columns NULL where none is held); on PostgreSQL it is
    read ``FOR UPDATE OF`` the operation rows ``SKIP LOCKED``, so a concurrent claimer sees
    other operations. None when no listed lease can be taken.
    """
    ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
    sql = candidates + (" FOR UPDATE OF o SKIP LOCKED" if store.postgres else "")
    token = _own_token()
    taken: str | None = None
    try:
        with store.lease_transaction():
            moment = now()
            for op_id, held_by, pid, host, expires_at in store.conn.execute(sql, parameters):
                if held_by is not None and not _stale((held_by, pid, host, expires_at), moment):
                    continue
                if _write(store, str(op_id), token, held_by, moment, ttl):
                    taken = str(op_id)
                    break
    finally:
        if taken is None:
            _ACTIVE.discard(token)
    return None if taken is None else Lease(store, taken, token, ttl, now)


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


def _busy(operation_id: str, row: tuple[str, int, str, float]) -> OperationBusy:
    until = datetime.fromtimestamp(float(row[3]), UTC).isoformat(timespec="seconds")
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
    token, pid, host, expires_at = row
    if float(expires_at) <= moment:
        return True
    if host != host_id():
        return False  # another machine: only the expiry can tell
    if pid == os.getpid():
        return token not in _ACTIVE  # left by this process (a release that failed)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
