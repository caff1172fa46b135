"""Strict JSON for provider payloads and tool arguments.

Tool arguments decide what a side effect does, so they are parsed strictly and never repaired:
NaN/Infinity, duplicate keys (which value would a handler see?), lone surrogates (no UTF-8
form, so no canonical hash), excessive nesting and anything but an object at the top level
are refused with a reason the engine turns into an INVALID call.
"""

from __future__ import annotations

import json
import math
from typing import Any

from toolloop_cli.errors import MalformedProviderPayload

__all__ = ["MAX_DEPTH", "load_json_body", "parse_arguments"]

#: Deepest nesting accepted in a JSON value (arrays and objects).
MAX_DEPTH = 64


class _Rejected(ValueError):
    """A JSON text that is well-formed but not acceptable here."""


def _no_constants(name: str) -> Any:
    raise _Rejected(f"non-finite number {name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Rejected(f"duplicate key {key!r}")
        result[key] = value
    return result


def _check(value: Any, depth: int = 0) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and strings without a UTF-8 form."""
    if depth > MAX_DEPTH:
        raise _Rejected(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _encodable(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(key)
            _check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, depth + 1)


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Rejected("string with a lone surrogate (no UTF-8 form)") from exc


def _finite_float(text: str) -> float:
    """A JSON number Python would turn into infinity (``1e999999``) has no canonical form."""
    value = float(text)
    if not math.isfinite(value):
        raise _Rejected(f"number {text[:40]} is out of range")
    return value


def _strict_loads(text: str) -> Any:
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

    The reason is short and meant for the model (it goes into the error envelope).
    """
    try:
        value = _strict_loads(text)
    except (ValueError, RecursionError) as exc:
        return None, _reason(exc)
    if not isinstance(value, dict):
        return None, f"top level is {_json_type(value)}, not an object"
    return value, None


def load_json_body(data: bytes, provider: str) -> Any:
    """Decode a provider answer body (UTF-8 JSON); anything else is a malformed payload."""
    try:
        return _strict_loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        reason = f"body is not UTF-8 (byte {exc.start})"
        raise MalformedProviderPayload(f"{provider}: {reason}", provider=provider) from exc
    except (ValueError, RecursionError) as exc:
        reason = f"body is not acceptable JSON ({_reason(exc)})"
        raise MalformedProviderPayload(f"{provider}: {reason}", provider=provider) from exc


def _reason(exc: Exception) -> str:
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
