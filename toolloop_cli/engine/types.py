"""Neutral types the engine works with; adapters translate provider shapes into these.

Invariants the adapters keep:
- ``ProposedCall.call_id`` is the id the provider expects back with the result (OpenAI
  ``call_id``, Anthropic ``tool_use.id``, Gemini ``function_call.id``), never an item id;
- ``ProposedCall.raw_arguments`` is the exact argument text the provider sent (for providers
  that send an object, its JSON text as received); ``arguments`` is only set when that text
  parsed as a JSON object, and is never repaired;
- a turn whose ``outcome`` is not ``TOOL_PROPOSALS`` has its calls executed by nobody.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

JSONObject = dict[str, Any]

#: The most bytes of one answer that are read, kept or stored, streamed or not (decoded size).
MAX_BODY_BYTES = 16 * 1024 * 1024


class TurnOutcome(StrEnum):
    """What a model turn amounts to, whatever the provider called it."""

    FINAL_TEXT = "FINAL_TEXT"  # explicit successful completion with text
    TOOL_PROPOSALS = "TOOL_PROPOSALS"  # one or more tool calls, complete
    REFUSAL = "REFUSAL"  # the provider or model refused
    TRUNCATED = "TRUNCATED"  # max tokens, content filter, context window, cut stream
    API_FAILURE = "API_FAILURE"  # an error answer (HTTP or in-body)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(_Model):
    """Token counts as the provider reported them (0 when it did not). Strict and never
    negative: the adapters refuse any other count, so a stored one is taken as it is or
    refused (a tampered ``usage_json``), never coerced."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    total_tokens: int = Field(0, ge=0)


class ApiError(_Model):
    """A provider error, classified. ``message`` is for debugging only, never business state."""

    status: int | None = None
    type: str | None = None
    code: str | None = None
    message: str = ""
    retryable: bool = False
    retry_after_s: float | None = None


class ProposedCall(_Model):
    """One tool call as the model proposed it.

    ``arguments`` and ``argument_error`` both None: the text is not parsed yet (an adapter
    whose provider sends arguments as text leaves that to the engine, which parses only text
    under the tool's byte cap).
    """

    call_id: str
    name: str
    raw_arguments: str
    arguments: JSONObject | None = None
    argument_error: str | None = None
    item_id: str | None = None
    #: the provider sent no id: the adapter made this one up from the answer alone (and
    #: never sends it back), so the engine may lengthen it to keep call ids unique
    id_synthesised: bool = False


class ModelTurn(_Model):
    """One parsed model answer."""

    outcome: TurnOutcome
    response_id: str | None = None
    finish_reason: str | None = None
    text: str | None = None
    calls: tuple[ProposedCall, ...] = ()
    usage: Usage = Field(default_factory=Usage)
    error: ApiError | None = None
    model: str | None = None
    #: provider conversation items this answer adds (carried forward unchanged; opaque here)
    output_items: tuple[JSONObject, ...] = ()
    #: why a TRUNCATED / REFUSAL / API_FAILURE happened, in words for an operator
    detail: str | None = None


#: The arguments of a call to a free-text tool (OpenAI's ``custom`` tools): the text as ``input``.
TEXT_INPUT: JSONObject = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
    "additionalProperties": False,
}

#: declaration types that are plain functions, not provider-defined tools (Anthropic may write
#: a function's type as ``custom``; OpenAI's ``custom`` is a free-text tool of its own)
FUNCTION_TYPES = frozenset({"function", "custom"})


class ToolSpec(_Model):
    """A tool as declared to a model.

    Without ``provider`` it is a function tool, which every adapter declares in its own shape.
    With it, ``declaration`` is that provider's own declaration, sent exactly as it is by that
    provider's adapter and by no other: a provider-defined tool (Anthropic's
    ``{"type": "memory_20250818", "name": "memory"}``) or a recorded declaration carrying
    fields toolloop does not write itself (``defer_loading``, ``cache_control``). The engine
    never reads either; ``parameters`` is still what calls are validated against.
    """

    name: str
    description: str = ""
    parameters: JSONObject
    provider: str | None = None
    declaration: JSONObject | None = None

    @property
    def provider_type(self) -> str | None:
        """The declaration's type when it is a provider-defined tool (None for a function)."""
        kind = self.declaration.get("type") if self.declaration else None
        if kind == "custom" and self.provider == "openai":
            return "custom"  # answered in its own item, not as a function's output
        return kind if isinstance(kind, str) and kind not in FUNCTION_TYPES else None

    @model_serializer(mode="wrap")
    def _without_none(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a function tool dumps (and so hashes and stores) as it did before these fields
        dumped = handler(self)
        if isinstance(dumped, dict):
            for key in ("provider", "declaration"):
                if dumped.get(key) is None:
                    dumped.pop(key, None)
        return dumped


class ResultForModel(_Model):
    """The ``model_result`` projection of one call's result, ready to render for a provider."""

    response_id: str
    call_id: str
    name: str
    is_error: bool
    content: JSONObject
    #: the provider-defined tool type the call was made to (``ToolInfo.provider_type``), for
    #: adapters whose API answers such a call in its own item (OpenAI's ``tool_search_output``)
    provider_type: str | None = None


class ModelSettings(_Model):
    """What an adapter needs, beyond the conversation, to build a request."""

    model: str
    max_output_tokens: int | None = None
    stream: bool = False
    instructions: str | None = None


class HttpRequest(_Model):
    """A provider request: the transport adds credentials, the body is exact JSON.

    ``time_left_s`` is the operation's time left when the engine sends it: a live transport
    ends the exchange then (``DeadlineExceeded``), however the answer trickles in.
    """

    method: str = "POST"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: JSONObject
    time_left_s: float | None = None


@dataclass
class HttpResponse:
    """A provider answer: status, headers (lower-case names) and the body bytes.

    A streamed answer has ``chunks`` (an iterator of raw byte chunks) instead of ``body``.
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: Iterator[bytes] | None = None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def read(self) -> bytes:
        """The whole body (drains ``chunks`` when streamed), unbounded: adapters read through
        ``read_capped`` instead; this is for bodies already in memory."""
        if self.chunks is not None:
            self.body = b"".join(self.chunks)
            self.chunks = None
        return self.body


@dataclass(frozen=True)
class ToolInfo:
    """What the engine needs to know of a registered tool (the registry owns the rest)."""

    name: str
    schema_version: str
    side_effecting: bool
    needs_approval: bool
    key_fields: tuple[str, ...] | None
    sha256: str
    max_argument_bytes: int
    has_reconcile: bool
    sequential: bool = False
    #: set for a provider-defined tool: its type (``memory_20250818``, ``tool_search``)
    provider_type: str | None = None
    #: how long its handler may run (None: not known here, e.g. a recording's tool)
    timeout_ms: int | None = None


@dataclass(frozen=True)
class CallContext:
    """The trusted context a handler runs under (never taken from model output)."""

    operation_id: str
    call_id: str
    idempotency_key: str
    tenant: str
    subject: str
    deadline: float  # epoch seconds
    timeout_ms: int | None = None  # the operation's cap on the tool's own timeout
    max_result_bytes: int | None = None  # the operation's cap on the tool's own result size


class ExecutionStatus(StrEnum):
    """How a handler run ended. The values are stored (a call's ``protected_audit``) and
    shown in JSON as they are: a member is its string."""

    OK = "ok"  # returned a JSON value within the size cap and the result schema
    TOOL_ERROR = "tool_error"  # raised ToolError: a business error the model is told
    FAILED = "failed"  # raised anything else, or returned something that is not JSON
    TIMED_OUT = "timed_out"  # overran its timeout or the operation's deadline
    RESULT_TOO_LARGE = "result_too_large"  # returned more bytes than its cap
    INVALID_RESULT = "invalid_result"  # returned a value outside its result_schema
    ESCALATE = "escalate"  # raised Escalate: a person must look


@dataclass(frozen=True)
class ToolExecution:
    """How one handler run ended (a recorded result replayed ends the same way)."""

    status: ExecutionStatus
    #: the JSON value the handler returned (status ok only), as its canonical JSON reads back
    value: Any = None
    #: for the model or the operator: the ToolError text, "<ExceptionType>: msg", the violations
    error: str | None = None
    #: UTF-8 bytes of the canonical JSON of the value
    result_bytes: int = 0
    duration_ms: float = 0.0

    def __post_init__(self) -> None:
        # a status given as its string is the member; any other string is refused here
        object.__setattr__(self, "status", ExecutionStatus(self.status))


@dataclass(frozen=True)
class RecordedResult:
    """One tool result as a recorded request carried it back to its model (for replays).

    ``call_id`` is None when the request named no call (generateContent's
    ``functionResponse`` often has only a ``name``); ``value`` is the JSON a text encodes,
    else the text or the content parts as sent; ``is_error`` is the request's own flag, None
    where the API has none.
    """

    call_id: str | None
    value: Any
    is_error: bool | None = None
    name: str | None = None
