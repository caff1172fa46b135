"""Where an operation's model turns come from: ``Source``, a union on ``kind``, in the store.

The store keeps the kind in ``transport`` and the rest in ``source_json``, byte for byte as
it always has (both columns are fixed and audited, so any other shape would read as a rewrite
of every stored operation):

- each kind a command writes is stored exactly as before, and reads back as its own type;
- reading a row back and writing it again gives the same row;
- a stored source toolloop never writes (an unknown kind or key, a null, a coerced type) is
  a tampered store: one clear error naming the operation, and ``verify`` reports it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.stores import behind_its_back

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.sources import LiveSource, ReplaySource, TranscriptSource
from toolloop_cli.errors import TamperedStore
from toolloop_cli.replay.run import ReplayOptions, replay
from toolloop_cli.service import operations
from toolloop_cli.store import Store, open_store
from toolloop_cli.store.rows import OP_COLUMNS, dump, op_from_row, op_row
from toolloop_cli.wiring.pricing import load_prices, price_for


def _price(model: str) -> dict[str, Any]:
    price = price_for(model, load_prices(None))
    assert price is not None
    return {"model": model, **price}


def _rows(path: Path) -> dict[str, tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        query = "SELECT operation_id, transport, source_json FROM operations"
        return {op: (kind, text) for op, kind, text in conn.execute(query)}
    finally:
        conn.close()


def _every_kind(store: Store, tmp_path: Path) -> dict[str, str]:
    """One operation of each kind a command writes, by a name for it."""
    cassette = REFUND_OPENAI.resolve()
    ids: dict[str, str] = {}
    run = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    ids["transcript"] = operations.start(store, run).operation.operation_id
    run.record = tmp_path / "rec.yaml"
    ids["recorded transcript"] = operations.start(store, run).operation.operation_id
    scripted = operations.RunOptions(
        task="t",
        registry=REGISTRY,
        provider="scripted",
        model="gpt-4o",
        guard_overrides={"max_cost_usd": 1.0},
    )
    answer = ScriptedTransport([{"text": "ok"}])
    ids["scripted"] = operations.start(store, scripted, transport=answer).operation.operation_id
    (recorded,) = replay(store, ReplayOptions(cassette=cassette)).operations
    ids["replay recorded"] = recorded.operation_id
    options = ReplayOptions(
        cassette=cassette, registry=REGISTRY, approve_as="ops-lead", strict_requests=True
    )
    (live,) = replay(store, options).operations
    ids["replay live"] = live.operation_id
    return ids


def test_each_kind_is_stored_as_it_always_was_and_reads_back_as_its_type(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    ids = _every_kind(store, tmp_path)
    cassette = str(REFUND_OPENAI.resolve())
    recorded_model = store.get_operation(ids["transcript"]).model
    replayed: dict[str, Any] = {
        "replay": cassette,
        "conversation": 0,
        "interactions": [0, 1, 2, 3],
    }
    expected: dict[str, tuple[str, dict[str, Any], type]] = {
        "transcript": (
            "transcript",
            {"transcript": cassette, "price": _price(recorded_model)},
            TranscriptSource,
        ),
        "recorded transcript": (
            "transcript",
            {
                "transcript": cassette,
                "record": str(tmp_path / "rec.yaml"),
                "price": _price(recorded_model),
            },
            TranscriptSource,
        ),
        "scripted": (
            "scripted",
            {"base_url": "scripted://model", "price": _price("gpt-4o")},
            LiveSource,
        ),
        "replay recorded": (
            "replay",
            {**replayed, "results": "recorded", "tools": "recorded", "strict_requests": False},
            ReplaySource,
        ),
        "replay live": (
            "replay",
            {
                **replayed,
                "results": "live",
                "tools": "registry",
                "strict_requests": True,
                "data_dir": str(store.data_dir / "replay-data" / ids["replay live"]),
            },
            ReplaySource,
        ),
    }
    rows = _rows(tmp_path / "store.db")
    for name, (kind, source, model) in expected.items():
        op_id = ids[name]
        assert rows[op_id] == (kind, dump(source)), name  # the exact text of earlier releases
        op = store.get_operation(op_id)
        assert type(op.source) is model and op.transport == kind, name


def test_a_row_read_back_is_written_back_unchanged(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    _every_kind(store, tmp_path)
    conn = sqlite3.connect(tmp_path / "store.db")
    rows = list(conn.execute(f"SELECT {OP_COLUMNS} FROM operations"))
    conn.close()
    assert len(rows) == 5
    for row in rows:
        assert op_row(op_from_row(row)) == tuple(row)


TAMPERED: dict[str, tuple[str | None, Any]] = {
    "unknown kind": ("carrier-pigeon", None),
    "unknown key": (None, {"extra": 1}),
    "a kind key": (None, {"kind": "transcript"}),
    "a null": (None, {"record": None}),
    "a number as text": (None, {"transcript": 7}),
    "not an object": (None, ["a", "list"]),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_source_toolloop_never_writes_is_a_tampered_store(
    cli: Invoke, store_path: Path, case: str
) -> None:
    run = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    op_id = json_out(cli(*run, "--json"))["operation_id"]
    kind, change = TAMPERED[case]
    with behind_its_back(store_path) as conn:
        (text,) = conn.execute("SELECT source_json FROM operations").fetchone()
        source = {**json.loads(text), **change} if isinstance(change, dict) else change
        if kind is not None:
            conn.execute("UPDATE operations SET transport = ?", (kind,))
        else:
            conn.execute("UPDATE operations SET source_json = ?", (json.dumps(source),))
    store = open_store(store_path)
    with pytest.raises(TamperedStore, match=f"operation {op_id}: "):
        store.get_operation(op_id)
    store.close()
    shown = cli("show", op_id)
    assert shown.exit_code == 2
    assert len(shown.stderr.strip().splitlines()) == 1 and op_id in shown.stderr
    verified = json_out(cli("verify", "--json"))
    column = "transport" if kind is not None else "source_json"
    assert [m["field"] for m in verified["mismatches"]] == [column]
