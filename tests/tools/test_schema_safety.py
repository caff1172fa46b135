"""A schema is the registry's, the values it checks are the model's: no value may make a check
run for ever. Patterns run in RE2 (linear time), and a ``$ref`` that leads back to itself
before checking any part of the value is refused when the registry is loaded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from toolloop_cli.store import open_store
from toolloop_cli.tools.validation import compile_validator, schema_problem, violations

#: backtracks 2**n times in Python's ``re`` for n letters followed by a mismatch
NESTED = "^(a+)+$"
HOSTILE = "a" * 40 + "!"


def _checked(schema: dict[str, Any], value: object) -> tuple[list[str], float]:
    assert schema_problem(schema) is None
    started = time.perf_counter()
    found = violations(compile_validator(schema), value)
    return found, time.perf_counter() - started


def test_a_backtracking_pattern_rejects_a_hostile_string_at_once() -> None:
    """``^(a+)+$`` against 40 letters and a ``!``: Python's ``re`` would take about 2**40
    steps (days); the check answers, and says the value does not match."""
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": NESTED}}}
    found, _ = _checked(schema, {"id": HOSTILE})
    assert found == [f"$.id: {HOSTILE!r} does not match {NESTED!r}"]
    assert _checked(schema, {"id": "aaaa"})[0] == []


def test_property_names_are_matched_in_linear_time_too() -> None:
    """The names of an object are the model's as well: ``patternProperties`` and the
    ``additionalProperties`` that depends on it match them with RE2."""
    schema = {
        "type": "object",
        "patternProperties": {NESTED: {"type": "integer"}},
        "additionalProperties": False,
    }
    found, _ = _checked(schema, {HOSTILE: 1})
    assert found == [f"$: {HOSTILE!r} does not match any of the regexes: {NESTED!r}"]
    assert _checked(schema, {"aaa": "x"})[0] == ["$.aaa: 'x' is not of type 'integer'"]
    assert _checked(schema, {"aaa": 1})[0] == []


def test_additional_properties_keep_jsonschemas_wording_and_checks() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert _checked(schema, {"a": "x", "b": 1})[0] == []
    assert _checked(schema, {"a": "x", "b": "y"})[0] == ["$.b: 'y' is not of type 'integer'"]
    closed = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert _checked(closed, {"a": 1, "z": 2, "y": 3})[0] == [
        "$: Additional properties are not allowed ('y', 'z' were unexpected)"
    ]


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "string", "pattern": "^(?=.*[A-Z]).+$"}, ".pattern"),
        ({"type": "string", "pattern": r"^(a)\1$"}, ".pattern"),
        ({"type": "object", "patternProperties": {"(?!x)y": {}}}, ".patternProperties.(?!x)y"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_where_it_is(schema: dict[str, Any], path: str) -> None:
    """Lookaround and backreferences have no linear-time matcher: refused at load, naming
    the pattern, never matched by a backtracking engine instead."""
    problem = schema_problem(schema)
    assert problem is not None
    assert problem[0] == path
    assert "cannot be matched in linear time" in problem[1] and "lookaround" in problem[1]


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    """jsonschema matches those names with Python's ``re`` for ``unevaluatedProperties``."""
    schema = {
        "type": "object",
        "patternProperties": {"^x_": {}},
        "unevaluatedProperties": False,
    }
    problem = schema_problem(schema)
    assert problem is not None and problem[0] == ".unevaluatedProperties"


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"$ref": "#/$defs/x", "$defs": {"x": {"$ref": "#/$defs/x"}}}, ".$defs.x.$ref"),
        (
            {
                "$defs": {
                    "a": {"allOf": [{"$ref": "#/$defs/b"}]},
                    "b": {"not": {"$ref": "#/$defs/a"}},
                },
                "properties": {"p": {"$ref": "#/$defs/a"}},
            },
            ".$defs.a.allOf[0].$ref",
        ),
        ({"anyOf": [{"type": "string"}, {"$ref": "#"}]}, ".anyOf[1].$ref"),
    ],
)
def test_a_ref_that_leads_back_to_itself_in_place_is_refused(
    schema: dict[str, Any], path: str
) -> None:
    """Such a schema made every check raise ``RecursionError`` (a traceback in ``run``)
    while ``registry check`` said it was fine."""
    problem = schema_problem(schema)
    assert problem is not None, schema
    assert problem[0] == path  # a $ref on the cycle itself, not one that leads into it
    assert "leads back to itself" in problem[1]


def test_a_recursive_schema_that_descends_is_accepted_and_checks_deep_values() -> None:
    """A tree (a node's children are nodes) refers to itself below a property: each step
    checks a smaller part of the value, so it ends."""
    schema = {
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "additionalProperties": False,
            }
        },
        "properties": {"root": {"$ref": "#/$defs/node"}},
    }
    value: dict[str, Any] = {"children": []}
    for _ in range(20):
        value = {"children": [value]}
    assert _checked(schema, {"root": value})[0] == []
    value["children"][0]["extra"] = 1
    assert _checked(schema, {"root": value})[0] == [
        "$.root.children[0]: Additional properties are not allowed ('extra' was unexpected)"
    ]


def test_a_self_reference_missed_at_load_is_a_violation_not_a_traceback() -> None:
    """The last line of defence, for a schema compiled without ``schema_problem``."""
    schema = {"$ref": "#/$defs/x", "$defs": {"x": {"$ref": "#/$defs/x"}}}
    found = violations(compile_validator(schema), {})
    assert found == ["$: the schema refers to itself without end and cannot check any value"]


def test_a_run_given_a_hostile_argument_refuses_the_call_and_goes_on(tmp_path: Path) -> None:
    """The model's ``"aaaa…!"`` against a registry's ``^(a+)+$``: the run hung in the
    argument check. The call is INVALID, the model is told why, and the run completes."""
    from support.scripted import GUARDS, call, final, run_script, turn

    text = GUARDS.read_text().replace(
        "        text: {type: string}\n",
        f"        text: {{type: string, pattern: '{NESTED}'}}\n",
        1,
    )
    assert NESTED in text
    registry = tmp_path / "guards.yaml"
    registry.write_text(text)
    (tmp_path / "guard_tools.py").write_text((GUARDS.parent / "guard_tools.py").read_text())
    store = open_store(tmp_path / "store.db")
    result, _ = run_script(store, [turn(call("echo", {"text": HOSTILE})), final()], registry)
    assert result.target.value == "COMPLETED"
    (stored,) = store.calls(result.operation.operation_id)
    assert stored.state.value == "INVALID"
    assert "does not match" in str(stored.model_result)
    store.close()
