"""The hashes ``verify`` recomputes from stored inputs (not from the audit records).

Arguments, results and call bindings from each call and its operation; response bodies;
content-addressed blobs (the policy blocks approvals pin among them); the digests an
approval shares with its call; and requests, rebuilt by a caller-supplied function (the
adapters live outside this package).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .binding import call_binding_sha256, result_sha256
from .canonical import CanonicalJSONError, sha256_hex, sha256_of
from .mismatch import Mismatch
from .rows import RequestCheck, StoreRows

__all__ = ["blob_bodies", "blob_references", "recompute"]

Row = Mapping[str, Any]


class _Bad(ValueError):
    """A stored JSON column without a canonical form (reported, never raised out of verify)."""

    def __init__(self, column: str, found: str) -> None:
        super().__init__(f"{column}: {found}")
        self.column = column
        self.found = found


def recompute(
    rows: StoreRows,
    request_sha: RequestCheck | None,
    counts: dict[str, int],
    blob_refs: dict[Any, set[Any]] | None = None,
) -> list[Mismatch]:
    """Every derived hash of ``rows`` recomputed; counts rebuilt and unchecked requests.

    With ``blob_refs`` (a store checked in parts) blobs are only looked up, each reference
    added to it (blob -> operations); their bodies are then the caller's to hash
    (``blob_bodies``). Without it every blob of ``rows`` is hashed too.
    """
    ops = {r.get("operation_id"): r for r in rows.operations}
    calls = {(r.get("operation_id"), r.get("response_id"), r.get("call_id")): r for r in rows.calls}
    found: list[Mismatch] = []
    for call in rows.calls:
        found += _call(call, ops.get(call.get("operation_id")))
    counts.update(requests_rebuilt=0, requests_unchecked=0)
    for turn in rows.turns:
        found += _turn(turn, ops.get(turn.get("operation_id")), request_sha, counts)
    for apr in rows.approvals:
        found += _approval(
            apr, calls.get((apr.get("operation_id"), apr.get("response_id"), apr.get("call_id")))
        )
    if blob_refs is None:
        refs: dict[Any, set[Any]] = {}
        found += blob_references(rows, refs)
        found += blob_bodies(rows.blobs.items(), refs)
    else:
        found += blob_references(rows, blob_refs)
    return found


def _call(call: Row, op: Row | None) -> list[Mismatch]:
    def bad(column: str, expected: object, found: object) -> Mismatch:
        return Mismatch.of(
            call.get("operation_id"),
            call.get("call_id"),
            "calls",
            _call_key(call),
            column,
            expected,
            found,
        )

    found: list[Mismatch] = []
    try:
        if call.get("arguments_sha256") is not None:
            digest = _digest(call, "arguments_json")
            if digest != call.get("arguments_sha256"):
                found.append(bad("arguments_sha256", digest, call.get("arguments_sha256")))
        model_result = _json(call, "model_result_json")
        protected = _json(call, "protected_audit_json")
        digest = result_sha256(model_result, protected)
    except (_Bad, CanonicalJSONError) as exc:
        column = exc.column if isinstance(exc, _Bad) else "model_result_json"
        return [*found, bad(column, "canonical JSON", str(exc))]
    if model_result is None and protected is None:
        for column in ("result_sha256", "call_binding_sha256"):
            if call.get(column) is not None:
                found.append(bad(column, None, call.get(column)))
        return found
    if digest != call.get("result_sha256"):
        found.append(bad("result_sha256", digest, call.get("result_sha256")))
    if op is None:
        return [*found, bad("operation_id", "an operation in the store", "missing")]
    try:
        binding = call_binding_sha256(op, call, digest)
    except (KeyError, CanonicalJSONError) as exc:
        return [*found, bad("call_binding_sha256", "a binding", f"cannot compute: {exc}")]
    if binding != call.get("call_binding_sha256"):
        found.append(bad("call_binding_sha256", binding, call.get("call_binding_sha256")))
    return found


def _turn(
    turn: Row, op: Row | None, request_sha: RequestCheck | None, counts: dict[str, int]
) -> list[Mismatch]:
    def bad(column: str, expected: object, found: object) -> Mismatch:
        key = f"{turn.get('operation_id')}/{turn.get('idx')}"
        return Mismatch.of(turn.get("operation_id"), None, "turns", key, column, expected, found)

    found: list[Mismatch] = []
    body = turn.get("response_body")
    data = body if isinstance(body, bytes) else str(body).encode("utf-8")
    if sha256_hex(data) != turn.get("response_sha256"):
        found.append(bad("response_body", turn.get("response_sha256"), sha256_hex(data)))
    if request_sha is None or op is None:
        counts["requests_unchecked"] += 1
        return found
    try:
        rebuilt = request_sha(op, turn)
    except Exception as exc:  # a tampered input may break the rebuild: report it, go on
        return [
            *found,
            bad("request_sha256", "a request rebuilt from stored items", f"cannot rebuild: {exc}"),
        ]
    if rebuilt is None:
        counts["requests_unchecked"] += 1
    else:
        counts["requests_rebuilt"] += 1
        if rebuilt != turn.get("request_sha256"):
            found.append(bad("request_sha256", rebuilt, turn.get("request_sha256")))
    return found


def _approval(apr: Row, call: Row | None) -> list[Mismatch]:
    def bad(column: str, expected: object, found: object) -> Mismatch:
        return Mismatch.of(
            apr.get("operation_id"),
            apr.get("call_id"),
            "approvals",
            str(apr.get("approval_id")),
            column,
            expected,
            found,
        )

    if call is None:
        return [bad("call_id", "a call of this operation and response", "missing")]
    return [
        bad(column, call.get(theirs), apr.get(column))
        for column, theirs in (
            ("arguments_sha256", "arguments_sha256"),
            ("tool_sha256", "tool_sha256"),
            ("approval_id", "approval_id"),
            ("tool", "name"),
        )
        if apr.get(column) != call.get(theirs)
    ]


def blob_references(rows: StoreRows, refs: dict[Any, set[Any]]) -> list[Mismatch]:
    """Each blob ``rows`` refer to exists; ``refs`` gets which operations refer to each."""
    found: list[Mismatch] = []
    references = [(r.get("operation_id"), r.get("item_sha256")) for r in rows.conversation]
    references += [
        (t.get("operation_id"), t.get("tools_sha256")) for t in rows.turns if t.get("tools_sha256")
    ]
    references += [
        (a.get("operation_id"), a.get("policy_sha256"))
        for a in rows.approvals
        if a.get("policy_sha256")
    ]
    for op, digest in references:
        refs.setdefault(digest, set()).add(op)
        if digest not in rows.blobs:
            found.append(Mismatch.of(op, None, "blobs", str(digest), "sha256", digest, "missing"))
    return found


def blob_bodies(blobs: Iterable[tuple[Any, Any]], refs: Mapping[Any, set[Any]]) -> list[Mismatch]:
    """Each blob's body hashes to its key; a bad one is reported for each operation in
    ``refs`` that refers to it (with none: once, under no operation)."""
    found: list[Mismatch] = []
    for digest, body in blobs:
        data = body.encode("utf-8") if isinstance(body, str) else bytes(body or b"")
        actual = sha256_hex(data)
        if actual != digest:
            for op in sorted(refs.get(digest) or {None}, key=str):
                found.append(Mismatch.of(op, None, "blobs", str(digest), "body", digest, actual))
    return found


def _json(row: Row, column: str) -> Any:
    text = row.get(column)
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise _Bad(column, str(text)[:120]) from None


def _digest(row: Row, column: str) -> str:
    try:
        return sha256_of(_json(row, column))
    except CanonicalJSONError as exc:
        raise _Bad(column, str(exc)) from None


def _call_key(call: Row) -> str:
    return f"{call.get('operation_id')}/{call.get('response_id')}/{call.get('call_id')}"
