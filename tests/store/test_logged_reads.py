"""A row and its last audit record read outside a transaction are two statements: another
process may commit a step of the operation between them. That is not a write around
toolloop, and ``get_logged_operation`` does not call it one (it reads both again under the
writers' lock); a row that still differs there is refused as before."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from support.stores import submitted_refund

from toolloop_cli.engine.records import OperationRecord
from toolloop_cli.errors import TamperedStore
from toolloop_cli.store import Store, open_store


def _a_step_commits_between_the_two_reads(
    reader: Store, writer: Store, op_id: str, monkeypatch: pytest.MonkeyPatch
) -> list[OperationRecord]:
    """The first time ``reader`` compares a row with the log, ``writer`` (another connection,
    as another process) first commits a toolloop write of that operation's row."""
    original = reader._check_logged
    stepped: list[OperationRecord] = []

    def then_compare(kind: str, key: list[Any], row: Any, name: str) -> None:
        if not stepped:
            op = writer.get_operation(op_id)
            new = op.model_copy(update={"updated_at": "2099-01-01T00:00:00.000000Z"})
            with writer.transaction():
                writer.save_operation(new, op.state)
            stepped.append(new)
        original(kind, key, row, name)

    monkeypatch.setattr(reader, "_check_logged", then_compare)
    return stepped


def test_a_step_committed_between_the_row_and_its_record_is_not_a_tamper(
    store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = submitted_refund(store_location)
    reader, writer = open_store(store_location), open_store(store_location)
    try:
        stepped = _a_step_commits_between_the_two_reads(reader, writer, op_id, monkeypatch)
        op = reader.get_logged_operation(op_id)
        assert stepped and op.updated_at == stepped[0].updated_at  # the row as it now is
    finally:
        reader.close()
        writer.close()


def test_a_row_written_around_toolloop_is_still_refused(tmp_path: Any) -> None:
    location = str(tmp_path / "store.db")
    op_id = submitted_refund(location)
    conn = sqlite3.connect(location)
    conn.execute("UPDATE operations SET task = 'refund all' WHERE operation_id = ?", (op_id,))
    conn.commit()
    conn.close()
    store = open_store(location)
    try:
        with pytest.raises(TamperedStore, match="not as the audit log last recorded"):
            store.get_logged_operation(op_id)
        assert not store.conn.in_transaction
    finally:
        store.close()
