"""Walking the audit log's hash chain: every link recomputed, every record parsed once.

The walk never raises on tampered input: each broken link, hash or field becomes a
``Mismatch`` and the walk goes on, so one report lists every damaged record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .canonical import MAX_SAFE_INT, sha256_hex
from .hashing import BATCH, BATCH_VERSIONS, GENESIS, KINDS, RECORD_VERSION, chain_link
from .mismatch import Mismatch

__all__ = ["ChainWalk", "Head", "Walk", "checked", "walk"]

_TABLE = "audit_log"


@dataclass(frozen=True)
class Head:
    """The last record of the chain: its sequence number and chain hash."""

    seq: int
    chain_sha256: str

    def text(self) -> str:
        """``<seq>:<chain_sha256>``, the form ``--expect-head`` takes."""
        return f"{self.seq}:{self.chain_sha256}"


@dataclass
class Walk:
    """What walking the chain found: mismatches, the parsed records, the head, every link."""

    mismatches: list[Mismatch]
    records: list[dict[str, Any]]  # parsed records whose text is a JSON object, in order
    head: Head
    links: dict[str, int]  # every stored chain_sha256 -> its seq (to find an older head)


def walk(log: Iterable[Mapping[str, Any]]) -> Walk:
    """Recompute every record hash and chain link of ``log`` (rows ordered by ``seq``)."""
    walker = ChainWalk()
    records = list(walker.each(log))
    return Walk(walker.mismatches, records, walker.head, walker.links)


class ChainWalk:
    """The walk one record at a time: ``each`` yields every record that parses as it checks
    its link, so a caller can use each record and let it go (``verify`` holds none of them);
    the mismatches, head and links are complete once ``each`` is exhausted."""

    def __init__(self) -> None:
        self.mismatches: list[Mismatch] = []
        self.links: dict[str, int] = {}  # every stored chain_sha256 -> its seq
        self.head = Head(0, GENESIS)
        self._prev = GENESIS
        self._expected = 1
        self._last: Mapping[str, Any] | None = None
        #: seq -> the operation a record names, where its row's column names another (the
        #: record belongs with the operation it names; the column is reported)
        self.moved: dict[int, object] = {}

    def each(self, log: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in log:
            record = _parse(row.get("record"))
            self._link(row, record)
            if record is not None and record.get("operation_id") != row.get("operation_id"):
                self.moved[_int(row.get("seq"))] = record.get("operation_id")
            if _fields_hold(row, record, self.mismatches):
                yield record  # type: ignore[misc]  # _fields_hold: the record parsed
        self._ended()

    def walk_links(self, log: Iterable[Mapping[str, Any]]) -> None:
        """``each`` without reading the records: every hash and link is checked, and a record
        is parsed only to name a broken one. Its fields are then ``checked``'s to read."""
        for row in log:
            self._link(row, _UNPARSED)
            if not _names_its_column(row):
                record = _parse(row.get("record"))
                if record is not None and record.get("operation_id") != row.get("operation_id"):
                    self.moved[_int(row.get("seq"))] = record.get("operation_id")
        self._ended()

    def _link(self, row: Mapping[str, Any], record: dict[str, Any] | None | object) -> None:
        self._last = row
        seq = row.get("seq")
        text = row.get("record")
        stored_rec, stored_prev, stored_chain = (
            row.get("record_sha256"),
            row.get("prev_sha256"),
            row.get("chain_sha256"),
        )
        prev_chain = self._prev
        problems: list[tuple[str, object, object]] = []
        if seq != self._expected:
            problems.append(("seq", self._expected, seq))
        actual = sha256_hex(text.encode("utf-8")) if isinstance(text, str) else None
        if stored_prev != prev_chain:
            problems.append(("prev_sha256", prev_chain, stored_prev))
        links_ok = stored_chain == chain_link(_int(seq), str(stored_prev), str(stored_rec)) or (
            stored_prev != prev_chain
            and stored_chain == chain_link(_int(seq), prev_chain, str(stored_rec))
        )
        if actual != stored_rec:  # the record text, or its hash column, was changed
            problems.append(("record" if links_ok else "record_sha256", stored_rec, actual))
        elif not links_ok:  # record and its hash agree, but not with the chain
            problems.append(
                ("chain_sha256", chain_link(_int(seq), prev_chain, str(actual)), stored_chain)
            )
        if problems:
            if record is _UNPARSED:
                record = _parse(text)
            bad = _reporter(row, record, self.mismatches)  # type: ignore[arg-type]
            for problem in problems:
                bad(*problem)
        self._prev = str(row.get("chain_sha256"))
        self.links[self._prev] = _int(seq)
        self._expected = _int(seq) + 1 if isinstance(seq, int) else self._expected + 1

    def _ended(self) -> None:
        if self._last is not None:
            self.head = Head(_int(self._last.get("seq")), str(self._last.get("chain_sha256")))


def _names_its_column(row: Mapping[str, Any]) -> bool:
    """Whether the record's text holds its row's ``operation_id`` as toolloop writes it.

    Canonical records hold no other ``"operation_id":`` before the top-level one, and a
    record never holds rows of another operation, so this holds for every record toolloop
    wrote; when it does not, the record is parsed to find the operation it names.
    """
    op, text = row.get("operation_id"), row.get("record")
    if not isinstance(text, str) or not (op is None or isinstance(op, str)):
        return False
    return ('"operation_id":' + json.dumps(op, ensure_ascii=False)) in text


def checked(log: Iterable[Mapping[str, Any]], found: list[Mismatch]) -> Iterator[dict[str, Any]]:
    """The records of ``log``, each checked against its row's columns as ``ChainWalk.each``
    checks them (for a log whose links were walked with ``ChainWalk.walk_links``)."""
    for row in log:
        record = _parse(row.get("record"))
        if _fields_hold(row, record, found):
            yield record  # type: ignore[misc]  # _fields_hold: the record parsed


def _fields_hold(
    row: Mapping[str, Any], record: dict[str, Any] | None, found: list[Mismatch]
) -> bool:
    """Report a record that is not a JSON object, or whose fields its row's columns do not
    say; True when it parsed (its fields may still be reported)."""
    bad = _reporter(row, record, found)
    if record is None:
        bad("record", "a JSON object", _short(row.get("record")))
        return False
    _check_fields(row, record, bad)
    return True


def _reporter(
    row: Mapping[str, Any], record: Mapping[str, Any] | None, found: list[Mismatch]
) -> _Reporter:
    op, call = _names(row, record)
    return _Reporter(found, op, call, f"seq {row.get('seq')}")


#: a record not read yet (``ChainWalk.walk_links``)
_UNPARSED = object()


class _Reporter:
    """Adds mismatches about one audit-log row."""

    def __init__(self, out: list[Mismatch], op: str | None, call: str | None, key: str) -> None:
        self.out, self.op, self.call, self.key = out, op, call, key

    def __call__(self, field: str, expected: object, found: object) -> None:
        self.out.append(Mismatch.of(self.op, self.call, _TABLE, self.key, field, expected, found))


def _check_fields(row: Mapping[str, Any], record: Mapping[str, Any], bad: _Reporter) -> None:
    """The row's columns must say what its (hashed) record says."""
    version = record.get("v")
    if version in BATCH_VERSIONS:
        if record.get("kind") != BATCH:
            bad("record", f"kind {BATCH}", record.get("kind"))
        if not isinstance(record.get("writes"), list):
            bad("record", "a batch record with its writes", _short(json.dumps(record)))
    elif version == RECORD_VERSION:
        if record.get("kind") not in KINDS:
            bad("record", "a known record kind", record.get("kind"))
        if not isinstance(record.get("row"), dict) or not isinstance(record.get("key"), list):
            bad("record", "a record with key and row", _short(json.dumps(record)))
    else:
        known = ", ".join(str(v) for v in (RECORD_VERSION, *BATCH_VERSIONS))
        bad("record", f"record version {known}", version)
    for column in ("seq", "kind", "operation_id", "call_id"):
        if record.get(column) != row.get(column):
            bad(column, record.get(column), row.get(column))


def _parse(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the decoder's depth
        return None
    return value if isinstance(value, dict) else None


def _names(
    row: Mapping[str, Any], record: Mapping[str, Any] | None
) -> tuple[str | None, str | None]:
    """The operation and call a record is about: from the hashed record when it parses."""
    source = record if record is not None else row
    op, call = source.get("operation_id"), source.get("call_id")
    return (op if isinstance(op, str) else None, call if isinstance(call, str) else None)


def _int(value: object) -> int:
    """A stored ``seq`` as a number to hash and compare, -1 for one toolloop never writes (not
    an integer, or past what canonical JSON can hold, which would have no chain hash)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_SAFE_INT:
        return value
    return -1


def _short(value: object, width: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
