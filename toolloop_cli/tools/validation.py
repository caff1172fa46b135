"""Strict checks of a call's arguments and a handler's result against the registry's schemas.

Nothing here coerces, repairs or mutates: the string ``"10"`` is not the integer ``10``, an
extra property is a violation, and the model is told exactly what was wrong so it can retry.
A violation is reported as ``"<json path>: <message>"``.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

from toolloop_cli.tools import patterns, schema_checks
from toolloop_cli.tools.schema_checks import NO_RETRIEVAL

__all__ = [
    "StrictValidator",
    "compile_validator",
    "json_problems",
    "schema_problem",
    "violations",
]

#: a violation message longer than this is cut: it quotes the instance, which may be huge
MAX_MESSAGE_CHARS = 500


def _strict_integer(_checker: object, instance: object) -> bool:
    """JSON Schema calls 10.0 an integer; a handler expecting an int must not receive a float."""
    return isinstance(instance, int) and not isinstance(instance, bool)


#: Draft 2020-12 with these changes: "integer" accepts only ints (never 10.0, never true), and
#: patterns are ECMA-262 anchored (``$`` is the end of the string, not before a newline) and
#: matched by RE2, in linear time ("pattern", "patternProperties", "additionalProperties").
StrictValidator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={
        "pattern": patterns.pattern,
        "patternProperties": patterns.pattern_properties,
        "additionalProperties": patterns.additional_properties,
    },
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def compile_validator(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` that also asserts ``format``; compiled once per registry load.

    Its ``$ref`` registry is empty and retrieves nothing: a reference resolves inside the
    schema or not at all (``schema_problem`` refuses one that does not), never over the
    network, so the registry alone says what a call may hold."""
    return StrictValidator(
        schema, format_checker=Draft202012Validator.FORMAT_CHECKER, registry=NO_RETRIEVAL
    )


def violations(validator: Validator, instance: object) -> list[str]:
    """Every violation of ``validator``'s schema by ``instance``, sorted; ``[]`` when valid."""
    found = []
    try:
        errors = list(validator.iter_errors(instance))  # type: ignore[arg-type]
    except Unresolvable as exc:  # only a schema ``schema_problem`` did not see: never fetched
        return [f"$: the schema's $ref {getattr(exc, 'ref', '')!r} does not resolve"]
    except patterns.PatternError as exc:  # likewise: a pattern RE2 cannot run
        return [f"$: the schema's {exc}"]
    except RecursionError:  # likewise: a $ref that leads back to itself
        return ["$: the schema refers to itself without end and cannot check any value"]
    for error in errors:
        message = error.message
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 1] + "…"
        found.append(f"{error.json_path}: {message}")
    return sorted(found)


def schema_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """Why ``schema`` is not a valid 2020-12 JSON Schema, as (path inside it, message), or None."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        inner = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        return inner, f"invalid JSON Schema: {exc.message}"
    return schema_checks.ref_problem(schema) or schema_checks.regex_problem(schema)


def parameters_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """Why ``schema`` cannot be a tool's parameters, as (path inside it, message), or None:
    a tool's arguments are always a JSON object, so its schema must say ``type: object``."""
    if schema.get("type") != "object":
        return ".type", "must be 'object'"
    return schema_problem(schema)


def json_problems(value: object, path: str = "$") -> list[tuple[str, str]]:
    """Where ``value`` has no canonical JSON form, so cannot be hashed or sent to a model.

    Catches what YAML or Python allow and JSON does not: sets, bytes, dates, NaN and
    infinities, integers beyond +-(2**53-1), non-string keys, recursive aliases. The walk
    keeps its own stack, so no nesting depth can make it raise ``RecursionError``.
    """
    found: list[tuple[str, str]] = []
    active: set[int] = set()  # the containers on the way down: one seen again is a cycle
    stack: list[tuple[object, str] | int] = [(value, path)]  # an int: leave that container
    while stack:
        top = stack.pop()
        if isinstance(top, int):
            active.discard(top)
            continue
        item, where = top
        if isinstance(item, dict | list):
            if id(item) in active:
                found.append((where, "a recursive reference is not JSON"))
                continue
            active.add(id(item))
            stack.append(id(item))
            stack.extend(reversed(_children(item, where, found)))
        elif isinstance(item, float) and not abs(item) <= 1.7976931348623157e308:
            found.append((where, f"{item} is not a JSON number"))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > 2**53 - 1:
            found.append((where, "integer outside the interoperable JSON range (+-(2**53-1))"))
        elif item is not None and not isinstance(item, str | int | float):
            found.append((where, f"a {type(item).__name__} is not a JSON value"))
    return found


def _children(
    value: dict[Any, Any] | list[Any], path: str, found: list[tuple[str, str]]
) -> list[tuple[object, str]]:
    """Each item of a container with its path; a key that is not a string is a problem."""
    children: list[tuple[object, str]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(key, str):
            where = f"{path}.{key}" if path else key
        elif isinstance(value, list):
            where = f"{path}[{key}]"
        else:
            where = f"{path}.{key}" if path else str(key)
            found.append((where, "keys must be strings"))
        children.append((item, where))
    return children
