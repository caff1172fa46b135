"""Verification: recompute every hash from the stored rows and report what does not match.

``verify`` is handed the rows of a store (it never opens one) and returns a ``Report``. It
never repairs anything and never raises on tampered input: every finding is a ``Mismatch``
naming the operation, call, table, row and field. What it checks (docs/audit.md):

1. the chain: each record's hash, each link, sequence numbers without gaps, and the head
   against ``expect_head`` when given (a cut-off tail is otherwise invisible);
2. with ``rules``, each record against the previous record of the same row: a legal next
   write, or a rewrite (``history``), so superseding records appended at the tail are found;
3. every audited row against the latest record of that row (every column);
4. the hashes derived from stored inputs: arguments, results and call bindings, response
   bodies, blobs, approval digests, and (through ``request_sha``) the rebuilt requests;
5. with ``results``, each call's stored result against the conversation items that
   carried it to the model (``sent``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .chain import ChainWalk, Head
from .expand import expand_each
from .hashing import KINDS, Kind, key_text
from .history import History, Rules
from .mismatch import Mismatch
from .recompute import recompute
from .rows import RequestCheck, Row, StoreRows
from .sent import ResultsCheck, results_sent

__all__ = ["Report", "ResultsCheck", "verify"]

#: Columns kept out of audit records (each is bound by a hash column instead).
UNRECORDED = {"turns": frozenset({"response_body"})}


@dataclass
class Report:
    """What ``verify`` found: mismatches (empty when everything recomputes) and counts."""

    mismatches: list[Mismatch]
    counts: dict[str, int]
    head: Head
    expected_head: str | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches


def verify(
    rows: StoreRows,
    *,
    operation_id: str | None = None,
    expect_head: str | None = None,
    request_sha: RequestCheck | None = None,
    rules: Rules | None = None,
    results: ResultsCheck | None = None,
) -> Report:
    """Check ``rows``; with ``operation_id`` only that operation's rows (the chain is global).

    ``rules`` say how each record kind may follow the previous record of its row (the
    store's are ``toolloop_cli.store.audit_rules.HISTORY_RULES``); without them rows are
    only compared with their latest record. ``results`` rebuilds what a turn's results were
    sent as; without it they are not compared with the conversation.
    """
    chain = ChainWalk()
    history = History(rules)
    expanded: list[Mismatch] = []
    records = [0]  # how many audit-log rows are about the operation checked (or all)
    log = _counted(rows.log(), operation_id, records)
    # one pass, in seq order: each record is checked, expanded and fed to the history, then
    # let go (only the history's last record per row is kept)
    for record in expand_each(chain.each(log), expanded):
        history.feed(record)
    found = [*chain.mismatches, *expanded, *history.mismatches]
    latest: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {name: {} for name in KINDS}
    for (name, key), record in history.latest.items():  # by kind, in one pass
        latest.setdefault(name, {})[key] = record
    for kind in KINDS.values():
        if kind.name == "items":
            found += _conversation(rows.conversation, latest["items"])
        else:
            found += _snapshots(kind, rows.table(kind.table), latest[kind.name])
    counts: dict[str, int] = {}
    found += recompute(rows, request_sha, counts)
    found += results_sent(rows, history.spans, results, counts)
    found += _head(chain.head, chain.links, expect_head)
    if operation_id is not None:
        found = [m for m in found if m.operation_id == operation_id or m.table == "audit_log"]
    counts.update(_counts(rows, operation_id, records[0]))
    return Report(found, counts, chain.head, expect_head)


def _snapshots(
    kind: Kind, table: list[Row], records: dict[tuple[Any, ...], dict[str, Any]]
) -> list[Mismatch]:
    """Each row must equal the ``row`` of the latest record about it, column for column.

    Rows are matched to records by key; a key held by several rows goes to the row most like
    its record. Rows and records left over are paired by likeness, so a row whose key column
    was changed is reported under the record's operation, call and that column.
    ``records`` (the latest record of each row of this kind, by key) is used up.
    """
    found: list[Mismatch] = []
    skip = UNRECORDED.get(kind.table, frozenset())
    by_key: dict[tuple[Any, ...], list[Row]] = {}
    for row in table:
        by_key.setdefault(tuple(row.get(c) for c in kind.key), []).append(row)
    orphans: list[Row] = []
    for key, rows in by_key.items():
        record = records.pop(key, None)
        if record is None:
            orphans += rows
            continue
        matched: dict[str, Any] = record
        if len(rows) > 1:
            rows.sort(key=lambda r: _distance(r, matched))
        found += _compare(kind, rows[0], matched, skip)
        orphans += rows[1:]
    unmatched = list(records.values())
    pairs = sorted(
        (
            (_distance(row, rec), i, j)
            for i, row in enumerate(orphans)
            for j, rec in enumerate(unmatched)
        ),
    )
    used_rows: set[int] = set()
    used_records: set[int] = set()
    for distance, i, j in pairs:
        if i in used_rows or j in used_records or distance >= len(orphans[i]):
            continue
        used_rows.add(i)
        used_records.add(j)
        found += _compare(kind, orphans[i], unmatched[j], skip)
    for i, row in enumerate(orphans):
        if i not in used_rows:
            found.append(_about(kind, row, "row", "a row written through toolloop", "no record"))
    for j, record in enumerate(unmatched):
        if j not in used_records:
            snapshot = record.get("row") or {}
            found.append(_about(kind, snapshot, "row", key_text(record["key"]), "missing"))
    return found


def _distance(row: Row, record: Mapping[str, Any]) -> int:
    """How many recorded columns of ``row`` differ from ``record``."""
    snapshot = record.get("row")
    if not isinstance(snapshot, dict):
        return len(row) + 1
    return sum(1 for c, v in snapshot.items() if row.get(c, _ABSENT) != v)


def _compare(
    kind: Kind, row: Row, record: Mapping[str, Any], skip: frozenset[str]
) -> list[Mismatch]:
    snapshot = record.get("row")
    if not isinstance(snapshot, dict):
        return [_about(kind, row, "row", "a recorded row", snapshot)]
    found = []
    for column, value in snapshot.items():
        if row.get(column, _ABSENT) != value:
            found.append(_about(kind, snapshot, column, value, row.get(column, "<no column>")))
    for column, value in row.items():
        if column not in snapshot and column not in skip and value is not None:
            found.append(_about(kind, snapshot, column, None, value))
    return found


_CONVERSATION = Kind("items", "conversation", ("operation_id", "seq"))


def _conversation(
    rows: list[Row], latest: Mapping[tuple[Any, ...], dict[str, Any]]
) -> list[Mismatch]:
    """Each conversation row must hold the item hash its ``items`` record appended."""
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in latest.values():
        snapshot = record.get("row")
        if not isinstance(snapshot, dict):
            continue
        op, start, items = (
            snapshot.get("operation_id"),
            snapshot.get("start"),
            snapshot.get("items"),
        )
        if isinstance(start, int) and isinstance(items, list):
            for offset, digest in enumerate(items):
                row = {"operation_id": op, "seq": start + offset, "item_sha256": digest}
                expected[(op, start + offset)] = {
                    "key": [op, start + offset],
                    "row": row,
                }
    return _snapshots(_CONVERSATION, rows, expected)


def _head(head: Head, links: Mapping[str, int], expect: str | None) -> list[Mismatch]:
    """The chain must reach the expected head (``[SEQ:]sha256:…``); it may have grown since."""
    if expect is None:
        return []
    seq_text, digest = ("", expect) if expect.startswith("sha256:") else expect.partition(":")[::2]
    seq = links.get(digest)
    if seq is not None and (not seq_text or seq_text == str(seq)):
        return []
    return [Mismatch.of(None, None, "audit_log", "head", "chain_sha256", expect, head.text())]


def _about(
    kind: Kind, row: Mapping[str, Any], column: str, expected: object, found: object
) -> Mismatch:
    key = key_text([row.get(c) for c in kind.key])
    op, call = row.get("operation_id"), row.get("call_id")
    return Mismatch.of(
        op if isinstance(op, str) else None,
        call if isinstance(call, str) else None,
        kind.table,
        key,
        column,
        expected,
        found,
    )


def _conv(row: Mapping[str, Any], column: str, expected: object, found: object) -> Mismatch:
    op = row.get("operation_id")
    key = f"{op}/{row.get('seq')}"
    return Mismatch.of(
        op if isinstance(op, str) else None, None, "conversation", key, column, expected, found
    )


def _counted(log: Iterable[Row], operation_id: str | None, count: list[int]) -> Iterator[Row]:
    """``log``'s rows, counting in ``count[0]`` those of ``operation_id`` (all without one)."""
    for row in log:
        if operation_id is None or row.get("operation_id") == operation_id:
            count[0] += 1
        yield row


def _counts(rows: StoreRows, operation_id: str | None, records: int) -> dict[str, int]:
    def n(table: list[Row]) -> int:
        return sum(
            1 for r in table if operation_id is None or r.get("operation_id") == operation_id
        )

    return {
        "operations": n(rows.operations),
        "turns": n(rows.turns),
        "calls": n(rows.calls),
        "approvals": n(rows.approvals),
        "transitions": n(rows.transitions),
        "items": n(rows.conversation),
        "records": records,
        "blobs": len(rows.blobs),
    }


_ABSENT = object()
