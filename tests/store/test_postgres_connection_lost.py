"""A PostgreSQL store whose connection is lost in the middle of a command (a server
restart, a fail-over, an administrator's ``pg_terminate_backend``): the command stops with
one line saying so, exit 2, no traceback; the transaction it was in wrote nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.store import open_store

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))


@contextmanager
def _holding(url: str, lock: str) -> Iterator[psycopg.Connection]:
    """Another session that holds ``lock`` (a statement) in an open transaction."""
    with psycopg.connect(url) as holder:
        holder.execute(lock)
        yield holder
        holder.rollback()


def _waiting_backend(admin: psycopg.Connection, holder: psycopg.Connection) -> int:
    """The pid of the session that waits for ``holder``'s lock (within 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> %s",
            (holder.info.backend_pid,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.05)
    raise AssertionError("no session came to wait for the lock")


def _cut_off(url: str, lock: str, *command: str) -> str:
    """Run ``toolloop COMMAND --store URL`` until it waits on ``lock``, which another session
    holds, then terminate its backend: the one line it printed (exit 2, no traceback)."""
    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as admin, _holding(url, lock) as holder:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolloop_cli", *command, "--store", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            victim = _waiting_backend(admin, holder)
            admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
            _, err = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: lost the connection to store postgresql://"), lines
    return lines[0]


@pytest.mark.parametrize(
    "lock",
    [
        "SELECT pg_advisory_lock(x'746F6F6C6F6F70'::bigint)",  # at BEGIN: the write lock
        "LOCK TABLE audit_log IN EXCLUSIVE MODE",  # at the commit: the rows written
    ],
)
def test_a_connection_terminated_mid_transaction_is_one_line_and_nothing_is_written(
    postgres_url: str, lock: str
) -> None:
    _cut_off(postgres_url, lock, *RUN)
    with psycopg.connect(postgres_url, autocommit=True) as check:
        assert check.execute("SELECT count(*) FROM operations").fetchone() == (0,)
        assert check.execute("SELECT count(*) FROM audit_log").fetchone() == (0,)


def test_a_read_cut_off_by_a_lost_connection_says_nothing_was_written(postgres_url: str) -> None:
    """``toolloop runs`` waits on a table another session locked, and its backend is
    terminated: the one line says it was reading, not that a change was rolled back."""
    line = _cut_off(postgres_url, "LOCK TABLE operations IN ACCESS EXCLUSIVE MODE", "runs")
    assert line.endswith("; it was reading, and nothing was written"), line


@pytest.mark.parametrize(
    ("sql", "opened", "said"),
    [
        ("COMMIT", "write", "whether the change it was committing was stored is unknown"),
        ("INSERT INTO calls VALUES (?)", "write", "the change in progress was not stored"),
        ("SELECT 1 FROM leases", "write", "the change in progress was not stored"),
        ("SELECT * FROM operations", None, "it was reading, and nothing was written"),
        ("SELECT * FROM audit_log", "read", "it was reading, and nothing was written"),
        ("UPDATE leases SET expires_at = ?", None, "whether the write it was making was stored"),
    ],
)
def test_a_lost_connection_says_what_became_of_the_statement(
    sql: str, opened: str | None, said: str
) -> None:
    """A write outside a transaction (a lease renewal) may have been applied before the
    connection went: only a transaction the server rolled back is said to be unstored."""
    from toolloop_cli.store.postgres import _outcome

    assert _outcome(sql, opened).startswith(said)
