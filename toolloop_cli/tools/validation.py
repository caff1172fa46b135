"""Strict checks of a call's arguments and a handler's result against the registry's schemas.

Nothing here coerces, repairs or mutates: the string ``"10"`` is not the integer ``10``, an
extra property is a violation, and the model is told exactly what was wrong so it can retry.
A violation is reported as ``"<json path>: <message>"``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

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


@functools.lru_cache(maxsize=1024)
def ecma_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` with ECMA-262 anchoring, as JSON Schema means it.

    Python's ``$`` also matches before a final newline, so ``^ord_[0-9]+$`` would accept
    ``"ord_1\\n"``; ECMA-262's ``$`` (no multiline flag) matches only at the end. Every ``$``
    outside a character class becomes ``\\Z``, and ``\\d``/``\\w`` match ASCII only, as in ECMA.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    return re.compile("".join(out), re.ASCII)


def _ecma_pattern(
    validator: Validator, pattern: str, instance: object, schema: object
) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not ecma_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: Draft 2020-12 with two changes: "integer" accepts only ints (never 10.0, never true), and
#: "pattern" anchors as ECMA-262 does (``$`` is the end of the string, not before a newline).
StrictValidator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={"pattern": _ecma_pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def compile_validator(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` that also asserts ``format``; compiled once per registry load.

    Its ``$ref`` registry is empty and retrieves nothing: a reference resolves inside the
    schema or not at all (``schema_problem`` refuses one that does not), never over the
    network, so the registry alone says what a call may hold."""
    return StrictValidator(
        schema, format_checker=Draft202012Validator.FORMAT_CHECKER, registry=_NO_RETRIEVAL
    )


#: resolves no URI: jsonschema's default would fetch a remote ``$ref`` when validating
_NO_RETRIEVAL: Registry[Any] = Registry()
_ROOT = "urn:toolloop:parameters"


def _ref_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """A ``$ref`` that does not resolve inside ``schema`` (a remote one, or a local one
    pointing nowhere), as (path inside it, message); None when every one resolves."""
    resolver = _NO_RETRIEVAL.with_resource(_ROOT, DRAFT202012.create_resource(schema)).resolver(
        _ROOT
    )
    stack: list[tuple[object, str, bool]] = [(schema, "", False)]  # (node, path, names map)
    while stack:
        node, path, names = stack.pop()
        if isinstance(node, dict):
            ref = None if names else node.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    where = "inside the schema" if ref.startswith("#") else "without a fetch"
                    return f"{path}.$ref", f"$ref {ref!r} does not resolve {where}"
            stack.extend(
                (value, f"{path}.{key}", not names and key in _NAMED_SUBSCHEMAS)
                for key, value in node.items()
                if names or key not in _DATA_KEYWORDS
            )
        elif isinstance(node, list):
            stack.extend((value, f"{path}[{i}]", False) for i, value in enumerate(node))
    return None


#: keywords whose value is data, never a schema: a ``"$ref"`` key in it is a value
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: keywords whose value maps names to schemas: a key there (even ``const``) is a name
_NAMED_SUBSCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def violations(validator: Validator, instance: object) -> list[str]:
    """Every violation of ``validator``'s schema by ``instance``, sorted; ``[]`` when valid."""
    found = []
    try:
        errors = list(validator.iter_errors(instance))  # type: ignore[arg-type]
    except Unresolvable as exc:  # only a schema ``schema_problem`` did not see: never fetched
        return [f"$: the schema's $ref {getattr(exc, 'ref', '')!r} does not resolve"]
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
    return _ref_problem(schema)


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
