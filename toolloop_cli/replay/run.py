"""Replay a recording as operations and report where this code diverges from it.

Each conversation in the cassette becomes an operation in the store like any other (``show``,
``diff`` and ``verify`` work on it). Its model turns come from the recording; its tool results
come from the registry's handlers (``live``, each replay in a fresh data folder) or from the
recording itself (``recorded``: a ``RecordedToolbox`` built here, so the engine never knows it
is replaying). Its dependencies are built in ``replay.deps``; how approvals are decided and
time moves is in ``replay.decisions``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from toolloop_cli.engine.clock import SystemClock, iso, later, parse_iso
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ids import new_operation_id
from toolloop_cli.engine.ports import Clock
from toolloop_cli.engine.records import Counters, Guards, OperationRecord
from toolloop_cli.engine.states import OpState
from toolloop_cli.engine.types import JSONObject, ModelSettings
from toolloop_cli.errors import AdapterError, TranscriptError, UsageError
from toolloop_cli.replay.decisions import Decisions, ReplayClock, drive
from toolloop_cli.replay.deps import Plan, meta_list, plan_deps, policy_toolbox, recorded_table
from toolloop_cli.replay.divergence import (
    Divergence,
    compare_outcome,
    compare_requests,
)
from toolloop_cli.replay.shapes import conversation_items, recorded_settings, task_text
from toolloop_cli.replay.split import Conversation, Skipped, split_conversations
from toolloop_cli.store import Store
from toolloop_cli.tools.registry import Registry, load_registry
from toolloop_cli.transcripts.cassette import load_cassette
from toolloop_cli.transcripts.record import METADATA_KEY
from toolloop_cli.transcripts.transport import ReplayTransport
from toolloop_cli.wiring import make_adapter

__all__ = [
    "ReplayOptions",
    "ReplayReport",
    "ReplayedOperation",
    "replay",
]

RESULT_MODES = ("live", "recorded")


@dataclass
class ReplayOptions:
    """What ``toolloop replay`` was asked for."""

    cassette: Path
    registry: Path | None = None
    #: "live" runs the registry's handlers, "recorded" answers from the recording;
    #: None: live with a registry, recorded without
    results: str | None = None
    approve_as: str | None = None
    strict_requests: bool = False
    tenant: str | None = None


@dataclass
class ReplayedOperation:
    operation_id: str
    state: OpState
    interactions: tuple[int, ...]
    divergences: list[Divergence] = field(default_factory=list)
    waiting: str | None = None
    data_dir: Path | None = None


@dataclass
class ReplayReport:
    cassette: Path
    results: str
    operations: list[ReplayedOperation]
    skipped: list[Skipped]

    @property
    def divergent(self) -> bool:
        return any(op.divergences for op in self.operations)


def replay(
    store: Store,
    options: ReplayOptions,
    *,
    clock: Clock | None = None,
    on_event: Callable[[str, dict[str, object]], None] | None = None,
) -> ReplayReport:
    """Replay every conversation of the cassette as its own operation."""
    mode = options.results or ("live" if options.registry is not None else "recorded")
    if mode not in RESULT_MODES:
        raise UsageError(f"--results must be live or recorded, not {mode!r}")
    if mode == "live" and options.registry is None:
        raise UsageError("--results live runs the registry's handlers: give --registry FILE")
    registry = load_registry(options.registry) if options.registry is not None else None
    cassette = load_cassette(options.cassette)
    split = split_conversations(cassette)
    meta = cassette.metadata.get(METADATA_KEY)
    started = []
    for index, conversation in enumerate(split.conversations):  # all checked before any runs
        own = meta if isinstance(meta, dict) and len(split.conversations) == 1 else {}
        plan = Plan(cassette, conversation, own, registry, mode)
        engine_clock = clock or ReplayClock(_start_time(plan.meta))
        op = _new_operation(store, plan, index, options, engine_clock)
        started.append((plan, op, _seed(plan, op, index), engine_clock))
    operations = [
        _replay_one(store, plan, op, seed, options, engine_clock, on_event)
        for plan, op, seed, engine_clock in started
    ]
    return ReplayReport(options.cassette, mode, operations, split.skipped)


def _replay_one(
    store: Store,
    plan: Plan,
    op: OperationRecord,
    seed: list[JSONObject],
    options: ReplayOptions,
    engine_clock: Clock,
    on_event: Callable[[str, dict[str, object]], None] | None,
) -> ReplayedOperation:
    deps = plan_deps(store, op, plan, engine_clock, on_event, None)
    with store.transaction():
        store.insert_operation(op)
        store.log_transition(op.operation_id, "operation", None, op.state.value, op.created_at)
        store.append_items(op.operation_id, seed)
    waiting, refused = drive(store, deps, op.operation_id, _decisions(plan, options))
    assert isinstance(deps.transport, ReplayTransport)
    divergences = refused + _divergences(store, deps, op.operation_id, plan, options, waiting)
    final = store.get_operation(op.operation_id)
    data_dir = op.source.get("data_dir")
    return ReplayedOperation(
        final.operation_id,
        final.state,
        plan.conversation.indices,
        divergences,
        waiting,
        Path(data_dir) if data_dir else None,
    )


def _seed(plan: Plan, op: OperationRecord, index: int) -> list[JSONObject]:
    """The conversation the operation starts from: its first recorded request's, as recorded.

    For a request that already carries earlier calls and their results (another run's
    history, or the turns before a new user message), those are history: sent again as they
    were, never executed. A history the adapter would refuse to send (a ``tool_use`` not
    answered in the next message) makes the cassette unusable here, before anything is
    written.
    """
    conversation = plan.conversation
    adapter = make_adapter(*conversation.api)
    settings = ModelSettings(**op.settings)
    items = conversation_items(conversation.api, conversation.bodies[0])
    if not items:
        return adapter.start(op.task, settings)
    try:
        adapter.build_request(items, [], settings)
    except AdapterError as exc:
        raise TranscriptError(
            f"transcript {plan.cassette.path}: conversation {index + 1}: its first request "
            f"holds a history toolloop would not send ({exc})"
        ) from None
    return items


def _start_time(meta: dict[str, Any]) -> datetime:
    created = meta.get("created_at")
    if isinstance(created, str):
        try:
            return parse_iso(created)
        except ValueError:
            pass
    return SystemClock().now()


def _new_operation(
    store: Store, plan: Plan, index: int, options: ReplayOptions, clock: Clock
) -> OperationRecord:
    conversation, meta = plan.conversation, plan.meta
    first = conversation.interactions[0].request
    body = first.json()
    task = meta.get("task") if isinstance(meta.get("task"), str) else None
    if task is None:
        task = task_text(conversation.api, body)
    if task is None and conversation_items(conversation.api, body):
        task = ""  # the conversation says no words of its own (the prompt is the instructions)
    if not isinstance(task, str):
        raise TranscriptError(
            f"transcript {plan.cassette.path}: conversation {index + 1}: the first request "
            "carries no conversation to start from"
        )
    settings = _settings(conversation, body, first.uri, meta)
    provider, api_family = conversation.api
    adapter = make_adapter(provider, api_family)
    op_id = new_operation_id()
    now = clock.now()
    guards = _guards(meta, plan.registry)
    toolbox = policy_toolbox(plan, store.data_dir, clock)
    source: JSONObject = {
        "replay": str(Path(plan.cassette.path).resolve()),
        "conversation": index,
        "interactions": list(conversation.indices),
        "results": plan.mode,
        "tools": "registry" if plan.registry is not None else "recorded",
        "strict_requests": options.strict_requests,
    }
    if plan.mode == "live":
        source["data_dir"] = str(store.data_dir / "replay-data" / op_id)
    registry = plan.registry
    return OperationRecord(
        operation_id=op_id,
        state=OpState.MODEL_REQUESTED,
        task=task,
        provider=provider,
        api_family=api_family,
        model=settings.model,
        transport="replay",
        adapter_revision=adapter.revision,
        tenant=options.tenant or str(meta.get("tenant") or "default"),
        subject=str(meta.get("subject") or "operator"),
        registry_name=registry.name if registry else "recorded",
        registry_revision=registry.revision if registry else "recorded",
        registry_path=str(registry.path.resolve()) if registry else source["replay"],
        registry_sha256=toolbox.registry_sha256,
        policy_revision=toolbox.policy_revision,
        settings=settings.model_dump(exclude_none=True),
        source=source,
        guards=guards,
        counters=Counters(),
        created_at=iso(now),
        updated_at=iso(now),
        deadline_at=iso(later(now, guards.deadline_s)),
    )


def _settings(
    conversation: Conversation, body: Any, uri: str, meta: dict[str, Any]
) -> ModelSettings:
    """The recording's own settings (toolloop metadata), else what its first request shows."""
    recorded = meta.get("settings")
    if isinstance(recorded, dict):
        try:
            return ModelSettings(**recorded)
        except ValueError:
            pass
    shown = recorded_settings(conversation.api, body, uri)
    shown.setdefault("model", str(meta.get("model") or "recorded"))
    return ModelSettings(**shown)


def _guards(meta: dict[str, Any], registry: Registry | None) -> Guards:
    """The recording's guards (they decide NO_PROGRESS and budgets), else the defaults."""
    recorded = meta.get("guards")
    if isinstance(recorded, dict):
        known = {k: v for k, v in recorded.items() if k in Guards.model_fields}
        try:
            return Guards.model_validate(known)
        except ValueError as exc:
            raise TranscriptError(f"the recording's toolloop.guards are invalid: {exc}") from None
    if registry is not None:
        from toolloop_cli.wiring import build_guards

        return build_guards(registry, {})
    return Guards()


def _decisions(plan: Plan, options: ReplayOptions) -> Decisions:
    recorded = {a["call_id"]: a for a in meta_list(plan.meta, "approvals") if "call_id" in a}
    answered: set[str] = set()
    if plan.mode == "recorded":
        answered = {call_id for turn in recorded_table(plan.conversation) for call_id in turn}
    return Decisions(
        recorded=recorded,
        policy=plan.registry.policy if plan.registry is not None else None,
        approve_as=options.approve_as,
        recorded_results=frozenset(answered),
    )


def _divergences(
    store: Store,
    deps: Deps,
    op_id: str,
    plan: Plan,
    options: ReplayOptions,
    waiting: str | None,
) -> list[Divergence]:
    transport = deps.transport
    assert isinstance(transport, ReplayTransport)
    conversation = plan.conversation
    made: list[list[str]] = [[] for _ in transport.sent]  # the engine's calls, per answer
    for call in store.calls(op_id):
        if 0 <= call.turn_idx < len(made):
            made[call.turn_idx].append(call.call_id)
    found = compare_requests(
        conversation.api,
        [request.body for request in transport.sent],
        conversation.bodies,
        strict=options.strict_requests,
        calls=made,
    )
    if waiting:  # stopped for a person: what was not sent yet is not a divergence
        found = [d for d in found if d.kind != "missing_request"]
    if plan.meta:
        op = store.get_operation(op_id)
        calls = {c.call_id: c.state.value for c in store.calls(op_id)}
        recorded_calls = {str(c["call_id"]): str(c["state"]) for c in meta_list(plan.meta, "calls")}
        state = plan.meta.get("state")
        found += compare_outcome(
            str(state) if state and not waiting else None,
            op.state.value,
            recorded_calls if not waiting else {},
            calls,
        )
    return found
