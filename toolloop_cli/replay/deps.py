"""The dependencies of a replay operation: its transport, toolbox and policy, from a cassette.

Used twice: when ``replay`` starts an operation, and when ``step``/``resume`` continue a stored
replay operation (the service asks for them through ``replay_deps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ports import Clock, ModelAdapter, Toolbox, Transport
from toolloop_cli.engine.records import OperationRecord
from toolloop_cli.engine.sources import ReplaySource
from toolloop_cli.engine.states import CallState
from toolloop_cli.engine.types import JSONObject, RecordedResult, ToolSpec
from toolloop_cli.errors import TranscriptError
from toolloop_cli.replay.pairing import new_results, pair
from toolloop_cli.replay.recorded_meta import meta_list, recorded_calls
from toolloop_cli.replay.recorded_tools import Cursor, DeclaredTools, RecordedToolbox
from toolloop_cli.replay.shapes import declared_tools
from toolloop_cli.replay.split import Conversation, split_conversations
from toolloop_cli.store import Store
from toolloop_cli.tools.registry import Registry, load_registry
from toolloop_cli.transcripts.cassette import Cassette, load_cassette
from toolloop_cli.transcripts.record import METADATA_KEY
from toolloop_cli.transcripts.transport import ReplayTransport
from toolloop_cli.wiring import RegistryToolbox, deps_for

__all__ = [
    "Plan",
    "ResultMode",
    "meta_list",
    "plan_deps",
    "policy_toolbox",
    "recorded_table",
    "replay_deps",
]

#: ``live`` runs the registry's handlers; ``recorded`` answers calls from the recording
ResultMode = Literal["live", "recorded"]


@dataclass
class Plan:
    """One conversation to replay, and what the cassette says about it."""

    cassette: Cassette
    conversation: Conversation
    meta: dict[str, Any]
    registry: Registry | None
    mode: ResultMode


def policy_toolbox(
    plan: Plan, data_dir: Path, clock: Clock, cursor: Cursor | None = None
) -> Toolbox:
    """Lookup, validation and approval policy: the registry's, else the declared tools'."""
    provider = plan.conversation.api[0]
    if plan.registry is not None:
        return RegistryToolbox(
            plan.registry, data_dir, lambda: clock.now().timestamp(), provider=provider
        )
    declared = [declared_tools(plan.conversation.api, body) for body in plan.conversation.bodies]
    meta_tools = plan.meta.get("tools")
    registry_meta = plan.meta.get("registry")
    revision = registry_meta.get("policy_revision") if isinstance(registry_meta, dict) else None
    ttl = plan.meta.get("approval_ttl_s")
    return DeclaredTools(
        declared,
        _schema_check(),
        meta_tools if isinstance(meta_tools, dict) else None,
        policy_revision=str(revision or "recorded"),
        approval_ttl_s=ttl if isinstance(ttl, int) else 3600,
        cursor=cursor,
    )


def _schema_check() -> Callable[[ToolSpec, JSONObject], list[str]]:
    """Strict argument checks against the declared schemas, each compiled once (a schema that
    is not JSON Schema, even once Gemini's dialect is translated, checks nothing)."""
    from toolloop_cli.tools.validation import compile_validator, schema_problem, violations

    compiled: dict[str, Any] = {}

    def check(spec: ToolSpec, arguments: JSONObject) -> list[str]:
        key = sha256_of(spec.parameters)
        if key not in compiled:
            fine = schema_problem(spec.parameters) is None
            compiled[key] = compile_validator(spec.parameters) if fine else None
        validator = compiled[key]
        return [] if validator is None else violations(validator, arguments)

    return check


def plan_deps(
    store: Store,
    op: OperationRecord,
    plan: Plan,
    clock: Clock,
    on_event: Callable[[str, dict[str, object]], None] | None,
    transport: Transport | None,
    *,
    adapter: ModelAdapter | None = None,
) -> Deps:
    conversation = plan.conversation
    if transport is None:
        recording = Cassette(plan.cassette.path, list(conversation.interactions), {})
        transport = ReplayTransport(recording, conversation.api, start=op.counters.requests)
    cursor = transport if isinstance(transport, ReplayTransport) else None
    toolbox: Toolbox | None = None
    if plan.mode == "recorded":
        results = recorded_table(conversation)
        recorded = recorded_calls(conversation, plan.meta)
        states = {key: str(c["state"]) for key, c in recorded.items()}
        policy = policy_toolbox(plan, store.data_dir, clock, cursor)
        toolbox = RecordedToolbox(policy, results, states, cursor, foreign=not plan.meta)
    elif plan.registry is not None:
        toolbox = RegistryToolbox(
            plan.registry,
            _data_dir(store, op),
            lambda: clock.now().timestamp(),
            provider=conversation.api[0],
        )
    deps = deps_for(
        store,
        op,
        plan.registry,
        clock=clock,
        on_event=on_event,
        transport=transport,
        toolbox=toolbox,
        adapter=adapter,
    )
    deps.sleep = lambda seconds: None  # a recorded retry is answered at once
    if cursor is not None:
        deps.retry_ends = _no_retry_after(cursor, len(conversation.interactions))
    if cursor is not None and not plan.meta:
        deps.input_ends = _ends_with(
            store, cursor, len(conversation.interactions), conversation.answered_by
        )
    return deps


def _data_dir(store: Store, op: OperationRecord) -> Path:
    folder = op.source.data_dir if isinstance(op.source, ReplaySource) else None
    return Path(folder) if folder else store.data_dir


def recorded_table(conversation: Conversation) -> list[dict[str, RecordedResult]]:
    """For each recorded answer, its calls' recorded results by call id (``pairing``)."""
    fresh = new_results(conversation.api, conversation.bodies)
    table: list[dict[str, RecordedResult]] = []
    for index, turn in enumerate(conversation.turns):
        calls = [c.call_id for c in turn.calls] if turn is not None else []
        following = fresh[index + 1] if index + 1 < len(fresh) else []
        table.append(pair(following, calls).by_call)
    return table


#: call states in which nothing of the call has run
_NOT_RUN = frozenset(
    {
        CallState.PROPOSED,
        CallState.WAITING_APPROVAL,
        CallState.APPROVED,
        CallState.INVALID,
        CallState.DENIED,
        CallState.EXPIRED,
        CallState.DUPLICATE,
    }
)


def _ends_with(
    store: Store, cursor: ReplayTransport, recorded: int, answered_by: int | None
) -> Callable[[OperationRecord], str | None]:
    """``Deps.input_ends`` of a recording made by another tool: it stops where it stops.

    When the last recorded answer asked for calls and nothing follows it, nobody answered
    them: nothing is run, no request is sent that the recording never had, and the operation
    ends INCOMPLETE saying so. (A toolloop recording says itself how it ended.) When a
    request that starts another conversation does carry their results (``answered_by``), the
    reason names it: the client rewrote the history before them, so that request could not
    go on from this conversation's last answer.
    """

    def ends(op: OperationRecord) -> str | None:
        if cursor.answered < recorded or op.current_turn is None:
            return None
        calls = store.calls(op.operation_id, op.current_turn)
        if any(call.state not in _NOT_RUN for call in calls):
            return None
        named = ", ".join(f"{c.call_id} ({c.name})" for c in calls) or "none"
        if answered_by is not None:
            return (
                f"the recording ends here: interaction {answered_by} answers the last answer's"
                f" call(s) {named}, but rewrote the conversation before them, so it is"
                " replayed as a conversation of its own; nothing was run"
            )
        return (
            f"the recording ends here: nobody answered the last answer's call(s): {named}; "
            "nothing was run"
        )

    return ends


def _no_retry_after(
    cursor: ReplayTransport, recorded: int
) -> Callable[[OperationRecord], str | None]:
    """``Deps.retry_ends`` of a replay: a failure the recording has nothing after was not
    retried by its client, so none is sent: the operation ends FAILED on it, as recorded."""

    def ends(op: OperationRecord) -> str | None:
        if cursor.answered < recorded:
            return None
        return "the recording ends here: its client did not send the request again"

    return ends


def replay_deps(
    store: Store,
    op: OperationRecord,
    *,
    clock: Clock | None = None,
    on_event: Callable[[str, dict[str, object]], None] | None = None,
    transport: Transport | None = None,
) -> Deps:
    """The dependencies to step or resume a replay operation, rebuilt from its source."""
    source = op.source
    if not isinstance(source, ReplaySource):
        raise AssertionError(f"internal error: operation {op.operation_id} is not a replay")
    cassette = load_cassette(source.replay)
    split = split_conversations(cassette)
    index = source.conversation
    if index >= len(split.conversations):
        raise TranscriptError(
            f"transcript {cassette.path} changed: it has no conversation {index} any more"
        )
    meta = cassette.metadata.get(METADATA_KEY)
    own = meta if isinstance(meta, dict) and len(split.conversations) == 1 else {}
    registry = load_registry(op.registry_path) if source.tools == "registry" else None
    plan = Plan(cassette, split.conversations[index], own, registry, source.results)
    return plan_deps(store, op, plan, clock or SystemClock(), on_event, transport)
