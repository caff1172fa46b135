"""Reading and forging a store's audit log as an attacker with write access to the file would.

The store writes one batch record per transaction (each row's write: kind and the whole row,
or kind, key, changed columns and the hash of the whole row after them; and maybe the states
it went through). These helpers find a write, change it with its row hash recomputed, and
re-seal the record and every link after it, so a test can check what ``verify`` still finds
when a forger did the whole job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from toolloop_cli.audit.canonical import canonical_text, sha256_hex
from toolloop_cli.audit.expand import RowWrite, expand, read_write
from toolloop_cli.audit.hashing import GENESIS, chain_link, row_sha256, seal
from toolloop_cli.audit.stored import record_text
from toolloop_cli.store.audit_writer import append_sealed
from toolloop_cli.store.connection import Connection


def append_record(conn: Connection, kind: str, row: dict[str, Any]) -> None:
    """A new single-row record of ``kind`` at the tail, its hash and link computed as the
    store would: a forger's legal-looking addition (the chain is unkeyed)."""
    seq, prev = conn.execute(
        "SELECT seq, chain_sha256 FROM audit_log ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    append_sealed(conn, seal(seq + 1, prev, kind, row))


def records(conn: Connection) -> list[tuple[int, dict[str, Any]]]:
    """Every record of the log, parsed, in ``seq`` order."""
    rows = conn.execute("SELECT seq, record FROM audit_log ORDER BY seq").fetchall()
    return [(int(seq), json.loads(record_text(text))) for seq, text in rows]


def writes_of(log: list[tuple[int, dict[str, Any]]], kind: str) -> list[tuple[int, int, RowWrite]]:
    """Each ``kind`` write of ``log`` (as ``records`` reads it): its record's seq, its index
    in the record, and the write."""
    found = []
    for seq, record in log:
        for index, entry in enumerate(record["writes"]):
            write = read_write(record, entry)
            assert write is not None, entry
            if write.kind == kind:
                found.append((seq, index, write))
    return found


def row_writes(conn: Connection) -> list[dict[str, Any]]:
    """Every row write of the log with the whole row after it (as ``verify`` rebuilds it)."""
    return expand([r for _, r in records(conn)], [])


def newest_write(
    conn: Connection,
    kind: str,
    *,
    operation_id: str | None = None,
    call_id: str | None = None,
    column: str | None = None,
) -> tuple[int, int]:
    """``(seq, index)`` of the newest write of ``kind`` that matches (and sets ``column``)."""
    for seq, record in reversed(records(conn)):
        writes = record.get("writes", [])
        for index in reversed(range(len(writes))):
            write = read_write(record, writes[index])
            if write is None or write.kind != kind:
                continue
            key, changes = write.key, write.changes
            if column is not None and column not in changes:
                continue
            if operation_id is not None and key[0] != operation_id:
                continue
            if call_id is not None and key[-1] != call_id:
                continue
            return seq, index
    raise LookupError(f"no {kind} write matches")


def edit_write(conn: Connection, seq: int, index: int, **changes: Any) -> dict[str, Any]:
    """Change write ``index`` of record ``seq`` and recompute its row hash (not the record's).

    Returns the record as now stored; its ``record_sha256`` and links are left as they were.
    """
    log = records(conn)
    before = [r for s, r in log if s < seq]
    record = next(r for s, r in log if s == seq)
    entry = record["writes"][index]
    write = read_write(record, entry)
    assert write is not None, f"write {index} of record {seq} is malformed"
    via = [write.via] if write.via else []  # the states the row went through, when named
    if write.stated is None:  # a row written whole: its columns are all there is to change
        record["writes"][index] = [write.kind, {**entry[1], **changes}, *via]
    else:
        rebuilt = {
            (w["kind"], json.dumps(w["key"])): w["row"]
            for w in expand([*before, _only(record, index)], [])
        }
        base = rebuilt.get((write.kind, json.dumps(write.key)), {})
        new = {**entry[2], **changes}
        record["writes"][index] = [*entry[:2], new, row_sha256({**base, **new}), *via]
    conn.execute("UPDATE audit_log SET record = ? WHERE seq = ?", (canonical_text(record), seq))
    return record


def _only(record: dict[str, Any], index: int) -> dict[str, Any]:
    """The record with only the writes before ``index`` (the base of that write)."""
    return {**record, "writes": record["writes"][:index]}


def reseal(conn: Connection, seq: int) -> None:
    """Recompute record ``seq``'s own hash and every link from it to the end."""
    (text,) = conn.execute("SELECT record FROM audit_log WHERE seq = ?", (seq,)).fetchone()
    digest = sha256_hex(record_text(text).encode())
    conn.execute("UPDATE audit_log SET record_sha256 = ? WHERE seq = ?", (digest, seq))
    rechain(conn, seq)


def rechain(conn: Connection, from_seq: int) -> None:
    """Recompute every link from ``from_seq`` to the end."""
    row = conn.execute("SELECT chain_sha256 FROM audit_log WHERE seq = ?", (from_seq - 1,))
    found = row.fetchone()
    prev = GENESIS if found is None else found[0]
    later = conn.execute(
        "SELECT seq, record_sha256 FROM audit_log WHERE seq >= ? ORDER BY seq", (from_seq,)
    ).fetchall()
    for n, record_sha in later:
        link = chain_link(n, prev, record_sha)
        conn.execute(
            "UPDATE audit_log SET prev_sha256 = ?, chain_sha256 = ? WHERE seq = ?",
            (prev, link, n),
        )
        prev = link


def rewrite_as_row_records(
    conn: Connection, edit: Callable[[str, dict[str, Any]], dict[str, Any]]
) -> None:
    """Replace the log with one record per row write (the layout of older stores), sealed in
    order, each row passed through ``edit(kind, row)`` first."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for write in row_writes(conn):
        # that code wrote every state a row went through as a record of its own
        for state in write.get("via", []):
            rows.append((write["kind"], {**write["row"], _STATE[write["kind"]]: state}))
        rows.append((write["kind"], write["row"]))
    conn.execute("DELETE FROM audit_log")
    prev = GENESIS
    for seq, (kind, row) in enumerate(rows, start=1):
        sealed = seal(seq, prev, kind, edit(kind, dict(row)))
        append_sealed(conn, sealed)
        prev = sealed.chain_sha256


#: the state column of the kinds whose writes may name states they went through
_STATE = {"operation": "state", "call": "state", "approval": "status"}
