"""The hash contract: canonical bytes, record sealing, chain links and call bindings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from toolloop_cli.audit.binding import (
    CALL_FIELDS,
    OP_FIELDS,
    call_binding_sha256,
    result_sha256,
)
from toolloop_cli.audit.canonical import (
    CanonicalJSONError,
    canonical_bytes,
    canonical_text,
    fast_canonical_bytes,
    sha256_hex,
)
from toolloop_cli.audit.hashing import GENESIS, chain_link, seal

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def reference(value: Any) -> bytes | str:
    try:
        return canonical_bytes(value)
    except CanonicalJSONError:
        return "rejected"


def fast(value: Any) -> bytes | str:
    try:
        return fast_canonical_bytes(value)
    except CanonicalJSONError:
        return "rejected"


@settings(max_examples=1000, deadline=None)
@given(json_values)
def test_the_fast_path_writes_exactly_the_rfc8785_bytes(value: Any) -> None:
    assert fast(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\ufb33": 2, "a": 3},  # UTF-16 order differs from code-point order
        {"lone": "\ud800"},  # a lone surrogate has no UTF-8 form
        [2**53, -(2**53)],  # outside the safe integer range
        {"x": 1.0, "y": 1e21, "z": -0.0},
        {"ctl": '\x00\x1f\x7f\u2028"\\'},
        {"duration_ms": 0.194, "tiny": 0.00012345, "big": 123456789012345.67},
        _nested(300),  # deeper than orjson writes
        ("a", ("b", True)),  # tuples are arrays
    ],
)
def test_the_fast_path_agrees_on_the_tricky_cases(value: Any) -> None:
    assert fast(value) == reference(value)


def test_a_known_canonical_form_and_hash() -> None:
    value = {"b": [1, "\u20ac", True, None], "a": {"d": "x", "c": 0}}
    assert canonical_text(value) == '{"a":{"c":0,"d":"x"},"b":[1,"€",true,null]}'
    assert fast_canonical_bytes(value) == canonical_bytes(value)
    assert sha256_hex(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


@given(st.integers(min_value=1, max_value=2**40), st.text(), st.text())
def test_a_chain_link_is_the_hash_of_canonical_seq_prev_record(
    seq: int, prev: str, record: str
) -> None:
    for a, b in ((prev, record), (GENESIS, sha256_hex(record.encode("utf-8", "replace")))):
        try:
            expected = sha256_hex(canonical_bytes([seq, a, b]))
        except CanonicalJSONError:
            continue
        assert chain_link(seq, a, b) == expected


def test_a_sealed_record_is_canonical_and_its_hashes_recompute() -> None:
    row = {"operation_id": "op_1", "response_id": "r", "call_id": "c", "state": "PROPOSED"}
    sealed = seal(7, GENESIS, "call", row)
    assert canonical_text(json.loads(sealed.record)) == sealed.record
    assert sealed.record_sha256 == sha256_hex(sealed.record.encode("utf-8"))
    assert sealed.chain_sha256 == chain_link(7, GENESIS, sealed.record_sha256)
    record = json.loads(sealed.record)
    assert record["key"] == ["op_1", "r", "c"] and record["row"] == row
    assert (sealed.operation_id, sealed.call_id, record["seq"]) == ("op_1", "c", 7)


OP = {name: f"op-{name}" for name in OP_FIELDS}
CALL: dict[str, Any] = {name: f"call-{name}" for name in CALL_FIELDS}
CALL.update(turn_idx=3, raw_arguments='{"order_id":"ord_1"}')


@pytest.mark.parametrize("field", [*OP_FIELDS, *CALL_FIELDS, "raw_arguments", "result"])
def test_every_bound_field_changes_the_call_binding(field: str) -> None:
    result = result_sha256({"ok": True}, None)
    base = call_binding_sha256(OP, CALL, result)
    op, call = dict(OP), dict(CALL)
    if field in op:
        op[field] = "other"
    elif field == "result":
        result = result_sha256({"ok": False}, None)
    else:
        call[field] = 4 if field == "turn_idx" else "other"
    assert call_binding_sha256(op, call, result) != base


def test_a_binding_ignores_key_order_and_a_result_binds_both_projections() -> None:
    shuffled = dict(reversed(list(CALL.items())))
    result = result_sha256({"a": 1, "b": 2}, {"x": 1})
    assert result == result_sha256({"b": 2, "a": 1}, {"x": 1})
    assert result != result_sha256({"a": 1, "b": 2}, {"x": 2})
    assert call_binding_sha256(OP, shuffled, result) == call_binding_sha256(OP, CALL, result)
