"""RESULTS_READY: results reach the model only once they are re-bound to their calls.

Apart from the steps that write results, so the check trusts nothing but the store: each
result is recomputed from the committed call and operation before it is sent (docs/audit.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolloop_cli.audit.binding import check_result_set

from . import envelopes
from .context import Deps, call_binding_inputs, current_turn, op_binding, transition
from .records import CallRecord, OperationRecord
from .states import CALL_HAS_RESULT, OpState
from .types import ResultForModel


def send_back(deps: Deps, op: OperationRecord) -> tuple[OperationRecord, None]:
    """Re-bind the turn's results to their calls, then queue the next model request.

    The results are a table keyed by (response_id, call_id) that must match the turn's calls
    one to one; each result's hash and binding are recomputed from the stored call and the
    operation (audit.binding) and compared with those committed with it and with the audit
    log. Any failure stops the operation ESCALATED before a request is sent: an integrity
    failure needs a person, not a retry (docs/audit.md).
    """
    # never the records in hand: what is sent is what is stored
    calls, unsettled = deps.store.turn_and_unsettled_calls(op.operation_id, current_turn(op))
    results = results_for_model(calls, lambda name: _provider_type(deps, name))
    problems = _turn_problems(op, calls, unsettled)
    problems += check_result_set(op_binding(op), [call_binding_inputs(c) for c in calls], results)
    bound = [c for c in calls if c.call_binding_sha256 is not None]
    audited = deps.store.audited_bindings(
        op.operation_id, [(c.response_id, c.call_id) for c in bound]
    )
    problems += [
        f"the audit log holds another binding for call {c.call_id}"
        for c in bound
        if audited.get((c.response_id, c.call_id)) != c.call_binding_sha256
    ]
    if problems:
        with deps.store.transaction():
            reason = "results not sent: integrity check failed: " + "; ".join(problems)
            return transition(deps, op, OpState.ESCALATED, reason), None
    items = deps.adapter.result_items(results)
    with deps.store.transaction():
        deps.store.append_items(op.operation_id, items)
        sent = f"{len(calls)} result(s) sent back"
        return transition(deps, op, OpState.MODEL_REQUESTED, sent), None


def _turn_problems(
    op: OperationRecord, calls: Sequence[CallRecord], unsettled: Sequence[CallRecord]
) -> list[str]:
    """Why the stored turn is not one answer's calls, whole and settled ([] if it is).

    A turn that proposed tools holds its calls numbered from 0, all of one response (or none:
    Anthropic's ``pause_turn`` is continued by a turn with no calls); and once its results go
    back, no call of the operation may be left unsettled: a call moved out of its turn by hand
    would otherwise never run, never be answered, and never be asked about.
    """
    turn = op.current_turn
    problems: list[str] = []
    if len({c.response_id for c in calls}) > 1:
        problems.append(f"the calls of turn {turn} name more than one response")
    if [c.seq for c in calls] != list(range(len(calls))):
        problems.append(f"the calls of turn {turn} are not numbered 0 to {len(calls) - 1}")
    problems += [
        f"call {c.call_id} of response {c.response_id} (turn {c.turn_idx}) is still {c.state.value}"
        for c in unsettled
    ]
    return problems


def results_for_model(
    calls: Sequence[CallRecord], provider_type: Callable[[str], str | None]
) -> list[ResultForModel]:
    """The results a turn's calls send back, in call order (``verify`` rebuilds them too).

    ``provider_type`` names the provider-defined type of the tool a call was made to (None for
    a function), which some APIs answer in their own item (OpenAI's ``tool_search_output``).
    """
    return [
        ResultForModel(
            response_id=call.response_id,
            call_id=call.call_id,
            name=call.name,
            is_error=envelopes.is_error(call.model_result),
            content=call.model_result,
            provider_type=provider_type(call.name),
        )
        for call in calls
        if call.state in CALL_HAS_RESULT and call.model_result is not None
    ]


def _provider_type(deps: Deps, name: str) -> str | None:
    """The provider-defined type of the tool a call names (None: a function, or unknown)."""
    tool = deps.toolbox.lookup(name)
    return tool.provider_type if tool is not None else None
