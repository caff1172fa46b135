"""What the store keeps about an operation, as neutral records the engine reads and writes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from .clock import MAX_SPAN_S
from .sources import Source
from .states import ApprovalStatus, CallState, OpState
from .types import ApiError, JSONObject, TurnOutcome, Usage


class Guards(BaseModel):
    """The loop guards of one operation, fixed when it starts (design.md §6).

    A count limit is the most allowed: with ``max_turns=4`` a fifth model turn is never
    requested, with ``max_tool_calls=3`` a fourth proposal that would run is not run.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    max_turns: int = Field(20, ge=1)
    max_tool_calls: int = Field(50, ge=0)
    max_calls_per_tool: dict[str, int] = Field(default_factory=dict)
    max_retries: int = Field(3, ge=0)
    deadline_s: float = Field(86_400.0, gt=0, le=MAX_SPAN_S)
    tool_timeout_ms: int | None = Field(None, ge=1)  # caps every tool's own timeout_ms
    max_input_tokens: int | None = Field(None, ge=0)
    max_output_tokens: int | None = Field(None, ge=0)
    max_total_tokens: int | None = Field(None, ge=0)
    max_cost_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    max_result_bytes: int = Field(65_536, ge=1)  # caps every tool's own max_result_bytes
    max_parallel: int = Field(4, ge=1)
    no_progress_after: int = Field(3, ge=2)  # the Nth identical tool + arguments proposal stops

    @classmethod
    def checked(cls, values: dict[str, Any]) -> Guards:
        """``values`` as guards; a ``ValueError`` naming the first bad one (``field: why``)
        otherwise, for a one-line refusal (a flag, a recording's guards)."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{where}: {first['msg']}") from None


class Counters(BaseModel):
    """Budget counters, persisted with the operation so resumes never reset them."""

    # strict: a stored count is taken as it is or refused ("3" and true are not 3 and 1), so
    # a budget is never checked against a value toolloop did not count
    model_config = ConfigDict(extra="forbid", strict=True)

    requests: NonNegativeInt = 0  # model requests sent, retries included
    turns: NonNegativeInt = 0  # model answers that were not API failures
    tool_calls: NonNegativeInt = 0  # handler runs started
    tool_calls_by_tool: dict[str, NonNegativeInt] = Field(default_factory=dict)
    retries: NonNegativeInt = 0
    input_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    total_tokens: NonNegativeInt = 0
    cost_usd: float = Field(0.0, ge=0, allow_inf_nan=False)
    #: signatures of the last turns' proposals, for A,B,A,B cycle detection (at most 3 kept)
    recent_turns: list[str] = Field(default_factory=list)


class OperationRecord(BaseModel):
    """One business task from start to its terminal state."""

    model_config = ConfigDict(extra="forbid")

    operation_id: str
    state: OpState
    task: str
    provider: str
    api_family: str
    model: str
    adapter_revision: str
    tenant: str
    subject: str
    registry_name: str
    registry_revision: str
    registry_path: str
    registry_sha256: str
    policy_revision: str
    settings: JSONObject
    #: where its model turns come from (its ``kind`` is the store's ``transport`` column)
    source: Source
    guards: Guards
    counters: Counters
    current_turn: int | None = None
    final_text: str | None = None
    reason: str | None = None
    created_at: str
    updated_at: str
    deadline_at: str
    #: ``Policy.policy_sha256`` of the registry it started under (None: made before the pin)
    policy_sha256: str | None = None
    #: what a replay found when it compared its requests with the recording (``requests``
    #: compared, ``divergences``), written once when the replay ends; None for other runs
    divergence_check: JSONObject | None = None

    @property
    def transport(self) -> str:
        """How its model turns arrive: ``transcript``, ``live``, ``scripted`` or ``replay``."""
        return self.source.kind


class TurnRecord(BaseModel):
    """One model request and its classified answer (a retry is a turn of its own)."""

    model_config = ConfigDict(extra="forbid")

    operation_id: str
    idx: int
    response_id: str | None
    outcome: TurnOutcome
    finish_reason: str | None
    text: str | None = None
    detail: str | None = None
    request_sha256: str
    response_sha256: str
    usage: Usage = Field(default_factory=Usage)
    error: ApiError | None = None
    created_at: str


class CallRecord(BaseModel):
    """One proposed tool call, its checks and its result."""

    model_config = ConfigDict(extra="forbid")

    operation_id: str
    turn_idx: int
    seq: int
    response_id: str
    call_id: str
    name: str
    raw_arguments: str
    arguments: JSONObject | None
    argument_error: str | None = None
    state: CallState
    idempotency_key: str | None = None
    arguments_sha256: str | None = None
    tool_sha256: str | None = None
    approval_id: str | None = None
    model_result: JSONObject | None = None
    protected_audit: JSONObject | None = None
    started_at: str | None = None
    finished_at: str | None = None
    #: set with every result (audit.binding): its hash, and its binding to this call and op
    result_sha256: str | None = None
    call_binding_sha256: str | None = None


class ApprovalRecord(BaseModel):
    """A request for one human decision over one call's exact arguments."""

    model_config = ConfigDict(extra="forbid")

    approval_id: str
    operation_id: str
    response_id: str
    call_id: str
    tool: str
    tenant: str
    requested_by: str
    status: ApprovalStatus
    arguments_sha256: str
    policy_revision: str
    tool_sha256: str
    requested_at: str
    expires_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    #: the canonical hash of the policy it was requested under, whose block the store keeps
    #: (None: requested before the pin, or under a recording's policy, which has no block)
    policy_sha256: str | None = None
