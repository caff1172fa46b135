"""``Store.list_operations``: newest first, at most ``limit``, or every one with ``None``
(``export-otel`` with no ids). PostgreSQL has no ``LIMIT -1``: "no limit" was an error there."""

from __future__ import annotations

from pathlib import Path

from support.clock import FakeClock
from support.stores import start

from toolloop_cli.store import open_store


def test_every_operation_is_listed_newest_first_without_a_limit(store_path: Path) -> None:
    store = open_store(store_path)
    clock = FakeClock()
    first, second, third = (start(store, clock) for _ in range(3))
    every = [op.operation_id for op in store.list_operations(None, None)]
    assert every == [third, second, first]
    assert [op.operation_id for op in store.list_operations(None, 2)] == [third, second]
    store.close()
