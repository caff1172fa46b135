"""The history of each audited row: every record must follow from the one before it.

A row is compared with its latest record elsewhere (``verify``); that alone lets someone who
can write the store append a superseding record whose hashes they recomputed, and every head
kept before it still checks out. So the records about one row are read as a history, in
``seq`` order, keeping only the last record per key (one pass, linear in the log):

- a record kind whose rows are events (a turn, a transition, an append to the conversation)
  has one record per key; a second one is a rewrite;
- columns fixed at insert never change; columns set once (null, then a value) never change
  after they are set;
- the state column moves only as the state machine allows (or stays), starting from its
  initial state; a row in a final state (no move out of it) never changes again;
- appends to an operation's conversation start where the previous one ended.

What is legal is data (``Rules``) handed in by the caller: the store knows how it writes each
table, the engine which moves are legal, and this module imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .hashing import KINDS, hashable_key, key_text
from .mismatch import Mismatch

__all__ = ["History", "Rules", "TableRules"]


@dataclass(frozen=True)
class TableRules:
    """How the store may write the rows of one record kind after the first record."""

    #: one record per key: the rows are events, never rewritten
    once: bool = False
    #: columns written at insert and never changed
    fixed: frozenset[str] = frozenset()
    #: columns that may go from null to a value once, and never change after
    set_once: frozenset[str] = frozenset()
    #: the state column (None: the rows have no state)
    state: str | None = None
    #: state -> the states the next record may hold besides the same one; a state with no
    #: move out of it is final: the row never changes again
    moves: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: the states a row's first record may hold
    initial: frozenset[str] = frozenset()
    #: set-once columns that may still be written once the row is final (a finding about a
    #: row that has ended, such as a replay's divergences); everything else stays final
    after_final: frozenset[str] = frozenset()
    #: each record appends ``len(row["items"])`` entries at ``row["start"]`` to the list of
    #: ``row["operation_id"]``, right where the previous append ended
    appends: bool = False


#: record kind -> its rules (a kind left out is only compared with its latest record)
Rules = Mapping[str, TableRules]

_Key = tuple[str, tuple[Any, ...]]


class History:
    """Fed every record in ``seq`` order; keeps the last record per key and what broke."""

    def __init__(self, rules: Rules | None) -> None:
        self.rules: Rules = rules or {}
        self.latest: dict[_Key, dict[str, Any]] = {}
        self.mismatches: list[Mismatch] = []
        #: operation -> {start: item hashes} of every append (``appends`` kinds)
        self.spans: dict[str, dict[int, list[Any]]] = {}
        self._length: dict[str, int] = {}

    def feed(self, record: dict[str, Any]) -> None:
        """Take the next record of the chain."""
        kind, key, row = record.get("kind"), record.get("key"), record.get("row")
        if kind not in KINDS or not isinstance(key, list):
            return
        hashable = (str(kind), hashable_key(key))
        previous = self.latest.get(hashable)
        self.latest[hashable] = record
        rules = self.rules.get(str(kind))
        if rules is None or not isinstance(row, dict):
            return
        report = _Report(self.mismatches, str(kind), key, row, record.get("seq"))
        if rules.appends:
            self._append(row, report)
        before = previous.get("row") if previous is not None else None
        via = _states(record.get("via"))
        if not isinstance(before, dict):
            if rules.state is None:
                return
            path = [*via, row.get(rules.state)]
            if rules.initial and not _in(path[0], rules.initial):
                report(rules.state, _one_of(rules.initial), path[0], "first record")
            _moves(rules, path, report)
            return
        if rules.once:
            _rewritten(before, row, report, "written once")
        else:
            _follows(rules, before, row, report, via)

    def _append(self, row: Mapping[str, Any], report: _Report) -> None:
        op, start, items = row.get("operation_id"), row.get("start"), row.get("items")
        if not isinstance(op, str) or not isinstance(start, int) or not isinstance(items, list):
            report("items", "a start and a list of item hashes", row.get("items"), "append")
            return
        length = self._length.get(op, 0)
        if start != length:
            report("start", length, start, "appends in order")
        spans = self.spans.setdefault(op, {})
        if start not in spans:
            spans[start] = items
        self._length[op] = max(length, start + len(items))


class _Report:
    """Adds mismatches about one record (of ``kind``, about the row keyed ``key``)."""

    def __init__(
        self, out: list[Mismatch], kind: str, key: list[Any], row: Mapping[str, Any], seq: object
    ) -> None:
        self.out, self.table, self.row = out, KINDS[kind].table, row
        self.where = f"{key_text(key)} (record {seq}"

    def __call__(self, column: str, expected: object, found: object, rule: str) -> None:
        op, call = self.row.get("operation_id"), self.row.get("call_id")
        self.out.append(
            Mismatch.of(
                op if isinstance(op, str) else None,
                call if isinstance(call, str) else None,
                self.table,
                f"{self.where}: {rule})",
                column,
                expected,
                found,
            )
        )


def _follows(
    rules: TableRules,
    before: Mapping[str, Any],
    row: Mapping[str, Any],
    report: _Report,
    via: list[Any],
) -> None:
    """``row`` must be a legal next write of a row that stood as ``before``, through the
    states ``via`` (a batch write of a row whose state moved more than once)."""
    if rules.state is not None:
        old = before.get(rules.state)
        moves = rules.moves.get(old) if isinstance(old, str) else None
        if moves is not None and not moves:
            late = rules.after_final
            _rewritten(_without(before, late), _without(row, late), report, f"final once {old}")
            _set_once(late, before, row, report)
            if via:
                report(rules.state, old, via[0], f"final once {old}")
            return
        _moves(rules, [old, *via, row.get(rules.state)], report)
    for column in sorted(rules.fixed):
        if row.get(column) != before.get(column):
            report(column, before.get(column), row.get(column), "fixed at insert")
    _set_once(rules.set_once, before, row, report)


def _moves(rules: TableRules, path: list[Any], report: _Report) -> None:
    """Each state of ``path`` is the one before it or a move the state machine allows."""
    assert rules.state is not None
    for old, new in zip(path, path[1:], strict=False):
        if new == old:
            continue
        moves = rules.moves.get(old) if isinstance(old, str) else None
        if moves is None or not _in(new, moves):
            allowed = "nothing" if moves is None else _one_of(moves | {str(old)})
            report(rules.state, allowed, new, f"a move from {old}")


def _states(via: object) -> list[Any]:
    """The states a batch write says its row went through (none: a plain write)."""
    return list(via) if isinstance(via, list) else []


def _set_once(
    columns: frozenset[str], before: Mapping[str, Any], row: Mapping[str, Any], report: _Report
) -> None:
    for column in sorted(columns):
        if before.get(column) is not None and row.get(column) != before.get(column):
            report(column, before.get(column), row.get(column), "set once")


def _without(row: Mapping[str, Any], columns: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in columns}


def _rewritten(
    before: Mapping[str, Any], row: Mapping[str, Any], report: _Report, rule: str
) -> None:
    """Every column that differs from ``before``; a repeat of the same row is reported too."""
    columns = sorted(set(before) | set(row))
    changed = [c for c in columns if row.get(c, _ABSENT) != before.get(c, _ABSENT)]
    for column in changed:
        report(column, before.get(column), row.get(column), rule)
    if not changed and rule == "written once":
        report("row", "one record", "a second, identical record", rule)


def _in(value: object, states: frozenset[str]) -> bool:
    return isinstance(value, str) and value in states


def _one_of(states: frozenset[str]) -> str:
    return "one of " + ", ".join(sorted(states))


_ABSENT = object()
