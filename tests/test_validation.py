"""Argument and result checks: strict, complete, and never a repair or a mutation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from toolloop_cli.tools.registry import ToolDef, load_registry
from toolloop_cli.tools.validation import (
    argument_bytes_problem,
    json_problems,
    validate_arguments,
    validate_result,
)

SHIPPED = Path(__file__).resolve().parents[1] / "registries" / "refunds.yaml"
REGISTRY = load_registry(SHIPPED)
DRAFT = REGISTRY.tools["create_refund_draft"]
SUBMIT = REGISTRY.tools["submit_refund"]
GET_ORDER = REGISTRY.tools["get_order"]


def test_valid_arguments_have_no_violations() -> None:
    arguments = {"order_id": "ord_1001", "amount_cents": 4999, "reason": "damaged"}
    assert validate_arguments(DRAFT, arguments) == []


def test_string_ten_is_not_the_integer_ten() -> None:
    assert validate_arguments(DRAFT, {"order_id": "ord_1001", "amount_cents": "10"}) == [
        "$.amount_cents: '10' is not of type 'integer'"
    ]


def test_true_is_not_an_integer() -> None:
    assert validate_arguments(DRAFT, {"order_id": "ord_1001", "amount_cents": True}) == [
        "$.amount_cents: True is not of type 'integer'"
    ]


@pytest.mark.parametrize("amount", [10.5, 10.0])
def test_floats_are_not_integers_even_without_a_fraction(amount: float) -> None:
    assert validate_arguments(DRAFT, {"order_id": "ord_1001", "amount_cents": amount}) == [
        f"$.amount_cents: {amount} is not of type 'integer'"
    ]


def test_extra_property_is_a_violation_not_dropped() -> None:
    arguments = {"order_id": "ord_1001", "amount_cents": 10, "currency": "EUR"}
    assert validate_arguments(DRAFT, arguments) == [
        "$: Additional properties are not allowed ('currency' was unexpected)"
    ]


def test_missing_required_key_is_a_violation() -> None:
    assert validate_arguments(DRAFT, {"order_id": "ord_1001"}) == [
        "$: 'amount_cents' is a required property"
    ]


def test_pattern_and_bounds_are_enforced() -> None:
    assert validate_arguments(DRAFT, {"order_id": "order-1001", "amount_cents": 0}) == [
        "$.amount_cents: 0 is less than the minimum of 1",
        "$.order_id: 'order-1001' does not match '^ord_[0-9]+$'",
    ]


def test_every_violation_is_reported_sorted() -> None:
    violations = validate_arguments(SUBMIT, {"order_id": 1001, "amount_cents": "4999", "note": "x"})
    assert violations == sorted(violations)
    assert len(violations) == 3


def test_non_object_arguments_are_a_violation() -> None:
    assert validate_arguments(GET_ORDER, ["ord_1001"]) == [
        "$: ['ord_1001'] is not of type 'object'"
    ]


def test_long_messages_are_cut_so_a_huge_value_is_not_echoed_back() -> None:
    [violation] = validate_arguments(GET_ORDER, {"order_id": "x" * 5000})
    assert len(violation) < 600 and violation.endswith("…")


def test_arguments_object_is_unchanged_after_validation() -> None:
    arguments: dict[str, Any] = {"order_id": "ord_1001", "amount_cents": "10", "extra": [1, {}]}
    before = copy.deepcopy(arguments)
    validate_arguments(DRAFT, arguments)
    assert arguments == before
    assert type(arguments["amount_cents"]) is str


def test_argument_bytes_counts_utf8_bytes_not_characters() -> None:
    tool = load_registry(SHIPPED).tools["get_order"]
    limit = tool.max_argument_bytes
    assert argument_bytes_problem(tool, "a" * limit) is None
    assert argument_bytes_problem(tool, "é" * (limit // 2)) is None
    assert argument_bytes_problem(tool, "é" * (limit // 2 + 1)) == (
        f"arguments are {limit + 2} bytes, over the limit of {limit}"
    )


def test_result_is_checked_against_result_schema_only_when_there_is_one() -> None:
    good = {
        "refund_id": "rf_1001_1",
        "order_id": "ord_1001",
        "amount_cents": 1,
        "status": "submitted",
    }
    assert validate_result(SUBMIT, good) == []
    assert validate_result(SUBMIT, {"status": "pending"}) == [
        "$.status: 'pending' is not one of ['submitted']",
        "$: 'refund_id' is a required property",
    ]
    assert validate_result(GET_ORDER, {"anything": "goes"}) == []


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
        violations = validate_arguments(tool, arguments)
        assert violations == sorted(violations)
        assert arguments == before
        assert repr(arguments) == repr(before)  # same types too: no "10" -> 10 coercion


def test_tooldef_compiles_its_validator_once_at_construction() -> None:
    tool: ToolDef = load_registry(SHIPPED).tools["create_refund_draft"]
    validator = tool.validator
    validate_arguments(tool, {"order_id": "ord_1", "amount_cents": 1})
    assert tool.validator is validator


def test_pattern_dollar_is_the_end_of_the_string_as_in_ecma_262() -> None:
    from toolloop_cli.tools.validation import ecma_regex

    assert ecma_regex("^ord_[0-9]+$").search("ord_1")
    assert not ecma_regex("^ord_[0-9]+$").search("ord_1\n")  # Python's own $ would match
    assert ecma_regex(r"^a\$b$").search("a$b")  # an escaped $ is a literal
    assert ecma_regex("^[$]+$").search("$$")  # so is one inside a class
    assert not ecma_regex(r"^\d+$").search("١٢")  # \d is ASCII digits only
