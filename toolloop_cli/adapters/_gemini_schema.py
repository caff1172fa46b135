"""Gemini's own schema dialect (an OpenAPI 3.0 subset) as JSON Schema, for validation.

``functionDeclarations[].parameters`` may use Gemini's ``Schema`` object: upper-case types
(``STRING``, ``OBJECT``…), ``nullable: true`` instead of a ``null`` type, ``format: enum``
on strings and ``propertyOrdering``. The API accepts it, so recordings carry it; JSON Schema
does not (``"STRING"`` is no JSON Schema type, so such a schema would check nothing). This
turns it into the JSON Schema that means the same: types lower-cased, ``nullable`` folded
into the type (and the enum), and ``format: enum`` dropped, since ``enum`` already says it.
Keywords both dialects share pass through unchanged; a schema that is JSON Schema already
comes back equal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["json_schema"]

_TYPES = {
    "STRING": "string",
    "NUMBER": "number",
    "INTEGER": "integer",
    "BOOLEAN": "boolean",
    "ARRAY": "array",
    "OBJECT": "object",
    "NULL": "null",
}
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains")


def json_schema(schema: Any) -> Any:
    """``schema`` in JSON Schema terms (see the module docstring); never raises."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [json_schema(v) for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: json_schema(v) for k, v in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = json_schema(value)
        elif key == "type":
            out[key] = _type(value)
        elif key in ("nullable", "propertyOrdering"):
            continue
        elif key == "format" and value == "enum":
            continue
        else:
            out[key] = value
    if out.get("type") == "TYPE_UNSPECIFIED":
        del out["type"]
    if schema.get("nullable") is True:
        _nullable(out)
    return out


def _type(value: Any) -> Any:
    if isinstance(value, str):
        return _TYPES.get(value.upper(), value) if value.isupper() else value
    if isinstance(value, list):
        return [_type(v) for v in value]
    return value


def _nullable(out: dict[str, Any]) -> None:
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    elif "anyOf" in out and isinstance(out["anyOf"], list):
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
