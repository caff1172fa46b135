"""The hash contract: RFC 8785 canonical JSON, then SHA-256, written ``sha256:<hex>``.

Every hash toolloop stores or compares (requests, results, call bindings, registries,
argument digests, idempotency keys, the audit chain) goes through ``canonical_bytes``.
Changing this module changes every hash ever written: stores made before the change
would no longer verify. Do not change it; add a new, versioned function instead.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from toolloop_cli.errors import ToolloopError

__all__ = ["CanonicalJSONError", "canonical_bytes", "canonical_text", "sha256_hex", "sha256_of"]


class CanonicalJSONError(ToolloopError):
    """A value that has no canonical JSON form (NaN, infinity, huge ints, non-JSON types)."""


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
