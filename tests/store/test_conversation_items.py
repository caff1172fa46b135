"""Conversation items are stored once by content and in order, however they repeat.

A turn's items are appended in one statement per table: a body that repeats (within one
append, or one an earlier append or another operation stored) is kept once, and every position
still names it, so the conversation reads back item for item.
"""

from __future__ import annotations

from pathlib import Path

from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.store import open_store


def test_repeated_items_are_stored_once_and_read_back_in_order(
    store_path: Path, clock: FakeClock
) -> None:
    store = open_store(store_path)
    op_id = start(store, clock)
    before = list(store.conversation(op_id))
    same = {"type": "message", "role": "user", "content": "again"}
    other = {"type": "message", "role": "user", "content": "once"}
    with store.transaction():
        store.append_items(op_id, [same, other, same])
    with store.transaction():
        store.append_items(op_id, [same])
    store.close()

    reopened = open_store(store_path)
    assert reopened.conversation(op_id) == [*before, same, other, same, same]
    with behind_its_back(store_path) as conn:
        seqs = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM conversation WHERE operation_id = ? ORDER BY seq", (op_id,)
            ).fetchall()
        ]
        (bodies,) = conn.execute(
            "SELECT count(*) FROM blobs WHERE body IN (?, ?)",
            (
                '{"content":"again","role":"user","type":"message"}',
                '{"content":"once","role":"user","type":"message"}',
            ),
        ).fetchone()
    assert seqs == list(range(len(before) + 4))
    assert bodies == 2
