"""``toolloop store copy``: a store moved between SQLite and PostgreSQL keeps every row and
its audit chain (both verify, same head), in either direction, and stays usable."""

from __future__ import annotations

from pathlib import Path

from support.cli import json_out
from support.clock import FakeClock
from support.stores import approval_of, behind_its_back, demo_store
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store


def toolloop(*args: str) -> object:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_a_store_copied_to_postgresql_and_back_verifies_with_the_same_head(
    tmp_path: Path, postgres_url: str
) -> None:
    clock = FakeClock()
    source = tmp_path / "source.db"
    ops = demo_store(source, clock)
    head = verify_store(open_store(source, read_only=True)).head

    there = toolloop("store", "copy", str(source), postgres_url, "--json")
    assert there.exit_code == 0, there.stdout  # type: ignore[attr-defined]
    out = json_out(there)
    assert out["verified"] is True
    assert out["head"] == {"source": head.text(), "target": head.text()}
    assert out["copied"]["operations"] == 4
    assert out["copied"]["audit_log"] == head.seq

    # SQLite keeps records deflated; PostgreSQL holds their text (the bytes the chain hashes)
    with behind_its_back(source, read_only=True) as conn:
        kept = [kind for (kind,) in conn.execute("SELECT typeof(record) FROM audit_log")]
    with behind_its_back(postgres_url) as conn:
        texts = [text for (text,) in conn.execute("SELECT record FROM audit_log")]
    assert set(kept) == {"blob"} and all(isinstance(t, str) and t[0] == "{" for t in texts)

    back = tmp_path / "back.db"
    again = toolloop("store", "copy", postgres_url, str(back), "--json")
    assert again.exit_code == 0, again.stdout  # type: ignore[attr-defined]
    assert json_out(again)["head"]["target"] == head.text()

    # the copy is a working store: the paused refund is approved and finished on PostgreSQL
    pg = open_store(postgres_url)
    approvals.approve(pg, approval_of(pg, ops["paused"]), "ops-lead", clock=clock)
    done = operations.resume(pg, ops["paused"], clock=clock)
    assert done.target.value == "COMPLETED"
    after = verify_store(pg)
    assert after.ok, after.mismatches
    assert after.head.seq > head.seq  # the chain went on from the copied head


def test_a_copy_into_a_store_that_holds_operations_is_refused_and_changes_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    clock = FakeClock()
    demo_store(tmp_path / "a.db", clock)
    demo_store(tmp_path / "b.db", clock)
    assert toolloop("store", "copy", str(tmp_path / "a.db"), postgres_url).exit_code == 0  # type: ignore[attr-defined]
    before = verify_store(open_store(postgres_url)).head

    refused = toolloop("store", "copy", str(tmp_path / "b.db"), postgres_url)
    assert refused.exit_code == 2  # type: ignore[attr-defined]
    assert "already holds operations rows" in refused.stderr  # type: ignore[attr-defined]
    assert verify_store(open_store(postgres_url)).head == before


def test_a_source_that_does_not_verify_is_not_copied(tmp_path: Path, postgres_url: str) -> None:
    source = tmp_path / "source.db"
    ops = demo_store(source, FakeClock())
    store = open_store(source)
    store.conn.execute(
        "UPDATE operations SET final_text = 'refund sent twice' WHERE operation_id = ?",
        (ops["completed"],),
    )
    refused = toolloop("store", "copy", str(source), postgres_url)
    assert refused.exit_code == 2  # type: ignore[attr-defined]
    assert "does not verify" in refused.stderr  # type: ignore[attr-defined]
    target = open_store(postgres_url)
    assert target.conn.execute("SELECT count(*) FROM operations").fetchone() == (0,)
