"""Identifiers: operation and approval ids, idempotency keys, argument digests.

The idempotency key names a business intent, so it is derived from the operation, the tool,
its schema version and the canonical values of the tool's declared intent fields, never
from the call id: a re-proposal of the same intent under a new call id gets the same key.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from toolloop_cli.audit.canonical import sha256_of


def new_operation_id() -> str:
    """A fresh ``op_`` id (128 random bits)."""
    return "op_" + secrets.token_hex(16)


def new_approval_id() -> str:
    """A fresh ``apr_`` id (128 random bits), unguessable across tenants."""
    return "apr_" + secrets.token_hex(16)


def arguments_digest(arguments: Any) -> str:
    """``sha256:`` over the canonical arguments: what an approval is bound to."""
    return sha256_of(arguments)


def idempotency_key(
    operation_id: str,
    tool: str,
    schema_version: str,
    arguments: dict[str, Any],
    key_fields: Sequence[str] | None,
) -> str:
    """``idk_`` + hex digest of (operation, tool, schema version, intent field values).

    With no declared ``key_fields`` every argument is part of the intent. A declared field
    that is absent counts as JSON null, so two proposals differing only there share a key.
    """
    if key_fields:
        intent: Any = {name: arguments.get(name) for name in key_fields}
    else:
        intent = arguments
    digest = sha256_of(
        {
            "operation_id": operation_id,
            "tool": tool,
            "schema_version": schema_version,
            "intent": intent,
        }
    )
    return "idk_" + digest.removeprefix("sha256:")[:40]
