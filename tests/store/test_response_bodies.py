"""``Store.response_bodies``: each turn's answer bytes as received, or a refusal by name.

The traces read them (``export-otel``). A body rewritten as text is read as its UTF-8 bytes,
as ``verify`` hashes it (and reports it when they differ from the answer's hash); a number
or any other value toolloop never writes is a ``TamperedStore``, not a ``TypeError``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.clock import FakeClock
from support.stores import behind_its_back, start

from toolloop_cli.errors import TamperedStore
from toolloop_cli.store import open_store


@pytest.fixture
def paused(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "store.db"
    store = open_store(path)
    op = start(store, FakeClock())
    store.close()
    return path, op


def test_each_turns_answer_is_read_as_received(paused: tuple[Path, str]) -> None:
    path, op = paused
    store = open_store(path)
    bodies = store.response_bodies(op)
    assert sorted(bodies) == [t.idx for t in store.turns(op)]
    assert all(b.startswith(b"{") for b in bodies.values())


def test_a_body_rewritten_as_text_is_read_as_its_bytes(paused: tuple[Path, str]) -> None:
    path, op = paused
    with behind_its_back(path) as conn:
        conn.execute("UPDATE turns SET response_body = '{}' WHERE idx = 0")
    assert open_store(path).response_bodies(op)[0] == b"{}"


def test_a_body_that_is_a_number_is_refused_by_name(paused: tuple[Path, str]) -> None:
    path, op = paused
    with behind_its_back(path) as conn:
        conn.execute("UPDATE turns SET response_body = 7 WHERE idx = 1")
    with pytest.raises(
        TamperedStore,
        match=r"turn 1 of operation .*: turns.response_body holds 7, which toolloop never",
    ):
        open_store(path).response_bodies(op)
