"""The one path every adapter takes from an HTTP answer to a ``ModelTurn``.

A streamed 2xx answer goes through the provider's stream handler; any other answer is read
under the body cap; a non-2xx status is an API_FAILURE classified by the provider's error
table (never raised); a 2xx body is handed to the provider's parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolloop_cli.engine.types import MAX_BODY_BYTES, HttpResponse, ModelTurn, TurnOutcome, Usage

from ._errors import ErrorTable, classify_http_error, http_detail
from ._json import load_json_body
from ._stream import StreamHandler, is_event_stream, read_capped, run_stream

__all__ = ["MAX_BODY_BYTES", "parse_answer", "usage_from"]


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
    return parse(load_json_body(body, provider))


def usage_from(raw: Any, input_key: str, output_key: str, total_key: str | None = None) -> Usage:
    """Token counts under the provider's key names; a missing or non-integer count is 0.

    Usage never decides an outcome, so a malformed count is not a malformed answer. Without a
    total key (Anthropic reports none) the total is input + output.
    """
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    tokens_in, tokens_out = count(input_key), count(output_key)
    total = count(total_key) if total_key else tokens_in + tokens_out
    return Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=total)
