"""The hash contract: RFC 8785 canonical JSON, then SHA-256, written ``sha256:<hex>``.

Every hash toolloop stores or compares (requests, results, call bindings, registries,
argument digests, idempotency keys, the audit chain) goes through ``canonical_bytes``.
Changing this module changes every hash ever written: stores made before the change
would no longer verify. Do not change it; add a new, versioned function instead.

``fast_canonical_bytes`` is the same serialisation, faster: for values made only of
objects with ASCII keys, arrays, strings, safe integers, booleans and null (every audit
record) RFC 8785 output equals ``json.dumps`` with sorted keys and no whitespace, so it uses
that; anything else (floats, non-ASCII keys) goes through ``canonical_bytes``. A property
test holds the two byte-identical.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from toolloop_cli.errors import CanonicalJSONError

__all__ = [
    "CanonicalJSONError",
    "canonical_bytes",
    "canonical_text",
    "fast_canonical_bytes",
    "fast_sha256_of",
    "sha256_hex",
    "sha256_of",
]


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) serialisation of a JSON value."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as exc:
        raise CanonicalJSONError(f"value has no canonical JSON form: {exc}") from exc


def canonical_text(value: Any) -> str:
    """``canonical_bytes`` as text."""
    return canonical_bytes(value).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_of(value: Any) -> str:
    """``sha256:<hex>`` of a JSON value's canonical bytes."""
    return sha256_hex(canonical_bytes(value))


_SAFE_INT = 2**53 - 1


def _plain(value: Any) -> bool:
    """True when ``json.dumps`` writes ``value`` exactly as RFC 8785 does (see module doc)."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if kind is dict:
        return all(
            type(k) is str and k.isascii() and _plain(v)
            for k, v in value.items()  # ASCII keys: UTF-16 order is code-point order
        )
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


def fast_canonical_bytes(value: Any) -> bytes:
    """``canonical_bytes(value)``, byte for byte, about four times faster on plain values."""
    if _plain(value):
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: let the reference path reject it
            pass
    return canonical_bytes(value)


def fast_sha256_of(value: Any) -> str:
    """``sha256_of(value)`` through ``fast_canonical_bytes``."""
    return sha256_hex(fast_canonical_bytes(value))
