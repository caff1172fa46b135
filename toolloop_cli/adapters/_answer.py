"""The one path every adapter takes from an HTTP answer to a ``ModelTurn``.

A streamed 2xx answer goes through the provider's stream handler; any other answer is read
under the body cap; a non-2xx status is an API_FAILURE classified by the provider's error
table (never raised); a 2xx body that is an error envelope is classified like an error event
in a stream; any other 2xx body is handed to the provider's parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolloop_cli.engine.types import MAX_BODY_BYTES, HttpResponse, ModelTurn, TurnOutcome, Usage
from toolloop_cli.errors import MalformedProviderPayload

from ._errors import ErrorTable, classify_http_error, classify_stream_error, http_detail
from ._json import load_json_body
from ._stream import StreamHandler, is_event_stream, read_capped, run_stream

__all__ = ["MAX_BODY_BYTES", "MAX_TOKEN_COUNT", "UNFINISHED", "parse_answer", "usage_from"]

#: why an answer still ``queued`` or ``in_progress`` (background mode) ends the run INCOMPLETE:
#: not an error, only no end yet; a recording whose last poll still says so stops there
UNFINISHED = (
    "a background answer with no end yet (no later poll says how it ended); nothing to act on"
)


def parse_answer(
    response: HttpResponse,
    *,
    provider: str,
    table: ErrorTable,
    stream: Callable[[], StreamHandler],
    parse: Callable[[Any], ModelTurn],
    request_id_header: str | None = None,
) -> ModelTurn:
    """Classify one answer; ``stream`` builds the provider's handler only when it streams."""
    ok = 200 <= response.status < 300
    if ok and is_event_stream(response):
        return run_stream(response, stream(), provider, MAX_BODY_BYTES)
    body = read_capped(response, provider, MAX_BODY_BYTES)
    if not ok:
        error = classify_http_error(table, response.status, response.headers, body)
        request_id = response.headers.get(request_id_header) if request_id_header else None
        return ModelTurn(
            outcome=TurnOutcome.API_FAILURE,
            finish_reason=f"http_{response.status}",
            error=error,
            detail=http_detail(error, request_id),
        )
    data = load_json_body(body, provider)
    if _error_envelope(data):
        error = classify_stream_error(table, data["error"])
        return ModelTurn(
            outcome=TurnOutcome.API_FAILURE,
            finish_reason="error",
            error=error,
            detail=f"an error answer under HTTP {response.status}: "
            f"{error.code or error.type or 'no code'}",
        )
    return parse(data)


#: keys only an answer has (an error envelope has none of them)
_ANSWER_KEYS = frozenset({"id", "output", "outputs", "candidates", "content", "status"})


def _error_envelope(data: Any) -> bool:
    """Whether a 2xx body is an error, as the provider writes one under a 4xx or 5xx
    (``{"type": "error", "error": {...}}``, ``{"error": {...}}``): a proxy or gateway may
    pass it on with 200. It is judged by its kind, as an error event in a stream is."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("error"), dict)
        and not (data.keys() & _ANSWER_KEYS)
    )


#: Largest token count accepted: beyond 2**53 - 1 a JSON number has no interoperable integer.
MAX_TOKEN_COUNT = 2**53 - 1


def usage_from(
    raw: Any, input_key: str, output_key: str, total_key: str | None, provider: str
) -> Usage:
    """Token counts under the provider's key names, checked: usage decides BUDGET_EXHAUSTED.

    An absent or null usage object or count is 0 (real answers leave counts out or null). A
    count that is there but is not a whole number in ``0..MAX_TOKEN_COUNT`` (a negative, a
    fraction, a bool, a string, a huge value) would let an answer shrink or blow up the token
    budget, so the answer is malformed. Without a total key (Anthropic reports none) the total
    is input + output.
    """
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        raise MalformedProviderPayload(f"{provider}: usage is not an object", provider=provider)
    tokens_in = _token_count(raw, input_key, provider)
    tokens_out = _token_count(raw, output_key, provider)
    total = _token_count(raw, total_key, provider) if total_key else tokens_in + tokens_out
    return Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=total)


def _token_count(raw: dict[str, Any], key: str, provider: str) -> int:
    """One count: absent or null is 0; anything but a whole number in range is malformed."""
    value = raw.get(key)
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
        raise MalformedProviderPayload(
            f"{provider}: usage {key} is {_shown(value)}, not a token count in "
            f"0..{MAX_TOKEN_COUNT}",
            provider=provider,
        )
    return value


def _shown(value: Any) -> str:
    """A short rendering of a bad count for the error (it may be a huge string)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
