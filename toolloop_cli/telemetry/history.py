"""What the store committed about one operation, read once, for the span builder.

The spans are rebuilt from these records alone (live at the end of a command, or later with
``export-otel``), so both paths export the same trace. The only thing not kept as a column is
the model that answered each turn: it is read back from the stored answer bytes through the
operation's own adapter, the one place that knows the provider's shape.
"""

from __future__ import annotations

from toolloop_cli.engine.records import OperationRecord, TurnRecord
from toolloop_cli.engine.types import HttpResponse, TurnOutcome
from toolloop_cli.errors import ToolloopError
from toolloop_cli.store import Store
from toolloop_cli.wiring import make_adapter

from .model import History

__all__ = ["read_history"]

_SSE_STARTS = (b"event:", b"data:", b":", b"id:", b"retry:")


def read_history(store: Store, operation_id: str, tenant: str | None = None) -> History:
    """Every record of ``operation_id`` that the spans are built from."""
    op = store.get_operation(operation_id, tenant)
    turns = store.turns(operation_id)
    return History(
        operation=op,
        turns=turns,
        calls=store.calls(operation_id),
        approvals=store.approvals(operation_id),
        transitions=store.transitions(operation_id),
        response_models=_response_models(store, op, turns),
    )


def _response_models(store: Store, op: OperationRecord, turns: list[TurnRecord]) -> dict[int, str]:
    """The answering model of each turn, parsed again from the bytes the provider sent."""
    try:
        adapter = make_adapter(op.provider, op.api_family)
    except ToolloopError:  # e.g. a scripted model: no adapter to read its answers
        return {}
    answered = {t.idx for t in turns if t.outcome is not TurnOutcome.API_FAILURE}
    models: dict[int, str] = {}
    for idx, body in store.response_bodies(op.operation_id).items():
        if idx not in answered:
            continue
        headers = {"content-type": "text/event-stream"} if _is_event_stream(body) else {}
        try:
            turn = adapter.parse_response(HttpResponse(status=200, headers=headers, body=body))
        except ToolloopError:
            continue  # the turn was classified when it arrived; its model stays unknown here
        if turn.model:
            models[idx] = turn.model
    return models


def _is_event_stream(body: bytes) -> bool:
    """Streamed answers are stored as the raw SSE bytes; JSON answers start with ``{``."""
    return body.lstrip().startswith(_SSE_STARTS)
