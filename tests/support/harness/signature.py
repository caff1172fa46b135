"""A store's signature: what the store says, without what differs between two equal runs.

Two runs of one scenario differ only in random ids (operation, approval, and the keys made
from them), wall-clock durations and the hashes over those. The signature dumps the
business tables in row order, names each id by its first appearance, zeroes durations and
leaves out those hashes (``verify`` checks them), the audit chain (hashes over the rest)
and leases (operational). A crashed store is legal when its signature is one an
uninterrupted run committed on the same backend.

SQLite rows come in ``rowid`` (insertion) order; PostgreSQL has none, so its rows come in
key order with the random ids out of the keys (and without the transitions' serial ``id``,
whose sequence a rolled-back transaction also advances).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.harness.stores import is_postgres
from support.stores import behind_its_back
from toolloop_cli.store.repo import Store

TABLES = ("operations", "turns", "calls", "approvals", "transitions", "conversation", "blobs")
SKIP_COLUMNS = {"calls": {"result_sha256", "call_binding_sha256"}}
#: a PostgreSQL table's order: its rows' insertion order for one operation's run
PG_ORDER = {
    "operations": "operation_id",
    "turns": "operation_id, idx",
    "calls": "operation_id, turn_idx, seq",
    "approvals": "operation_id, response_id, call_id",
    "transitions": "id",
    "conversation": "operation_id, seq",
    "blobs": "sha256",
}
PG_SKIP = {"transitions": {"id"}}
#: SQLite tables kept in their key's order (``WITHOUT ROWID``): they have no insertion order
KEYED = frozenset({"conversation", "blobs"})
_IDS = re.compile(r"\b(op|apr|idk)_[0-9a-f]{16,}\b")
_DURATION = re.compile(r'("duration_ms": ?)[0-9.eE+-]+')


def dump(path: str | Path) -> str:
    """The normalised text of the store's business tables."""
    pg = is_postgres(path)
    with behind_its_back(path, read_only=True) as conn:
        parts = []
        for table in TABLES:
            order = PG_ORDER[table] if pg or table in KEYED else "rowid"
            skip = SKIP_COLUMNS.get(table, set()) | (PG_SKIP.get(table, set()) if pg else set())
            cur = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            names = [d[0] for d in cur.description]
            keep = [i for i, n in enumerate(names) if n not in skip]
            rows = [[_plain(row[i]) for i in keep] for row in cur]
            parts.append(json.dumps([table, [names[i] for i in keep], rows], sort_keys=True))
    text = "\n".join(parts)
    seen: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"{match.group(1)}_#{len(seen)}")

    return _IDS.sub(name, text)


def signature(path: str | Path) -> str:
    """sha256 of ``dump(path)``."""
    return hashlib.sha256(dump(path).encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return _DURATION.sub(r"\g<1>0", value)
    return value


@contextmanager
def recording_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Collect the signature of the store after every commit made in this process (each
    ``COMMIT`` the store issues: a transaction's own, or the one ending a held series)."""
    seen: list[str] = []
    original = Store._commit

    def commit(self: Store) -> None:
        original(self)
        seen.append(signature(self.path if self.path is not None else self.location))

    with monkeypatch.context() as patch:
        patch.setattr(Store, "_commit", commit)
        yield seen
