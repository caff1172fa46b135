"""The MODEL_REQUESTED step: guards, one request, and the answer's classification."""

from __future__ import annotations

from toolloop_cli.audit.canonical import (
    CanonicalJSONError,
    fast_canonical_bytes,
    sha256_hex,
    uncanonical_path,
)
from toolloop_cli.errors import (
    AdapterError,
    DeadlineExceeded,
    MalformedProviderPayload,
    TranscriptError,
)

from . import guards
from .clock import parse_iso
from .context import Deps, stop, transition
from .records import CallRecord, OperationRecord, TurnRecord
from .states import CallState, OpState
from .types import (
    MAX_BODY_BYTES,
    ApiError,
    HttpRequest,
    HttpResponse,
    ModelSettings,
    ModelTurn,
    TurnOutcome,
    Usage,
)

#: ``ApiError.type`` of a request cut by the operation's deadline
_DEADLINE = "deadline"
_CUT = "the model request in flight was cut"
#: Backoff between retries: base * 2**attempt, capped, with full jitter.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


def request_model(
    deps: Deps, op: OperationRecord
) -> tuple[OperationRecord, list[CallRecord] | None]:
    """Send the conversation to the model and persist its classified answer.

    Returns the operation and the calls the answer proposed (None when it proposed none).
    """
    guard = _budget_tripped(deps, op)
    if guard is not None:
        with deps.store.transaction():
            return stop(deps, op, OpState.BUDGET_EXHAUSTED, guard), None
    settings = ModelSettings(**op.settings)
    conversation = deps.store.conversation(op.operation_id)
    tools = deps.toolbox.specs()  # stored with the turn as sent, whatever the toolbox says later
    request = deps.adapter.build_request(conversation, tools, settings)
    time_left = (parse_iso(op.deadline_at) - deps.clock.now()).total_seconds()
    request = request.model_copy(update={"time_left_s": time_left})
    request_sha = deps.request_hasher.digest(op.operation_id, request.body, conversation)
    deps.store.release()  # what led to this request is committed (and told) before it is sent
    deps.on_event("request", {"turn": op.counters.requests, "request_sha256": request_sha})
    deps.failpoint("before_model_request")
    turn, body = _exchange(deps, request)
    idx = op.counters.requests
    record = TurnRecord(
        operation_id=op.operation_id,
        idx=idx,
        response_id=turn.response_id,
        outcome=turn.outcome,
        finish_reason=turn.finish_reason,
        text=turn.text,
        detail=turn.detail,
        request_sha256=request_sha,
        response_sha256=sha256_hex(body),
        usage=turn.usage,
        error=turn.error,
        created_at=deps.now_iso(),
    )
    duplicate = _duplicate_call_id(turn)
    if duplicate is not None:
        turn = ModelTurn(
            outcome=TurnOutcome.API_FAILURE,
            response_id=turn.response_id,
            finish_reason=turn.finish_reason,
            error=ApiError(type="malformed_payload", message=duplicate),
            detail=duplicate,
        )
        record = record.model_copy(
            update={"outcome": turn.outcome, "detail": duplicate, "error": turn.error}
        )
    calls: list[CallRecord] | None = None
    with deps.store.transaction():
        deps.store.insert_turn(record, len(conversation), body, tools=tools)
        op = _count(deps, op, turn)
        if turn.error is not None and turn.error.type == _DEADLINE:
            # the deadline guard, tripped while the request was in flight
            late = guards.past_deadline(op, parse_iso(op.deadline_at))
            op = stop(deps, op, OpState.BUDGET_EXHAUSTED, f"{late}; {_CUT}")
        else:
            op, calls = _apply_outcome(deps, op, turn, idx)
    deps.failpoint("after_turn_commit")
    if op.state is OpState.MODEL_REQUESTED:
        deps.store.release()  # a failed request is committed before the pause before a retry
        _backoff(deps, op, turn)
    return op, calls


def _exchange(deps: Deps, request: HttpRequest) -> tuple[ModelTurn, bytes]:
    """One request/answer; transport and payload errors become API_FAILURE turns.

    An answer cut by the deadline keeps no body: it is no answer (a recording skips it too).
    """
    try:
        response = deps.transport.send(request)
    except TranscriptError as exc:
        return _failure(None, "transcript", str(exc), retryable=False), b""
    except DeadlineExceeded as exc:
        return _failure(None, _DEADLINE, str(exc), retryable=False), b""
    except AdapterError as exc:
        return _failure(exc.status, "transport", str(exc), exc.retryable), b""
    try:
        turn = deps.adapter.parse_response(response, on_event=deps.on_event)
    except DeadlineExceeded as exc:
        return _failure(response.status, _DEADLINE, str(exc), retryable=False), b""
    except MalformedProviderPayload as exc:
        return _failure(response.status, "malformed_payload", str(exc), False), _body(response)
    except AdapterError as exc:
        return _failure(exc.status, "adapter", str(exc), exc.retryable), _body(response)
    try:  # stored content-addressed: an item without a canonical form (1e999999) cannot be
        fast_canonical_bytes(list(turn.output_items))
    except CanonicalJSONError as exc:
        where = uncanonical_path(list(turn.output_items)) or "an item nested too deep"
        message = (
            f"{deps.adapter.provider}: the answer cannot be kept and audited as it came: "
            f"output item {where} {str(exc).removeprefix('value ')}; nothing of it runs"
        )
        return _failure(response.status, "malformed_payload", message, False), _body(response)
    return turn, _body(response)


def _body(response: HttpResponse) -> bytes:
    """What the store keeps of an answer: at most its first ``MAX_BODY_BYTES``."""
    return response.body[:MAX_BODY_BYTES] if response.chunks is None else b""


def _failure(status: int | None, kind: str, message: str, retryable: bool) -> ModelTurn:
    return ModelTurn(
        outcome=TurnOutcome.API_FAILURE,
        error=ApiError(status=status, type=kind, message=message, retryable=retryable),
        detail=message,
    )


def _duplicate_call_id(turn: ModelTurn) -> str | None:
    seen: set[str] = set()
    for call in turn.calls:
        if call.call_id in seen:
            return f"the response proposes call id {call.call_id!r} twice"
        seen.add(call.call_id)
    return None


def _budget_tripped(deps: Deps, op: OperationRecord) -> str | None:
    return guards.before_model_request(op, deps.clock.now())


def _count(deps: Deps, op: OperationRecord, turn: ModelTurn) -> OperationRecord:
    counters = op.counters.model_copy(
        update={
            "requests": op.counters.requests + 1,
            "turns": op.counters.turns + (turn.outcome is not TurnOutcome.API_FAILURE),
            "input_tokens": op.counters.input_tokens + turn.usage.input_tokens,
            "output_tokens": op.counters.output_tokens + turn.usage.output_tokens,
            "total_tokens": op.counters.total_tokens + _total(turn.usage),
            "cost_usd": round(op.counters.cost_usd + deps.cost_of(op.model, turn.usage), 9),
        }
    )
    # written by the transition that always follows, in the same transaction
    return op.model_copy(update={"counters": counters})


def _total(usage: Usage) -> int:
    """The answer's total: the provider's, which may count more than input and output
    (reasoning, cached or tool-use tokens), never less than their sum: a total reported
    below it would let ``max_total_tokens`` be passed unnoticed."""
    return max(usage.total_tokens, usage.input_tokens + usage.output_tokens)


def _apply_outcome(
    deps: Deps, op: OperationRecord, turn: ModelTurn, idx: int
) -> tuple[OperationRecord, list[CallRecord] | None]:
    """Persist what the answer means (inside the turn's transaction)."""
    match turn.outcome:
        case TurnOutcome.FINAL_TEXT:
            deps.store.append_items(op.operation_id, turn.output_items)
            final = transition(
                deps, op, OpState.COMPLETED, turn.finish_reason, final_text=turn.text or ""
            )
            return final, None
        case TurnOutcome.REFUSAL:
            why = turn.detail or turn.text or "refused"
            return transition(deps, op, OpState.REFUSED, why), None
        case TurnOutcome.TRUNCATED:
            reason = turn.detail or f"truncated ({turn.finish_reason})"
            return transition(deps, op, OpState.INCOMPLETE, reason), None
        case TurnOutcome.API_FAILURE:
            return _after_failure(deps, op, turn), None
        case TurnOutcome.TOOL_PROPOSALS:
            response_id = turn.response_id or f"turn-{idx}"
            ids = _call_ids(deps, op, turn, idx)
            repeated = _recorded_again(deps, op, response_id, ids)
            if repeated is not None:  # not a new answer: nothing of it is kept or run
                return transition(deps, op, OpState.FAILED, repeated), None
            deps.store.append_items(op.operation_id, turn.output_items)
            calls = [
                CallRecord(
                    operation_id=op.operation_id,
                    turn_idx=idx,
                    seq=seq,
                    response_id=response_id,
                    call_id=ids[seq],
                    name=proposed.name,
                    raw_arguments=proposed.raw_arguments,
                    arguments=proposed.arguments,
                    argument_error=proposed.argument_error,
                    state=CallState.PROPOSED,
                )
                for seq, proposed in enumerate(turn.calls)
            ]
            for call in calls:
                deps.store.insert_call(call)
            reason = f"{len(turn.calls)} call(s) proposed"
            return transition(deps, op, OpState.VALIDATING, reason, current_turn=idx), calls


def _call_ids(deps: Deps, op: OperationRecord, turn: ModelTurn, idx: int) -> list[str]:
    """The answer's call ids; ids the adapter made up name their turn when they must.

    A made-up id depends on the answer alone, so the same call in a later identical answer
    would get it again. Without a response id it always names the turn. With one, it names
    the turn only when an earlier turn of this response already holds it: a gateway that sends
    the same ``responseId`` with every answer is not repeating an answer whose calls carry no
    id of the provider's. The suffix keeps the id's start, and a made-up id is never sent.
    """
    ids = [proposed.call_id for proposed in turn.calls]
    made_up = [p.call_id for p in turn.calls if p.id_synthesised]
    if not made_up:
        return ids
    if turn.response_id is not None:
        taken = deps.store.calls_of_response(op.operation_id, turn.response_id, made_up)
        if not taken:
            return ids
    return [f"{p.call_id}_t{idx}" if p.id_synthesised else p.call_id for p in turn.calls]


def _recorded_again(
    deps: Deps, op: OperationRecord, response_id: str, ids: list[str]
) -> str | None:
    """Why the answer is a malformed payload: a call it proposes is already recorded.

    The same (response id, call id) as an earlier turn's call is not a new answer; storing it
    would fail, and leaving the operation in MODEL_REQUESTED would re-send the request on
    every resume. It is answered like a response proposing one call id twice: FAILED.
    """
    for earlier in deps.store.calls_of_response(op.operation_id, response_id, ids):
        return (
            f"malformed payload: the answer repeats call {earlier.call_id!r} of response "
            f"{response_id!r}, already recorded in turn {earlier.turn_idx}; no call was run"
        )
    return None


def _after_failure(deps: Deps, op: OperationRecord, turn: ModelTurn) -> OperationRecord:
    error = turn.error or ApiError(message=turn.detail or "API failure")
    what = error.message or error.type or "API failure"
    if error.retryable and op.counters.retries < op.guards.max_retries:
        ended = deps.retry_ends(op)
        if ended is not None:
            return transition(deps, op, OpState.FAILED, f"{what}; {ended}")
        counters = op.counters.model_copy(update={"retries": op.counters.retries + 1})
        reason = f"retry {counters.retries}/{op.guards.max_retries} after: {what}"
        return transition(deps, op, OpState.MODEL_REQUESTED, reason, counters=counters)
    if error.retryable:
        what = f"retries exhausted ({op.guards.max_retries}): {what}"
    return transition(deps, op, OpState.FAILED, what)


def _backoff(deps: Deps, op: OperationRecord, turn: ModelTurn) -> None:
    """Wait before a retry: the provider's retry-after, else capped exponential with jitter."""
    attempt = op.counters.retries
    delay = deps.rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt))
    if turn.error is not None and turn.error.retry_after_s is not None:
        delay = max(delay, turn.error.retry_after_s)
    remaining = (parse_iso(op.deadline_at) - deps.clock.now()).total_seconds()
    delay = max(0.0, min(delay, remaining))
    if delay:
        deps.on_event("backoff", {"seconds": delay})
        deps.sleep(delay)
