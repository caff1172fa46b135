"""Each call's stored result against what the model was actually sent.

A call's ``model_result`` is bound to the call by ``result_sha256``, but someone who rewrites
the result can recompute that hash, its binding and the records. What the model was sent is
elsewhere: the conversation items ``send_back`` appended after the turn (content-addressed,
recorded by an ``items`` record, and covered by the next request's hash). So each turn's
results are rebuilt from its stored calls (through the operation's adapter, supplied by the
caller as ``ResultsCheck``) and compared with those items.

Where they are: a turn's request was built from the first ``request_items`` items; its
answer appended its output items right there (an answer with calls always adds at least
one item, the calls themselves, since the next request must carry them), and the results
were the next append. A turn whose results were never sent has no such append.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .mismatch import Mismatch
from .rows import StoreRows

__all__ = ["ResultsCheck", "results_sent"]

Row = Mapping[str, Any]

#: (operation row, the calls of one turn in order, the items sent as their results) ->
#: a mismatch for each call whose stored result is not what was sent, or None when the
#: results cannot be rebuilt here (e.g. another adapter revision)
ResultsCheck = Callable[[Row, Sequence[Row], Sequence[Any]], list[Mismatch] | None]


def results_sent(
    rows: StoreRows,
    spans: Mapping[Any, Mapping[int, Sequence[Any]]],
    check: ResultsCheck | None,
    counts: dict[str, int],
) -> list[Mismatch]:
    """Compare every turn's sent results with its calls; ``spans``: op -> {start: hashes}."""
    counts.update(results_checked=0, results_unchecked=0)
    if check is None:
        return []
    ops = {r.get("operation_id"): r for r in rows.operations}
    turns = {(t.get("operation_id"), t.get("idx")): t for t in rows.turns}
    by_turn: dict[tuple[Any, Any], list[Row]] = {}
    for call in rows.calls:
        by_turn.setdefault((call.get("operation_id"), call.get("turn_idx")), []).append(call)
    found: list[Mismatch] = []
    for (op_id, idx), calls in by_turn.items():
        op, turn = ops.get(op_id), turns.get((op_id, idx))
        items = _sent(rows, spans.get(op_id, {}), turn)
        if op is None or items is None:
            continue  # a missing row or blob is reported by the other checks
        calls.sort(key=_position)
        problems = check(op, calls, items)
        if problems is None:
            counts["results_unchecked"] += 1
        else:
            counts["results_checked"] += 1
            found += problems
    return found


def _sent(
    rows: StoreRows, appended: Mapping[int, Sequence[Any]], turn: Row | None
) -> list[Any] | None:
    """The items appended as the turn's results (None when none were, or one is missing)."""
    start = None if turn is None else turn.get("request_items")
    if not isinstance(start, int):
        return None
    output = appended.get(start)
    digests = None if output is None else appended.get(start + len(output))
    if digests is None:
        return None
    items = []
    for digest in digests:
        body = rows.blobs.get(digest) if isinstance(digest, str) else None
        try:
            items.append(json.loads(body))  # type: ignore[arg-type]
        except (TypeError, ValueError, RecursionError):
            return None
    return items


def _position(call: Row) -> int:
    seq = call.get("seq")
    return seq if isinstance(seq, int) else -1
