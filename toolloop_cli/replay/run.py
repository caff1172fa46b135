"""Replay a recording as operations and report where this code diverges from it.

Each conversation in the cassette becomes an operation in the store like any other (``show``,
``diff`` and ``verify`` work on it). Its model turns come from the recording; its tool results
come from the registry's handlers (``live``, each replay in a fresh data folder) or from the
recording itself (``recorded``: a ``RecordedToolbox`` built here, so the engine never knows it
is replaying). Its dependencies are built in ``replay.deps``; how approvals are decided and
time moves is in ``replay.decisions``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine import loop
from toolloop_cli.engine.clock import SystemClock, parse_iso
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ids import new_operation_id
from toolloop_cli.engine.ports import Clock, ModelAdapter
from toolloop_cli.engine.records import Guards, OperationRecord
from toolloop_cli.engine.sources import ReplaySource
from toolloop_cli.engine.states import OpState
from toolloop_cli.engine.types import JSONObject, ModelSettings
from toolloop_cli.errors import AdapterError, CanonicalJSONError, TranscriptError, UsageError
from toolloop_cli.replay.decisions import Decisions, ReplayClock, drive
from toolloop_cli.replay.deps import (
    Plan,
    ResultMode,
    plan_deps,
    policy_toolbox,
    recorded_table,
)
from toolloop_cli.replay.divergence import (
    Divergence,
    compare_outcome,
    compare_requests,
)
from toolloop_cli.replay.guards import replay_guards
from toolloop_cli.replay.recorded_meta import CallKey, recorded_approvals, recorded_calls
from toolloop_cli.replay.shapes import conversation_items, recorded_settings, task_text
from toolloop_cli.replay.split import Conversation, Skipped, Split, split_conversations
from toolloop_cli.store import Store
from toolloop_cli.tools.registry import load_registry
from toolloop_cli.transcripts.cassette import load_cassette
from toolloop_cli.transcripts.record import METADATA_KEY
from toolloop_cli.transcripts.transport import ReplayTransport
from toolloop_cli.wiring import make_adapter
from toolloop_cli.wiring.records import Pins, new_operation_record

__all__ = [
    "Prepared",
    "ReplayOptions",
    "ReplayReport",
    "ReplayedOperation",
    "prepare",
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


@dataclass(frozen=True)
class Prepared:
    """A replay's files read and every conversation's start checked; no store touched yet.

    ``toolloop replay`` prepares before it opens the store, so a cassette or registry it
    cannot use (exit 2) leaves no store behind, not even a new empty one.
    """

    options: ReplayOptions
    mode: ResultMode
    split: Split
    begins: list[_Begin]


@dataclass(frozen=True)
class _Begin:
    """How one conversation starts: what its operation is made from."""

    plan: Plan
    task: str
    settings: ModelSettings
    adapter: ModelAdapter
    #: the conversation it starts from, when its first request carried one
    history: list[JSONObject] | None
    guards: Guards


def prepare(options: ReplayOptions) -> Prepared:
    """Read the registry and the cassette and check how each conversation starts."""
    asked = options.results or ("live" if options.registry is not None else "recorded")
    if asked not in RESULT_MODES:
        raise UsageError(f"--results must be live or recorded, not {asked!r}")
    mode: ResultMode = "live" if asked == "live" else "recorded"
    if mode == "live" and options.registry is None:
        raise UsageError("--results live runs the registry's handlers: give --registry FILE")
    registry = load_registry(options.registry) if options.registry is not None else None
    cassette = load_cassette(options.cassette)
    split = split_conversations(cassette)
    meta = cassette.metadata.get(METADATA_KEY)
    begins = []
    for index, conversation in enumerate(split.conversations):  # all checked before any runs
        own = meta if isinstance(meta, dict) and len(split.conversations) == 1 else {}
        plan = Plan(cassette, conversation, own, registry, mode)
        first = conversation.interactions[0].request
        settings = _settings(conversation, first.json(), first.uri, own)
        adapter = make_adapter(*conversation.api)  # the operation's one adapter
        history = _seed(plan, settings, adapter, index)
        task = _task(plan, index)
        begins.append(_Begin(plan, task, settings, adapter, history, replay_guards(plan)))
    return Prepared(options, mode, split, begins)


def replay(
    store: Store,
    options: ReplayOptions | Prepared,
    *,
    clock: Clock | None = None,
    on_event: Callable[[str, dict[str, object]], None] | None = None,
) -> ReplayReport:
    """Replay every conversation of the cassette as its own operation."""
    prepared = options if isinstance(options, Prepared) else prepare(options)
    asked = prepared.options
    started = []
    for index, begin in enumerate(prepared.begins):
        engine_clock = clock or _replay_clock(begin.plan, asked)
        op = _new_operation(store, begin, index, asked, engine_clock)
        started.append(_Start(begin.plan, op, begin.adapter, begin.history, engine_clock))
    operations = [_replay_one(store, start, asked, on_event) for start in started]
    return ReplayReport(asked.cassette, prepared.mode, operations, prepared.split.skipped)


@dataclass(frozen=True)
class _Start:
    """One conversation checked and ready to run as an operation (nothing stored yet)."""

    plan: Plan
    op: OperationRecord
    adapter: ModelAdapter
    #: the conversation it starts from, when its first request carried one
    history: list[JSONObject] | None
    clock: Clock


def _replay_one(
    store: Store,
    start: _Start,
    options: ReplayOptions,
    on_event: Callable[[str, dict[str, object]], None] | None,
) -> ReplayedOperation:
    plan, op = start.plan, start.op
    deps = plan_deps(store, op, plan, start.clock, on_event, None, adapter=start.adapter)
    loop.begin(deps, op, op.task, history=start.history)
    waiting, refused = drive(store, deps, op.operation_id, _decisions(plan, options))
    assert isinstance(deps.transport, ReplayTransport)
    divergences = refused + _divergences(store, deps, op.operation_id, plan, options, waiting)
    final = _keep_divergences(store, op.operation_id, divergences)
    assert isinstance(op.source, ReplaySource)
    data_dir = op.source.data_dir
    return ReplayedOperation(
        final.operation_id,
        final.state,
        plan.conversation.indices,
        divergences,
        waiting,
        Path(data_dir) if data_dir else None,
    )


def _seed(
    plan: Plan, settings: ModelSettings, adapter: ModelAdapter, index: int
) -> list[JSONObject] | None:
    """The conversation the operation starts from: its first recorded request's, as recorded
    (None: the request carries none, so the adapter starts one from the task).

    For a request that already carries earlier calls and their results (another run's
    history, or the turns before a new user message), those are history: sent again as they
    were, never executed. A history the adapter would refuse to send (a ``tool_use`` not
    answered in the next message) makes the cassette unusable here, before anything is
    written.
    """
    conversation = plan.conversation
    items = conversation_items(conversation.api, conversation.bodies[0])
    if not items:
        return None
    try:
        # as the operation will hold them (``new_operation_record`` keeps what is set)
        adapter.build_request(items, [], ModelSettings(**settings.model_dump(exclude_none=True)))
    except AdapterError as exc:
        raise TranscriptError(
            f"transcript {plan.cassette.path}: conversation {index}: its first request "
            f"holds a history toolloop would not send ({exc})"
        ) from None
    return items


def _keep_divergences(
    store: Store, operation_id: str, divergences: list[Divergence]
) -> OperationRecord:
    """Write what the replay found on its operation (``divergence_check``, written once).

    The operation row is audited, so ``verify`` covers the finding and a report reads it
    without the cassette. It is the replay's finding at this moment: ``requests`` says how
    many model requests it compared; a later ``resume`` of a paused replay adds none.
    """
    op = store.get_operation(operation_id)
    check: JSONObject = {
        "requests": op.counters.requests,
        "divergences": [_storable(d.as_json()) for d in divergences],
    }
    if op.divergence_check is not None:  # a resumed replay: the finding was kept already
        return op
    kept = op.model_copy(update={"divergence_check": check})
    with store.transaction():
        store.save_operation(kept, op.state)
    return kept


def _storable(divergence: JSONObject) -> JSONObject:
    """A recorded or replayed value with no canonical JSON form (NaN, 1e999, an integer past
    2^53 in a hostile recording) is kept as its JSON text: the stored source stays standard
    JSON, which any reader (and a report's embedded data) parses, and big integers exact."""
    for side in ("recorded", "replayed"):
        try:
            canonical_bytes(divergence[side])
        except CanonicalJSONError:
            divergence[side] = json.dumps(divergence[side])
    return divergence


def _replay_clock(plan: Plan, options: ReplayOptions) -> ReplayClock:
    """The recording's time, so results quoting a time come out as recorded; but a live
    replay whose approvals are left to a person runs at today's date (intervals kept), so
    that person can still decide them with ``toolloop approve`` before they expire."""
    now = SystemClock().now()
    recorded = _recorded_start(plan.meta)
    if recorded is None:
        return ReplayClock(now)
    if plan.mode == "live" and not options.approve_as:
        return ReplayClock(now, recorded_start=recorded)
    return ReplayClock(recorded)


def _recorded_start(meta: dict[str, Any]) -> datetime | None:
    created = meta.get("created_at")
    if isinstance(created, str):
        try:
            return parse_iso(created)
        except ValueError:
            pass
    return None


def _task(plan: Plan, index: int) -> str:
    """The operation's task: the recording's own, else the first request's last user text."""
    conversation, meta = plan.conversation, plan.meta
    body = conversation.interactions[0].request.json()
    task = meta.get("task") if isinstance(meta.get("task"), str) else None
    if task is None:
        task = task_text(conversation.api, body)
    if task is None and conversation_items(conversation.api, body):
        task = ""  # the conversation says no words of its own (the prompt is the instructions)
    if not isinstance(task, str):
        raise TranscriptError(
            f"transcript {plan.cassette.path}: conversation {index}: the first request "
            f"carries no conversation to start from{_why_none(body)}"
        )
    return task


#: where each API family's request carries its conversation
_CONVERSATION_FIELDS = ("input", "messages", "contents")


def _why_none(body: Any) -> str:
    """What the first request holds instead of a conversation, when it says."""
    if not isinstance(body, dict):
        return " (its body is not a JSON object)"
    prompt = body.get("prompt")
    if isinstance(prompt, dict) and isinstance(prompt.get("id"), str):
        return (
            f" (it names a stored prompt, {prompt['id'][:60]}, whose text only the provider holds)"
        )
    for name in _CONVERSATION_FIELDS:
        value = body.get(name)
        if isinstance(value, list) and value and not any(isinstance(i, dict) for i in value):
            return f" ('{name}' holds no message objects)"
    return ""


def _new_operation(
    store: Store, begin: _Begin, index: int, options: ReplayOptions, clock: Clock
) -> OperationRecord:
    plan, meta = begin.plan, begin.plan.meta
    conversation = plan.conversation
    provider, api_family = conversation.api
    op_id = new_operation_id()
    guards = begin.guards
    toolbox = policy_toolbox(plan, store.data_dir, clock)
    cassette = str(Path(plan.cassette.path).resolve())
    live = plan.mode == "live"
    source = ReplaySource(
        replay=cassette,
        conversation=index,
        interactions=list(conversation.indices),
        results=plan.mode,
        tools="registry" if plan.registry is not None else "recorded",
        strict_requests=options.strict_requests,
        data_dir=str(store.data_dir / "replay-data" / op_id) if live else None,
    )
    registry = plan.registry
    pins = Pins(
        registry_name=registry.name if registry else "recorded",
        registry_revision=registry.revision if registry else "recorded",
        registry_path=str(registry.path.resolve()) if registry else cassette,
        registry_sha256=toolbox.registry_sha256,
        policy_revision=toolbox.policy_revision,
        policy_sha256=toolbox.policy_sha256,
    )
    return new_operation_record(
        operation_id=op_id,
        task=begin.task,
        provider=provider,
        api_family=api_family,
        settings=begin.settings,
        source=source,
        pins=pins,
        guards=guards,
        tenant=options.tenant or str(meta.get("tenant") or "default"),
        subject=str(meta.get("subject") or "operator"),
        now=clock.now(),
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


def _decisions(plan: Plan, options: ReplayOptions) -> Decisions:
    answered: set[CallKey] = set()
    if plan.mode == "recorded":
        table = recorded_table(plan.conversation)
        answered = {(turn, call_id) for turn, results in enumerate(table) for call_id in results}
    return Decisions(
        mode=plan.mode,
        recorded=recorded_approvals(plan.conversation, plan.meta),
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
        calls = {(c.turn_idx, c.call_id): c.state.value for c in store.calls(op_id)}
        meta_calls = recorded_calls(conversation, plan.meta)
        recorded = {key: str(c["state"]) for key, c in meta_calls.items()}
        state = plan.meta.get("state")
        found += compare_outcome(
            str(state) if state and not waiting else None,
            op.state.value,
            recorded if not waiting else {},
            calls,
        )
    return found
