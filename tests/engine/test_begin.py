"""``loop.begin``: a new operation, its creation transition and first conversation, committed
together; and ``new_operation_record``, the one factory ``run`` and ``replay`` make them with.

- the creation is the transition ``None -> MODEL_REQUESTED``, in the table and checked there:
  any other first state is refused before anything is written;
- the conversation is the adapter's for the task, or the history handed in (a replay's);
- ``run`` and ``replay`` both begin through it, so both stop at ``after_start_commit``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REGISTRY

from toolloop_cli.adapters.scripted import ScriptedAdapter, ScriptedTransport
from toolloop_cli.engine import loop
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.engine.machine import check_op_transition
from toolloop_cli.engine.records import Guards, OperationRecord
from toolloop_cli.engine.sources import LiveSource
from toolloop_cli.engine.states import OP_TRANSITIONS, OpState
from toolloop_cli.engine.types import ModelSettings
from toolloop_cli.errors import IllegalTransition
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store
from toolloop_cli.tools.registry import load_registry
from toolloop_cli.wiring import deps_for
from toolloop_cli.wiring.records import Pins, new_operation_record


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


def _op() -> OperationRecord:
    return new_operation_record(
        task="refund ord_1001",
        provider="scripted",
        api_family="scripted",
        settings=ModelSettings(model="scripted-model"),
        source=LiveSource(kind="scripted", base_url="scripted://model"),
        pins=Pins.of(load_registry(REGISTRY)),
        guards=Guards(deadline_s=60),
        tenant="default",
        subject="operator",
        now=SystemClock().now(),
    )


def _begin(store: Store, op: OperationRecord, **kwargs: object) -> OperationRecord:
    deps = deps_for(store, op, load_registry(REGISTRY), transport=ScriptedTransport([]))
    return loop.begin(deps, op, op.task, **kwargs)  # type: ignore[arg-type]


def test_creation_is_the_tables_only_way_into_an_operation() -> None:
    assert OP_TRANSITIONS[None] == frozenset({OpState.MODEL_REQUESTED})
    check_op_transition(None, OpState.MODEL_REQUESTED)
    with pytest.raises(IllegalTransition, match="None -> VALIDATING"):
        check_op_transition(None, OpState.VALIDATING)


def test_begin_stores_the_operation_its_creation_and_the_adapters_conversation(
    store: Store,
) -> None:
    op = _begin(store, _op())
    assert store.get_operation(op.operation_id) == op
    (created,) = store.transitions(op.operation_id)
    assert (created["kind"], created["source"], created["target"]) == (
        "operation",
        None,
        "MODEL_REQUESTED",
    )
    settings = ModelSettings(model="scripted-model")
    assert store.conversation(op.operation_id) == ScriptedAdapter().start(op.task, settings)
    assert verify_store(store).ok


def test_begin_starts_from_a_given_history_instead(store: Store) -> None:
    history: list[dict[str, object]] = [{"role": "user", "content": "earlier words"}]
    op = _begin(store, _op(), history=history)
    assert store.conversation(op.operation_id) == history


def test_an_operation_that_does_not_start_model_requested_is_refused_unwritten(
    store: Store,
) -> None:
    op = _op().model_copy(update={"state": OpState.VALIDATING})
    with pytest.raises(IllegalTransition):
        _begin(store, op)
    assert store.list_operations() == []


def test_the_factory_fills_what_every_new_operation_shares() -> None:
    first, second = _op(), _op()
    assert first.operation_id != second.operation_id
    assert first.state is OpState.MODEL_REQUESTED and first.current_turn is None
    assert first.adapter_revision == ScriptedAdapter.revision
    assert first.model == "scripted-model" and first.counters.requests == 0
    assert first.transport == "scripted"
