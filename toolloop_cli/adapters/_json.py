"""Provider answer bodies as strict JSON: anything else is a malformed payload."""

from __future__ import annotations

from typing import Any

from toolloop_cli.errors import MalformedProviderPayload
from toolloop_cli.strict_json import parse_arguments, strict_loads, why

__all__ = ["load_json_body", "parse_arguments"]


def load_json_body(data: bytes, provider: str) -> Any:
    """Decode a provider answer body (UTF-8 JSON); anything else is a malformed payload."""
    try:
        return strict_loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        reason = f"body is not UTF-8 (byte {exc.start})"
        raise MalformedProviderPayload(f"{provider}: {reason}", provider=provider) from exc
    except (ValueError, RecursionError) as exc:
        reason = f"body is not acceptable JSON ({why(exc)})"
        raise MalformedProviderPayload(f"{provider}: {reason}", provider=provider) from exc
