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
from .hashing import KINDS
from .history import History, Rules
from .mismatch import Mismatch
from .recompute import recompute
from .rows import RequestCheck, Row, StoreRows
from .sent import ResultsCheck, results_sent
from .snapshots import CONVERSATION, Leftovers, conversation_records, match, pair

__all__ = [
    "Leftovers",
    "Report",
    "ResultsCheck",
    "check_part",
    "counted",
    "head_mismatches",
    "pair_leftovers",
    "row_counts",
    "verify",
]


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
    records = [0]  # how many audit-log rows are about the operation checked (or all)
    log = counted(rows.log(), operation_id, records)
    counts: dict[str, int] = {}
    found = check_part(
        rows, chain.each(log), rules=rules, request_sha=request_sha, results=results, counts=counts
    )
    found = [*chain.mismatches, *found, *head_mismatches(chain.head, chain.links, expect_head)]
    if operation_id is not None:
        found = [m for m in found if m.operation_id == operation_id or m.table == "audit_log"]
    counts.update(row_counts(rows, operation_id), records=records[0], blobs=len(rows.blobs))
    return Report(found, counts, chain.head, expect_head)


def check_part(
    rows: StoreRows,
    records: Iterable[dict[str, Any]],
    *,
    rules: Rules | None,
    request_sha: RequestCheck | None,
    results: ResultsCheck | None,
    counts: dict[str, int],
    leftovers: Leftovers | None = None,
    blob_refs: dict[Any, set[Any]] | None = None,
) -> list[Mismatch]:
    """Everything but the chain, for ``rows`` and the parsed ``records`` about them.

    One pass over ``records`` in seq order: each is expanded and fed to the history, then let
    go (only the history's last record per row is kept). ``counts`` gets the rows counted.
    A store checked in parts hands each part its operations' rows and records, with
    ``leftovers`` (rows and records with no partner by key, paired once every part is
    checked: ``pair_leftovers``) and ``blob_refs`` (blob bodies are then hashed by the caller,
    ``recompute.blob_bodies``); without them this is the whole check.
    """
    history = History(rules)
    expanded: list[Mismatch] = []
    for record in expand_each(records, expanded):
        history.feed(record)
    found = [*expanded, *history.mismatches]
    latest: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {name: {} for name in KINDS}
    for (name, key), record in history.latest.items():  # by kind, in one pass
        latest.setdefault(name, {})[key] = record
    history.latest.clear()
    spare = Leftovers() if leftovers is None else leftovers
    for kind in KINDS.values():
        if kind.name == "items":
            checked, table = CONVERSATION, rows.conversation
            by_key = conversation_records(latest["items"])
        else:
            checked, table, by_key = kind, rows.table(kind.table), latest[kind.name]
        found += match(checked, table, by_key, spare)
        if leftovers is None:
            found += pair(checked, spare.rows.pop(kind.name), spare.records.pop(kind.name))
    found += recompute(rows, request_sha, counts, blob_refs)
    found += results_sent(rows, history.spans, results, counts)
    return found


def pair_leftovers(leftovers: Leftovers) -> list[Mismatch]:
    """What the parts of a store left over, paired by likeness (``snapshots.pair``)."""
    found: list[Mismatch] = []
    for kind in KINDS.values():
        checked = CONVERSATION if kind.name == "items" else kind
        rows = leftovers.rows.get(kind.name, [])
        records = leftovers.records.get(kind.name, [])
        found += pair(checked, rows, records)
    return found


def head_mismatches(head: Head, links: Mapping[str, int], expect: str | None) -> list[Mismatch]:
    """The chain must reach the expected head (``[SEQ:]sha256:…``); it may have grown since."""
    if expect is None:
        return []
    seq_text, digest = ("", expect) if expect.startswith("sha256:") else expect.partition(":")[::2]
    seq = links.get(digest)
    if seq is not None and (not seq_text or seq_text == str(seq)):
        return []
    return [Mismatch.of(None, None, "audit_log", "head", "chain_sha256", expect, head.text())]


def counted(log: Iterable[Row], operation_id: str | None, count: list[int]) -> Iterator[Row]:
    """``log``'s rows, counting in ``count[0]`` those of ``operation_id`` (all without one)."""
    for row in log:
        if operation_id is None or row.get("operation_id") == operation_id:
            count[0] += 1
        yield row


def row_counts(rows: StoreRows, operation_id: str | None = None) -> dict[str, int]:
    """How many rows of each audited table ``rows`` hold (of ``operation_id``, or all)."""

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
    }
