"""Operation leases: one process at a time runs an operation.

``resume``, ``step`` and ``start`` take a lease on the operation (a row in ``leases``, written
in its own ``BEGIN IMMEDIATE`` transaction) before they step it and give it back when they
stop. A second process meets ``OperationBusy`` (exit 2, one line naming the holder) instead
of racing the first. The lease is belt and braces: every state change is already a
compare-and-set on the stored state, so two runners could never both commit the same
intent; the lease makes the loser fail fast and say why.

A lease whose holder died is not waited for: it is stale once it expires, or at once when
its holder ran on this host and that process is gone (or is this very process and no longer
holds it). A holder renews its lease as it steps (``renew_if_due``), so a long run keeps it.
Leases are operational, not business records: they are not part of the audit chain.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from toolloop_cli.errors import OperationBusy, StoreError

from .repo import Store

__all__ = ["DEFAULT_TTL_S", "Lease", "OperationBusy", "acquire", "held"]

#: How long a lease lasts without renewal (seconds).
DEFAULT_TTL_S = 300.0

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
        with self.store.transaction():
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
            with self.store.transaction():
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
    token = secrets.token_hex(8)
    with store.transaction():
        row = store.conn.execute(
            "SELECT token, pid, host, expires_at FROM leases WHERE operation_id = ?",
            (operation_id,),
        ).fetchone()
        moment = now()
        if row is not None and not _stale(row, moment):
            until = datetime.fromtimestamp(float(row[3]), UTC).isoformat(timespec="seconds")
            raise OperationBusy(
                f"operation {operation_id} is being run by another process "
                f"(pid {row[1]} on {row[2]}, until {until}); try again when it has finished"
            )
        store.conn.execute(
            "INSERT INTO leases (operation_id, token, pid, host, acquired_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id) DO UPDATE SET"
            " token = excluded.token, pid = excluded.pid, host = excluded.host,"
            " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
            (operation_id, token, os.getpid(), socket.gethostname(), moment, moment + ttl),
        )
    _ACTIVE.add(token)
    return Lease(store, operation_id, token, ttl, now)


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
    if host != socket.gethostname():
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
