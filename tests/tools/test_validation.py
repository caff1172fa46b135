"""Argument and result checks: strict, complete, and never a repair or a mutation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from support.paths import REGISTRY as SHIPPED

from toolloop_cli.strict_json import (
    MAX_DEPTH,
    StrictJSONError,
    deeper_than,
    strict_loads,
    utf8_size,
)
from toolloop_cli.tools.registry import ToolDef, load_registry
from toolloop_cli.tools.validation import json_problems

REGISTRY = load_registry(SHIPPED)
DRAFT = REGISTRY.tools["create_refund_draft"]
SUBMIT = REGISTRY.tools["submit_refund"]
GET_ORDER = REGISTRY.tools["get_order"]


def test_valid_arguments_have_no_violations() -> None:
    arguments = {"order_id": "ord_1001", "amount_cents": 4999, "reason": "damaged"}
    assert DRAFT.argument_violations(arguments) == []


def test_string_ten_is_not_the_integer_ten() -> None:
    assert DRAFT.argument_violations({"order_id": "ord_1001", "amount_cents": "10"}) == [
        "$.amount_cents: '10' is not of type 'integer'"
    ]


def test_true_is_not_an_integer() -> None:
    assert DRAFT.argument_violations({"order_id": "ord_1001", "amount_cents": True}) == [
        "$.amount_cents: True is not of type 'integer'"
    ]


@pytest.mark.parametrize("amount", [10.5, 10.0])
def test_floats_are_not_integers_even_without_a_fraction(amount: float) -> None:
    assert DRAFT.argument_violations({"order_id": "ord_1001", "amount_cents": amount}) == [
        f"$.amount_cents: {amount} is not of type 'integer'"
    ]


def test_extra_property_is_a_violation_not_dropped() -> None:
    arguments = {"order_id": "ord_1001", "amount_cents": 10, "currency": "EUR"}
    assert DRAFT.argument_violations(arguments) == [
        "$: Additional properties are not allowed ('currency' was unexpected)"
    ]


def test_missing_required_key_is_a_violation() -> None:
    assert DRAFT.argument_violations({"order_id": "ord_1001"}) == [
        "$: 'amount_cents' is a required property"
    ]


def test_pattern_and_bounds_are_enforced() -> None:
    assert DRAFT.argument_violations({"order_id": "order-1001", "amount_cents": 0}) == [
        "$.amount_cents: 0 is less than the minimum of 1",
        "$.order_id: 'order-1001' does not match '^ord_[0-9]+$'",
    ]


def test_every_violation_is_reported_sorted() -> None:
    violations = SUBMIT.argument_violations({"order_id": 1001, "amount_cents": "4999", "note": "x"})
    assert violations == sorted(violations)
    assert len(violations) == 3


def test_non_object_arguments_are_a_violation() -> None:
    assert GET_ORDER.argument_violations(["ord_1001"]) == [
        "$: ['ord_1001'] is not of type 'object'"
    ]


def test_long_messages_are_cut_so_a_huge_value_is_not_echoed_back() -> None:
    [violation] = GET_ORDER.argument_violations({"order_id": "x" * 5000})
    assert len(violation) < 600 and violation.endswith("…")


def test_arguments_object_is_unchanged_after_validation() -> None:
    arguments: dict[str, Any] = {"order_id": "ord_1001", "amount_cents": "10", "extra": [1, {}]}
    before = copy.deepcopy(arguments)
    DRAFT.argument_violations(arguments)
    assert arguments == before
    assert type(arguments["amount_cents"]) is str


def test_argument_bytes_counts_utf8_bytes_not_characters() -> None:
    limit = load_registry(SHIPPED).tools["get_order"].max_argument_bytes
    assert utf8_size("a" * limit) == limit
    assert utf8_size("é" * (limit // 2)) == limit
    assert utf8_size("é" * (limit // 2 + 1)) == limit + 2
    assert utf8_size("\ud800") == 3  # a lone surrogate still has a size


def test_result_is_checked_against_result_schema_only_when_there_is_one() -> None:
    good = {
        "refund_id": "rf_1001_1",
        "order_id": "ord_1001",
        "amount_cents": 1,
        "status": "submitted",
    }
    assert SUBMIT.result_violations(good) == []
    assert SUBMIT.result_violations({"status": "pending"}) == [
        "$.status: 'pending' is not one of ['submitted']",
        "$: 'refund_id' is a required property",
    ]
    assert GET_ORDER.result_violations({"anything": "goes"}) == []


def test_json_problems_name_the_path_of_each_non_json_value() -> None:
    value = {"a": [1, {2: "x"}], "b": {1, 2}, "c": float("inf"), "d": 2**60, "ok": [None, True]}
    assert sorted(json_problems(value)) == [
        ("$.a[1].2", "keys must be strings"),
        ("$.b", "a set is not a JSON value"),
        ("$.c", "inf is not a JSON number"),
        ("$.d", "integer outside the interoperable JSON range (+-(2**53-1))"),
    ]
    loop: list[Any] = []
    loop.append(loop)
    assert json_problems(loop) == [("$[0]", "a recursive reference is not JSON")]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    arguments=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"order_id": st.text(max_size=12), "amount_cents": json_values},
            optional={"reason": json_values, "extra": json_values},
        ),
    )
)
def test_validation_never_mutates_its_input(arguments: object) -> None:
    before = copy.deepcopy(arguments)
    for tool in (DRAFT, SUBMIT, GET_ORDER):
        violations = tool.argument_violations(arguments)
        assert violations == sorted(violations)
        assert arguments == before
        assert repr(arguments) == repr(before)  # same types too: no "10" -> 10 coercion


def test_tooldef_compiles_its_validator_once_at_construction() -> None:
    tool: ToolDef = load_registry(SHIPPED).tools["create_refund_draft"]
    validator = tool.validator
    tool.argument_violations({"order_id": "ord_1", "amount_cents": 1})
    assert tool.validator is validator


def test_pattern_dollar_is_the_end_of_the_string_as_in_ecma_262() -> None:
    from toolloop_cli.tools.patterns import ecma_regex

    assert ecma_regex("^ord_[0-9]+$").search("ord_1")
    assert not ecma_regex("^ord_[0-9]+$").search("ord_1\n")  # Python's own $ would match
    assert ecma_regex(r"^a\$b$").search("a$b")  # an escaped $ is a literal
    assert ecma_regex("^[$]+$").search("$$")  # so is one inside a class
    assert not ecma_regex(r"^\d+$").search("١٢")  # \d is ASCII digits only


def nested(depth: int) -> object:
    """``depth`` levels of objects and arrays, alternating, built without recursion."""
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_nesting_is_measured_as_strict_parsing_measures_it_and_without_recursion() -> None:
    """``deeper_than`` (recorded request bodies) draws the line where ``strict_loads``
    (answers, arguments) does, and measures values too deep for a recursive walk."""
    import json

    strict_loads(json.dumps(nested(MAX_DEPTH)))
    with pytest.raises(StrictJSONError, match="nesting deeper than"):
        strict_loads(json.dumps(nested(MAX_DEPTH + 1)))
    assert not deeper_than(nested(MAX_DEPTH))
    assert deeper_than(nested(MAX_DEPTH + 1))
    assert deeper_than(nested(100_000))  # a recursive measure would raise RecursionError
    assert not deeper_than([{"a": [1, 2]}, {"b": {}}, "text"], 3)
    assert deeper_than([{"a": [1, 2]}, {"b": {}}, "text"], 2)
