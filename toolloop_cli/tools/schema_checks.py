"""What makes a valid JSON Schema unfit to check a model's arguments, found when it is loaded.

``check_schema`` says whether a schema is well formed; these say whether toolloop can check
values against it safely: every ``$ref`` resolves inside it (nothing is ever fetched), none
leads back to itself before a property or an item is checked (validation would recurse for
ever), and every pattern runs in RE2 (``patterns.py``: linear time, whatever the model sends).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from toolloop_cli.tools.patterns import PatternError, ecma_regex

__all__ = ["NO_RETRIEVAL", "ref_problem", "regex_problem"]

#: resolves no URI: jsonschema's default would fetch a remote ``$ref`` when validating
NO_RETRIEVAL: Registry[Any] = Registry()
_ROOT = "urn:toolloop:parameters"

#: keywords whose value is data, never a schema: a ``"$ref"`` key in it is a value
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: keywords whose value maps names to schemas: a key there (even ``const``) is a name
_NAMED_SUBSCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
#: keywords whose schemas apply to the very value the schema applies to (not to a part of
#: it): a cycle through these alone never reaches a smaller value, so it never ends
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def subschemas(schema: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object inside ``schema`` (itself included) with its path, never a value of
    ``const``/``enum``/``default``/``examples`` nor a name of a ``properties``-like map."""
    stack: list[tuple[object, str, bool]] = [(schema, "", False)]  # (node, path, names map)
    while stack:
        node, path, names = stack.pop()
        if isinstance(node, dict):
            if not names:
                yield node, path
            stack.extend(
                (value, f"{path}.{key}", not names and key in _NAMED_SUBSCHEMAS)
                for key, value in node.items()
                if names or key not in _DATA_KEYWORDS
            )
        elif isinstance(node, list):
            stack.extend((value, f"{path}[{i}]", False) for i, value in enumerate(node))


def ref_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """A ``$ref`` that does not resolve inside ``schema`` (a remote one, or a local one
    pointing nowhere), or one that leads back to itself with nothing but ``$ref``s and
    in-place keywords (``allOf``, ``not``, ``if``…) in between, as (path inside it, message);
    None when every one resolves to a schema that ends."""
    resolver = NO_RETRIEVAL.with_resource(_ROOT, DRAFT202012.create_resource(schema)).resolver(
        _ROOT
    )
    targets: dict[int, dict[str, Any]] = {}  # id of a node with a $ref -> what it resolves to
    paths: dict[int, str] = {}
    for node, path in subschemas(schema):
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolved = resolver.lookup(ref).contents
            except Unresolvable:
                where = "inside the schema" if ref.startswith("#") else "without a fetch"
                return f"{path}.$ref", f"$ref {ref!r} does not resolve {where}"
            if isinstance(resolved, dict):
                targets[id(node)] = resolved
        paths[id(node)] = path
    return _ref_cycle(schema, targets, paths)


def _in_place(node: dict[str, Any], targets: dict[int, dict[str, Any]]) -> list[Any]:
    """The schemas that ``node`` applies to the same value it is given."""
    found: list[Any] = [node[k] for k in _IN_PLACE_ONE if k in node]
    for key in _IN_PLACE_MANY:
        if isinstance(node.get(key), list):
            found.extend(node[key])
    if isinstance(node.get("dependentSchemas"), dict):
        found.extend(node["dependentSchemas"].values())
    if id(node) in targets:
        found.append(targets[id(node)])
    return [item for item in found if isinstance(item, dict)]


def _ref_cycle(
    schema: dict[str, Any], targets: dict[int, dict[str, Any]], paths: dict[int, str]
) -> tuple[str, str] | None:
    """A cycle of in-place applications through a ``$ref`` (depth first, on the nodes'
    identities: a resolved ``$ref`` is the very object it points at)."""
    done: set[int] = set()
    for start, _ in subschemas(schema):
        if id(start) in done:
            continue
        on_path: set[int] = {id(start)}
        stack: list[tuple[dict[str, Any], Iterator[dict[str, Any]]]] = [
            (start, iter(_in_place(start, targets)))
        ]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                done.add(id(node))
                continue
            if id(child) in on_path:
                loop = [n for n, _ in stack][[id(n) for n, _ in stack].index(id(child)) :]
                ref_node = next((n for n in loop if id(n) in targets), node)
                where = paths.get(id(ref_node), "")
                ref = ref_node.get("$ref")
                return f"{where}.$ref", (
                    f"$ref {ref!r} leads back to itself before any property or item is "
                    "checked: checking a value against it would never end"
                )
            if id(child) not in done:
                on_path.add(id(child))
                stack.append((child, iter(_in_place(child, targets))))
    return None


def regex_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """A pattern (``pattern``, a ``patternProperties`` name) that RE2 cannot run, as (path,
    message); or ``unevaluatedProperties`` beside ``patternProperties``, whose names
    jsonschema would match with Python's backtracking ``re``."""
    uses = set()
    for node, path in subschemas(schema):
        found = (
            [(f"{path}.pattern", node["pattern"])] if isinstance(node.get("pattern"), str) else []
        )
        named = node.get("patternProperties")
        if isinstance(named, dict):
            found += [(f"{path}.patternProperties.{name}", name) for name in named]
            uses.add("patternProperties")
        if "unevaluatedProperties" in node:
            uses.add("unevaluatedProperties")
        for where, regex in found:
            try:
                ecma_regex(regex)
            except PatternError as exc:
                return where, f"{exc} (RE2 has no lookaround and no backreferences)"
    if len(uses) == 2:
        return ".unevaluatedProperties", (
            "unevaluatedProperties cannot be combined with patternProperties: "
            "list the names in properties, or use additionalProperties"
        )
    return None
