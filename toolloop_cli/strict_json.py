"""Untrusted JSON text: strict parsing and the hard size ceilings (a leaf everything may use).

Tool arguments decide what a side effect does, so they are parsed strictly and never repaired:
NaN/Infinity, duplicate keys (which value would a handler see?), lone surrogates (no UTF-8
form, so no canonical hash), excessive nesting and anything but an object at the top level
are refused with a reason the engine turns into an INVALID call.

A tool's ``max_argument_bytes`` is its cap; ``MAX_ARGUMENT_BYTES`` is the most any registry
may set. Adapters refuse to parse argument text over the ceiling, so a hostile answer with
megabytes of arguments costs the bytes the provider sent and nothing more: the engine then
refuses it against the tool's own cap with the original text kept.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "MAX_ARGUMENT_BYTES",
    "MAX_DEPTH",
    "DuplicateKeyError",
    "StrictJSONError",
    "TooDeepError",
    "deeper_than",
    "parse_arguments",
    "strict_loads",
    "utf8_size",
    "why",
]

#: The largest ``max_argument_bytes`` a registry may declare (1 MiB).
MAX_ARGUMENT_BYTES = 1 << 20

_CHUNK = 256  # a slice and its bytes: at most 2 KiB at a time


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (lone surrogates as 3 bytes), encoded a little at a time."""
    if text.isascii():
        return len(text)
    return sum(
        len(text[i : i + _CHUNK].encode("utf-8", "surrogatepass"))
        for i in range(0, len(text), _CHUNK)
    )


#: Deepest nesting accepted in a JSON value (arrays and objects).
MAX_DEPTH = 64


class StrictJSONError(ValueError):
    """A JSON text that is well-formed but not acceptable here."""


class DuplicateKeyError(StrictJSONError):
    """An object names a key twice (readers disagree on which value holds)."""


class TooDeepError(StrictJSONError):
    """Objects and arrays nested deeper than ``MAX_DEPTH``."""


def _no_constants(name: str) -> Any:
    raise StrictJSONError(f"non-finite number {name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _check(value: Any, depth: int = 0) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and strings without a UTF-8 form."""
    if depth > MAX_DEPTH:
        raise TooDeepError(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _encodable(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(key)
            _check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, depth + 1)


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels deep (iterative:
    a value too deep for a recursive walk is measured all the same)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return False


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StrictJSONError("string with a lone surrogate (no UTF-8 form)") from exc


def _finite_float(text: str) -> float:
    """A JSON number Python would turn into infinity (``1e999999``) has no canonical form."""
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text[:40]} is out of range")
    return value


def strict_loads(text: str) -> Any:
    """``json.loads`` with every refusal above; raises ``ValueError`` or ``RecursionError``."""
    value = json.loads(
        text,
        parse_constant=_no_constants,
        parse_float=_finite_float,
        object_pairs_hook=_unique_keys,
    )
    _check(value)
    return value


def parse_arguments(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """Parse tool-call argument text: ``(object, None)`` or ``(None, reason)``; never repairs.

    The reason is short and meant for the model (it goes into the error envelope). Text over
    ``MAX_ARGUMENT_BYTES`` is not parsed at all: no tool may accept it, and parsing it would
    cost many times its size (the engine refuses it against the tool's cap).
    """
    size = utf8_size(text)
    if size > MAX_ARGUMENT_BYTES:
        return None, f"arguments are {size} bytes, over the ceiling of {MAX_ARGUMENT_BYTES}"
    try:
        value = strict_loads(text)
    except (ValueError, RecursionError) as exc:
        return None, why(exc)
    if not isinstance(value, dict):
        return None, f"top level is {_json_type(value)}, not an object"
    return value, None


def why(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} at position {exc.pos}"
    if isinstance(exc, RecursionError):
        return f"nesting deeper than {MAX_DEPTH} levels"
    return str(exc)


def _json_type(value: Any) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return type(value).__name__
