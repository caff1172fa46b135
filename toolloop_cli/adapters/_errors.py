"""HTTP error answers → ``ApiError``, classified by one data table per provider.

The engine retries on ``ApiError.retryable`` alone, so the decision lives here as data, in the
order the providers' own SDKs apply it:

1. a ``x-should-retry: true|false`` header wins (the server knows best);
2. an error kind (``error.type`` or ``error.code``) listed as never retryable is final
   (OpenAI's ``insufficient_quota`` 429 will not heal by waiting);
3. otherwise the status decides: the listed statuses and, when the table says so, any 5xx.

``retry-after-ms`` and ``retry-after`` (seconds or an HTTP date) become ``retry_after_s``.
The provider's message is kept for debugging only; it never becomes business state.
Anthropic and Gemini tables go beside ``OPENAI`` in ``TABLES``.
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toolloop_cli.engine.types import ApiError

__all__ = [
    "OPENAI",
    "TABLES",
    "ErrorTable",
    "classify_body_failure",
    "classify_http_error",
    "retry_after_seconds",
]

#: Longest provider error text kept in ``ApiError.message``.
MAX_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class ErrorTable:
    """How one provider says "try again" and "do not"."""

    provider: str
    retry_statuses: frozenset[int]
    retry_server_errors: bool
    #: ``error.type`` / ``error.code`` values that are never retried, whatever the status
    never_retry_kinds: frozenset[str]
    #: in-body failure codes (a 200 answer that failed) that are worth retrying
    retry_body_codes: frozenset[str]


OPENAI = ErrorTable(
    provider="openai",
    retry_statuses=frozenset({408, 409, 429}),
    retry_server_errors=True,
    never_retry_kinds=frozenset({"insufficient_quota"}),
    retry_body_codes=frozenset({"server_error", "rate_limit_exceeded"}),
)

TABLES: Mapping[str, ErrorTable] = {"openai": OPENAI}


def classify_http_error(
    table: ErrorTable,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime | None = None,
) -> ApiError:
    """Classify an error answer; a body that is not the documented JSON still gives an error."""
    kind_type, code, message = _error_fields(body)
    return ApiError(
        status=status,
        type=kind_type,
        code=code,
        message=message,
        retryable=_retryable(table, status, headers, (kind_type, code)),
        retry_after_s=retry_after_seconds(headers, now=now),
    )


def classify_body_failure(table: ErrorTable, error: Any) -> ApiError:
    """Classify an in-body failure (``status: failed`` with ``error: {code, message}``)."""
    fields = error if isinstance(error, dict) else {}
    code = _text(fields.get("code"))
    return ApiError(
        type=_text(fields.get("type")),
        code=code,
        message=_clip(_text(fields.get("message")) or ""),
        retryable=code in table.retry_body_codes,
    )


def _retryable(
    table: ErrorTable, status: int, headers: Mapping[str, str], kinds: tuple[str | None, ...]
) -> bool:
    should = headers.get("x-should-retry", "").strip().lower()
    if should == "true":
        return True
    if should == "false":
        return False
    if any(kind in table.never_retry_kinds for kind in kinds if kind is not None):
        return False
    if status in table.retry_statuses:
        return True
    return table.retry_server_errors and status >= 500


def _error_fields(body: bytes) -> tuple[str | None, str | None, str]:
    """``(type, code, message)`` from ``{"error": {...}}``; the raw text when it is not that."""
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, None, _clip(body.decode("utf-8", errors="replace").strip())
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None, None, _clip(body.decode("utf-8", errors="replace").strip())
    # Gemini's google.rpc.Status puts the kind in "status"; OpenAI and Anthropic in "type".
    kind_type = _text(error.get("type")) or _text(error.get("status"))
    return kind_type, _text(error.get("code")), _clip(_text(error.get("message")) or "")


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """``retry-after-ms`` first, then ``retry-after`` as seconds or an HTTP date; never negative."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return max(millis / 1000.0, 0.0)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return max(seconds, 0.0)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    return max((when - current).total_seconds(), 0.0)


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _text(value: Any) -> str | None:
    """A scalar as text (Gemini sends numeric codes); anything else is absent."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"
