"""HTTP error answers → ``ApiError``, classified by one data table per provider.

The engine retries on ``ApiError.retryable`` alone, so the decision lives here as data, in the
order the providers' own SDKs apply it:

1. a ``x-should-retry: true|false`` header wins (the server knows best);
2. an error kind (``error.type`` or ``error.code``) listed as never retryable is final
   (OpenAI's ``insufficient_quota`` 429 will not heal by waiting);
3. otherwise the status decides: the listed statuses and, when the table says so, any 5xx.

``retry-after-ms`` and ``retry-after`` (seconds or an HTTP date) become ``retry_after_s``; a
Gemini ``RetryInfo.retryDelay`` in the body counts when no header says. The error kinds looked
at are ``error.type``, ``error.code``, ``error.status`` (google.rpc), Anthropic's
``error.details.error_code`` (the spend-limit 429) and google ``details[].reason``.
The provider's message is kept for debugging only; it never becomes business state.

Errors that arrive *inside* a stream after HTTP 200 (``classify_stream_error``) are judged by
their kind alone: ``retry_body_codes`` lists the kinds worth another attempt.
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
    "ANTHROPIC",
    "GEMINI",
    "OPENAI",
    "TABLES",
    "ErrorTable",
    "classify_body_failure",
    "classify_http_error",
    "classify_stream_error",
    "http_detail",
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

#: 529 is Anthropic's "overloaded"; a spend-limit 429 and billing errors never heal by waiting.
ANTHROPIC = ErrorTable(
    provider="anthropic",
    retry_statuses=frozenset({408, 409, 429, 529}),
    retry_server_errors=True,
    never_retry_kinds=frozenset(
        {"billing_error", "enforced_spend_limit_reached", "spend_limit_reached"}
    ),
    retry_body_codes=frozenset(
        {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
    ),
)

#: Both Gemini APIs: google.rpc statuses (``UNAVAILABLE``) and the Interactions string codes.
GEMINI = ErrorTable(
    provider="gemini",
    retry_statuses=frozenset({408, 409, 429}),
    retry_server_errors=True,
    never_retry_kinds=frozenset({"BILLING_DISABLED", "API_KEY_INVALID", "insufficient_quota"}),
    retry_body_codes=frozenset(
        {
            "RESOURCE_EXHAUSTED",
            "UNAVAILABLE",
            "INTERNAL",
            "DEADLINE_EXCEEDED",
            "resource_exhausted",
            "unavailable",
            "internal",
            "deadline_exceeded",
            "gateway_timeout",
            "rate_limit_exceeded",
            "overloaded",
        }
    ),
)

TABLES: Mapping[str, ErrorTable] = {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI}


def classify_http_error(
    table: ErrorTable,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime | None = None,
) -> ApiError:
    """Classify an error answer; a body that is not the documented JSON still gives an error."""
    kind_type, code, message, extra = _error_fields(body)
    retry_after = retry_after_seconds(headers, now=now)
    if retry_after is None:
        retry_after = _body_retry_delay(body)
    return ApiError(
        status=status,
        type=kind_type,
        code=code,
        message=message,
        retryable=_retryable(table, status, headers, (kind_type, code, *extra)),
        retry_after_s=retry_after,
    )


def http_detail(error: ApiError, request_id: str | None) -> str:
    """One line for an operator: status, kind, whether it will be retried, the request id."""
    kind = error.code or error.type or "error"
    retry = "retryable" if error.retryable else "not retryable"
    where = f", request {request_id}" if request_id else ""
    return f"HTTP {error.status} {kind} ({retry}{where})"


def classify_stream_error(table: ErrorTable, error: Any) -> ApiError:
    """An error event inside a stream (HTTP 200 already sent), judged by its kind.

    ``error`` is the event's ``error`` object (or the flat event itself). A numeric google.rpc
    ``code`` is read like an HTTP status.
    """
    fields = error if isinstance(error, dict) else {}
    kind_type = _text(fields.get("type")) or _text(fields.get("status"))
    code = _text(fields.get("code"))
    kinds = [k for k in (kind_type, code) if k is not None]
    if any(kind in table.never_retry_kinds for kind in kinds):
        retryable = False
    elif any(kind in table.retry_body_codes for kind in kinds):
        retryable = True
    elif code is not None and code.isdigit():
        status = int(code)
        retryable = status in table.retry_statuses or (table.retry_server_errors and status >= 500)
    else:
        retryable = False
    return ApiError(
        type=kind_type,
        code=code,
        message=_clip(_text(fields.get("message")) or ""),
        retryable=retryable,
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


def _error_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else None


def _error_fields(body: bytes) -> tuple[str | None, str | None, str, tuple[str, ...]]:
    """``(type, code, message, other kinds)`` from ``{"error": {...}}``; else the raw text."""
    error = _error_object(body)
    if error is None:
        return None, None, _clip(body.decode("utf-8", errors="replace").strip()), ()
    # Gemini's google.rpc.Status puts the kind in "status"; OpenAI and Anthropic in "type".
    kind_type = _text(error.get("type")) or _text(error.get("status"))
    extra: list[str] = []
    details = error.get("details")
    if isinstance(details, dict):  # Anthropic: error.details.error_code
        extra.extend(k for k in (_text(details.get("error_code")),) if k is not None)
    elif isinstance(details, list):  # google.rpc: ErrorInfo.reason
        for detail in details:
            reason = _text(detail.get("reason")) if isinstance(detail, dict) else None
            if reason is not None:
                extra.append(reason)
    message = _clip(_text(error.get("message")) or "")
    return kind_type, _text(error.get("code")), message, tuple(extra)


def _body_retry_delay(body: bytes) -> float | None:
    """A google.rpc ``RetryInfo.retryDelay`` (``"36s"``, ``"0.5s"``) in seconds."""
    error = _error_object(body)
    details = error.get("details") if error is not None else None
    if not isinstance(details, list):
        return None
    for detail in details:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            seconds = _number(delay[:-1])
            if seconds is not None:
                return max(seconds, 0.0)
    return None


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
