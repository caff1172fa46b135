"""Regular expressions of JSON Schemas, matched as ECMA-262 anchors them and in linear time.

A tool's schema is the registry's (or an MCP server's), but the strings it checks are the
model's: names and values chosen by whatever the model read. Python's ``re`` backtracks, so a
pattern such as ``^(a+)+$`` against ``"aaaa…!"`` never returns; RE2 (``google-re2``) matches
in time linear in the input, so the three keywords that match patterns (``pattern``,
``patternProperties``, ``additionalProperties``) use it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

__all__ = ["PatternError", "additional_properties", "ecma_regex", "pattern", "pattern_properties"]


class PatternError(ValueError):
    """A regular expression of a schema that toolloop does not run (RE2 cannot compile it)."""


@functools.lru_cache(maxsize=1024)
def ecma_regex(pattern: str) -> Any:
    """``pattern`` with ECMA-262 anchoring, as JSON Schema means it, compiled by RE2.

    RE2 matches in time linear in the input: a pattern such as ``^(a+)+$`` with a model's
    ``"aaaa…!"`` would keep Python's backtracking ``re`` busy for ever, and the arguments are
    the model's to choose. RE2 has no lookaround and no backreferences: a pattern using them
    raises ``PatternError`` (``regex_problem`` says so when a registry is loaded).

    Python's ``$`` also matches before a final newline, so ``^ord_[0-9]+$`` would accept
    ``"ord_1\\n"``; ECMA-262's ``$`` (no multiline flag) matches only at the end. Every ``$``
    outside a character class becomes ``\\z``; ``\\d``/``\\w`` match ASCII only in RE2, as in ECMA.
    """
    import re2

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
            char = r"\z"
        out.append(char)
        i += 1
    options = re2.Options()
    options.log_errors = False  # the reason is raised, not printed on stderr
    try:
        return re2.compile("".join(out), options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(
            f"pattern {pattern!r} cannot be matched in linear time: {reason}"
        ) from None


def pattern(
    validator: Validator, regex: str, instance: object, schema: object
) -> Iterator[ValidationError]:
    """``pattern``: a string must match ``regex`` (unanchored, as ECMA-262 searches)."""
    if isinstance(instance, str) and not ecma_regex(regex).search(instance):
        yield ValidationError(f"{instance!r} does not match {regex!r}")


def pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: object, schema: object
) -> Iterator[ValidationError]:
    """``patternProperties``, each name matched by RE2 (the names are the model's too)."""
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        regex = ecma_regex(pattern)
        for name, value in instance.items():
            if regex.search(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def additional_properties(
    validator: Any, additional: Any, instance: object, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """``additionalProperties``: the names neither ``properties`` nor a ``patternProperties``
    pattern (matched by RE2) covers, each checked against ``additional``."""
    if not isinstance(instance, dict):
        return
    named = schema.get("properties", {})
    patterns = [ecma_regex(p) for p in schema.get("patternProperties", {})]
    extras = [
        name
        for name in instance
        if name not in named and not any(regex.search(name) for regex in patterns)
    ]
    if isinstance(additional, dict):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:  # jsonschema's own wording
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )
