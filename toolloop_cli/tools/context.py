"""What a tool handler is told about the call it runs, and how it reports a business error.

Handlers get a ``ToolContext`` rather than globals so the same function can serve many
operations, tenants and stores; the idempotency key in it is what makes a retried side
effect safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Escalate", "HandlerTimeout", "ToolContext", "ToolError"]


@dataclass(frozen=True)
class ToolContext:
    """The trusted facts about one call, built by the engine, never by the model."""

    operation_id: str
    call_id: str
    idempotency_key: str
    tenant: str
    subject: str
    #: epoch seconds (``time.time()`` scale) by which the whole operation must end
    deadline: float
    #: the registry name of the tool being run
    tool: str
    #: folder of the toolloop store; example handlers keep their own files here
    data_dir: Path
    #: the operation's cap on one result's canonical JSON bytes (the tool's own cap also applies)
    max_result_bytes: int | None = None
    #: the operation's cap on the tool's own timeout_ms
    timeout_ms: int | None = None


class ToolError(Exception):
    """Raised by a handler to report a business error; the message goes back to the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Escalate(Exception):
    """Raised by a handler to stop the operation for a person (ESCALATED) with a reason.

    Use it when the right next step is a human's, not the model's: a downstream in an unknown
    state, a request outside what the tool may decide. Nothing about the call is retried.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HandlerTimeout(Exception):
    """Raised by a handler that gave up on its downstream at the tool's timeout (and cancelled
    the request): the call timed out, like a handler the dispatcher stopped waiting for, so a
    side effect's outcome is unknown until it is reconciled; it is not a failure."""
