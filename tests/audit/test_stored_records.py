"""A SQLite store keeps each audit record deflated; the chain still binds the record's text.

These tests hold that records are written as BLOBs, deflated against the record dictionary,
whose inflated text is what ``record_sha256`` hashes; that a log mixing text records and
records deflated without a dictionary (stores written before) with new ones verifies; and
that a stored record changed in any way the format allows (its bytes, its text forged and
deflated again, a BLOB that inflates past the limit, one that is no deflate stream, one
naming a dictionary toolloop does not know) is reported under its seq, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import pytest
from support.clock import FakeClock
from support.stores import behind_its_back, demo_store, tampered_copy
from typer.testing import CliRunner

from toolloop_cli.audit import stored
from toolloop_cli.audit.record_dictionary import DICTIONARIES, RECORD_DICTIONARY_V1
from toolloop_cli.audit.stored import MAX_RECORD_BYTES, pack_record, record_text
from toolloop_cli.cli import app
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stored") / "store.db"
    demo_store(path, FakeClock())
    return path


def verified(path: Path) -> list[tuple[str, str | None, str]]:
    """The findings of ``verify_store`` as (table, key, field)."""
    store = open_store(path)
    try:
        return [(m.table, m.key, m.field) for m in verify_store(store).mismatches]
    finally:
        store.close()


def test_each_record_is_kept_deflated_and_hashed_over_its_text(demo: Path) -> None:
    with behind_its_back(demo, read_only=True) as conn:
        rows = conn.execute("SELECT record, record_sha256 FROM audit_log").fetchall()
    assert rows
    for value, digest in rows:
        assert isinstance(value, bytes)
        # the zlib header names the dictionary: FDICT set, then its Adler-32 (RFC 1950)
        assert value[1] & 0x20
        assert int.from_bytes(value[2:6], "big") == zlib.adler32(RECORD_DICTIONARY_V1)
        inflater = zlib.decompressobj(zdict=RECORD_DICTIONARY_V1)
        text = inflater.decompress(value).decode()
        assert inflater.eof
        assert record_text(value) == text
        assert json.loads(text)["v"] >= 4
        assert digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        # the dictionary pays: smaller than the same text deflated without it
        assert len(value) < len(zlib.compress(text.encode(), 6))
    assert verified(demo) == []


def test_the_record_dictionary_never_changes() -> None:
    """Records deflated against it name it by its Adler-32: changed bytes would leave every
    such record unreadable (a new dictionary is added beside it instead)."""
    assert zlib.adler32(RECORD_DICTIONARY_V1) == 1148212518
    assert hashlib.sha256(RECORD_DICTIONARY_V1).hexdigest() == (
        "1e8eaf3c2dcedd444739dadba41770d39b18f6704f48d17fc8114e1fe7a76a26"
    )
    assert DICTIONARIES[1148212518] is RECORD_DICTIONARY_V1


def test_a_log_of_records_kept_every_way_verifies(demo: Path, tmp_path: Path) -> None:
    """Text, deflated without a dictionary (stores written before), deflated with one."""
    path = tampered_copy(demo, tmp_path / "store.db", None)
    with behind_its_back(path) as conn:
        rows = conn.execute("SELECT seq, record FROM audit_log").fetchall()
        for seq, value in rows:
            text = str(record_text(value))
            kept_as = [value, zlib.compress(text.encode(), 1), text][seq % 3]
            conn.execute("UPDATE audit_log SET record = ? WHERE seq = ?", (kept_as, seq))
        kept = {
            "text" if isinstance(value, str) else f"dictionary {bool(value[1] & 0x20)}"
            for (value,) in conn.execute("SELECT record FROM audit_log")
        }
    assert kept == {"text", "dictionary False", "dictionary True"}
    assert verified(path) == []


def test_a_record_naming_an_unknown_dictionary_is_reported(demo: Path, tmp_path: Path) -> None:
    path = tampered_copy(demo, tmp_path / "store.db", None)
    with behind_its_back(path) as conn:
        (value,) = conn.execute("SELECT record FROM audit_log WHERE seq = 5").fetchone()
        other = zlib.compressobj(zdict=b'"some other dictionary"')
        text = record_text(value)
        forged = other.compress(text.encode()) + other.flush()
        assert record_text(forged) == forged  # handed back unread
        conn.execute("UPDATE audit_log SET record = ? WHERE seq = 5", (forged,))
    assert ("audit_log", "seq 5", "record") in verified(path)


def test_a_log_of_text_and_deflated_records_verifies(demo: Path, tmp_path: Path) -> None:
    """Stores written before kept records as text; new records are appended deflated."""
    path = tampered_copy(
        demo,
        tmp_path / "store.db",
        "UPDATE audit_log SET record = inflate(record) WHERE seq % 2 = 0",
    )
    with behind_its_back(path, read_only=True) as conn:
        kinds = {kind for (kind,) in conn.execute("SELECT DISTINCT typeof(record) FROM audit_log")}
    assert kinds == {"text", "blob"}
    assert verified(path) == []
    result = runner.invoke(app, ["verify", "--store", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "tamper",
    [
        # a byte of the deflated record flipped: it no longer inflates
        "UPDATE audit_log SET record = substr(record, 1, 8) || x'00' || substr(record, 10)"
        " WHERE seq = 7",
        # the text forged and deflated again (its hash left as it was)
        "UPDATE audit_log SET record = deflate(replace(inflate(record), '\"v\":4', '\"v\":5'))"
        " WHERE seq = 7",
        # a valid deflate stream of something else
        "UPDATE audit_log SET record = deflate('{}') WHERE seq = 7",
        # bytes that are no deflate stream at all, and the record's text as plain text plus one
        "UPDATE audit_log SET record = x'0102030405' WHERE seq = 7",
        "UPDATE audit_log SET record = inflate(record) || ' ' WHERE seq = 7",
    ],
)
def test_a_changed_record_is_reported_under_its_seq(
    demo: Path, tmp_path: Path, tamper: str
) -> None:
    path = tampered_copy(demo, tmp_path / "store.db", tamper)
    found = verified(path)
    assert ("audit_log", "seq 7", "record") in found, found
    result = runner.invoke(app, ["verify", "--store", str(path), "--json"])
    assert result.exit_code == 20, result.output
    assert "Traceback" not in result.output


def test_a_record_that_would_inflate_past_the_limit_is_not_inflated(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deflate bomb in the log is a changed record: inflation stops at the limit."""
    monkeypatch.setattr(stored, "MAX_RECORD_BYTES", 4096)
    bomb = zlib.compress(b"{" + b" " * 10_000_000 + b"}", 9)
    assert record_text(bomb) == bomb  # handed back as stored, unread
    path = tampered_copy(demo, tmp_path / "store.db", None)
    with behind_its_back(path) as conn:
        conn.execute("UPDATE audit_log SET record = ? WHERE seq = 3", (bomb,))
    assert ("audit_log", "seq 3", "record") in verified(path)


def test_records_past_the_limit_are_kept_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored, "MAX_RECORD_BYTES", 16)
    assert pack_record('{"a": "short"}') != '{"a": "short"}'
    assert pack_record('{"a": "longer than sixteen bytes"}') == '{"a": "longer than sixteen bytes"}'
    assert MAX_RECORD_BYTES == 64 * 1024 * 1024


def test_text_that_is_not_a_record_is_handed_back_unchanged() -> None:
    assert record_text("plain") == "plain"
    assert record_text(None) is None
    assert record_text(zlib.compress(b"\xc3\xff")) == zlib.compress(b"\xc3\xff")  # not UTF-8
    trailing = zlib.compress(b"{}") + b"junk"
    assert record_text(trailing) == trailing
    # a header naming the dictionary, cut short or followed by nothing that inflates
    named = b"x\xbb" + zlib.adler32(RECORD_DICTIONARY_V1).to_bytes(4, "big")
    for cut in (b"x\xbb", named[:4], named, named + b"\x00\x00"):
        assert record_text(cut) == cut
