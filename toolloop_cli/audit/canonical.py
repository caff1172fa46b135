"""The hash contract: RFC 8785 canonical JSON, then SHA-256, written ``sha256:<hex>``.

Every hash toolloop stores or compares (requests, results, call bindings, registries,
argument digests, idempotency keys, the audit chain) goes through ``canonical_bytes``.
Changing this module changes every hash ever written: stores made before the change
would no longer verify. Do not change it; add a new, versioned function instead.

``fast_canonical_bytes`` is the same serialisation, faster: for values made only of
objects with ASCII keys, arrays, strings, safe integers, booleans and null (every audit
record) RFC 8785 output equals compact JSON with sorted keys, raw UTF-8 and JSON's short
escapes, which ``orjson`` writes (as ``json.dumps`` with those settings would, several times
faster); so for floats in the range where both write the same shortest digits. Anything
else (other floats, non-ASCII keys, large integers) goes through ``canonical_bytes``. A
property test holds the two byte-identical.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import rfc8785

from toolloop_cli.errors import CanonicalJSONError

__all__ = [
    "MAX_SAFE_INT",
    "CanonicalJSONError",
    "canonical_bytes",
    "canonical_text",
    "fast_canonical_bytes",
    "fast_sha256_of",
    "sha256_hex",
    "sha256_of",
    "uncanonical_path",
]


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) serialisation of a JSON value."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as exc:
        raise CanonicalJSONError(f"value has no canonical JSON form: {exc}") from exc


def canonical_text(value: Any) -> str:
    """``canonical_bytes`` as text (through ``fast_canonical_bytes``, byte for byte the same)."""
    return fast_canonical_bytes(value).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_of(value: Any) -> str:
    """``sha256:<hex>`` of a JSON value's canonical bytes (through ``fast_canonical_bytes``,
    byte for byte the same)."""
    return sha256_hex(fast_canonical_bytes(value))


#: the largest integer a canonical JSON number holds exactly (RFC 8785: an IEEE double)
MAX_SAFE_INT = 2**53 - 1


def _plain(value: Any) -> bool:
    """True when compact, key-sorted JSON is ``value`` exactly as RFC 8785 writes it (see the
    module doc).

    Floats are plain when Python's shortest repr is ECMAScript's too: not integral (ES writes
    ``5``, Python ``5.0``) and between 1e-4 and 1e16 in magnitude, where neither uses an
    exponent. Loops rather than ``all()`` over generators: this runs on every audit row.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INT <= value <= MAX_SAFE_INT)
    if kind is float:
        return 1e-4 <= abs(value) < 1e16 and not value.is_integer()
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or not k.isascii():  # ASCII keys: UTF-16 order = code points
                return False
            t = type(v)
            if t is str or v is None or (t is int and -MAX_SAFE_INT <= v <= MAX_SAFE_INT):
                continue
            if not _plain(v):
                return False
        return True
    if kind is list or kind is tuple:
        for v in value:
            t = type(v)
            if t is str or (t is int and -MAX_SAFE_INT <= v <= MAX_SAFE_INT):
                continue
            if not _plain(v):
                return False
        return True
    return False


def fast_canonical_bytes(value: Any) -> bytes:
    """``canonical_bytes(value)``, byte for byte, about four times faster on plain values."""
    try:
        if _plain(value):
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (RecursionError, ValueError, TypeError):
        pass  # too deep, circular, a lone surrogate (orjson's error is a TypeError): the
        # reference path says what is wrong
    return canonical_bytes(value)


def fast_sha256_of(value: Any) -> str:
    """``sha256_of(value)`` through ``fast_canonical_bytes``."""
    return sha256_hex(fast_canonical_bytes(value))


def uncanonical_path(value: Any) -> str | None:
    """Where in ``value`` the first part with no canonical form is (``[1].input.amount``),
    for a message; None when every leaf has one (then the whole is too deep). Iterative, so
    nesting that defeats the serialiser does not defeat this."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            children = [(f"{path}.{key}" if path else str(key), v) for key, v in node.items()]
            stack.extend(reversed(children))
        elif isinstance(node, list | tuple):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))
        else:
            try:
                canonical_bytes(node)
            except CanonicalJSONError:
                return path or "the value"
    return None
