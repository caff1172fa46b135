"""The ``model_result`` envelopes: what a model is told about each call.

Every call of a turn gets exactly one envelope, success or error. Success carries the
handler's value under ``result``; an error carries a stable ``code`` and a message meant for
the model. Unexpected handler exceptions are not shown to the model: their text stays in
``protected_audit``.
"""

from __future__ import annotations

from typing import Any

from .types import JSONObject

#: The code of the envelope a call whose side effect may or may not have happened answers with.
OUTCOME_UNKNOWN = "outcome_unknown"


def ok(value: Any, **extra: Any) -> JSONObject:
    """A successful result."""
    return {"ok": True, "result": value, **extra}


def error(code: str, message: str) -> JSONObject:
    """An error the model can read and recover from."""
    return {"ok": False, "error": {"code": code, "message": message}}


def is_error(envelope: JSONObject) -> bool:
    return envelope.get("ok") is not True


def unknown_tool(name: str) -> JSONObject:
    return error("unknown_tool", f"there is no tool named {name!r}; use one of the declared tools")


def invalid_json(detail: str) -> JSONObject:
    return error("invalid_arguments", f"arguments are not a valid JSON object: {detail}")


def invalid_arguments(problems: list[str]) -> JSONObject:
    return error("invalid_arguments", "arguments do not match the schema: " + "; ".join(problems))


def arguments_too_large(size: int, limit: int) -> JSONObject:
    return error("arguments_too_large", f"arguments are {size} bytes, over the limit of {limit}")


def denied(by: str | None, reason: str | None) -> JSONObject:
    who = f" by {by}" if by else ""
    why = f": {reason}" if reason else ""
    return error("denied", f"the call was denied{who}{why}")


def expired(expires_at: str) -> JSONObject:
    return error(
        "approval_expired",
        f"the approval window closed at {expires_at} before the call could run; it was not run",
    )


def not_executed(reason: str) -> JSONObject:
    return error("not_executed", f"the call was not run: {reason}")


def outcome_unknown(message: str) -> JSONObject:
    return error(OUTCOME_UNKNOWN, message)


def code(envelope: JSONObject | None) -> str | None:
    """The error code of an error envelope (None for a success or no envelope)."""
    err = envelope.get("error") if isinstance(envelope, dict) else None
    value = err.get("code") if isinstance(err, dict) else None
    return value if isinstance(value, str) else None
