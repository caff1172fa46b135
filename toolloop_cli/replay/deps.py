"""The dependencies of a replay operation: its transport, toolbox and policy, from a cassette.

Used twice: when ``replay`` starts an operation, and when ``step``/``resume`` continue a stored
replay operation (the service asks for them through ``replay_deps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ports import Clock, Toolbox, Transport
from toolloop_cli.engine.records import OperationRecord
from toolloop_cli.engine.types import JSONObject, ToolSpec
from toolloop_cli.errors import TranscriptError
from toolloop_cli.replay.recorded_tools import DeclaredTools, RecordedToolbox, recorded_results
from toolloop_cli.replay.shapes import declared_tools
from toolloop_cli.replay.split import Conversation, split_conversations
from toolloop_cli.store import Store
from toolloop_cli.tools.registry import Registry, load_registry
from toolloop_cli.transcripts.cassette import Cassette, load_cassette
from toolloop_cli.transcripts.record import METADATA_KEY
from toolloop_cli.transcripts.transport import ReplayTransport
from toolloop_cli.wiring import RegistryToolbox, deps_for, make_adapter

__all__ = ["Plan", "meta_list", "plan_deps", "policy_toolbox", "replay_deps"]


@dataclass
class Plan:
    """One conversation to replay, and what the cassette says about it."""

    cassette: Cassette
    conversation: Conversation
    meta: dict[str, Any]
    registry: Registry | None
    mode: str


def policy_toolbox(plan: Plan, data_dir: Path, clock: Clock) -> Toolbox:
    """Lookup, validation and approval policy: the registry's, else the declared tools'."""
    if plan.registry is not None:
        return RegistryToolbox(plan.registry, data_dir, lambda: clock.now().timestamp())
    body = plan.conversation.interactions[0].request.json()
    specs = declared_tools(plan.conversation.api, body)
    meta_tools = plan.meta.get("tools")
    registry_meta = plan.meta.get("registry")
    revision = registry_meta.get("policy_revision") if isinstance(registry_meta, dict) else None
    ttl = plan.meta.get("approval_ttl_s")
    return DeclaredTools(
        specs,
        _schema_check(specs),
        meta_tools if isinstance(meta_tools, dict) else None,
        policy_revision=str(revision or "recorded"),
        approval_ttl_s=ttl if isinstance(ttl, int) else 3600,
    )


def _schema_check(specs: list[ToolSpec]) -> Callable[[str, JSONObject], list[str]]:
    """Strict argument checks against the declared schemas (a broken schema checks nothing)."""
    from toolloop_cli.tools.validation import compile_validator, schema_problem

    validators = {
        spec.name: compile_validator(spec.parameters)
        for spec in specs
        if schema_problem(spec.parameters) is None
    }

    def check(name: str, arguments: JSONObject) -> list[str]:
        validator = validators.get(name)
        if validator is None:
            return []
        errors = validator.iter_errors(arguments)
        return sorted(f"{error.json_path}: {error.message}" for error in errors)

    return check


def plan_deps(
    store: Store,
    op: OperationRecord,
    plan: Plan,
    clock: Clock,
    on_event: Callable[[str, dict[str, object]], None] | None,
    transport: Transport | None,
) -> Deps:
    conversation = plan.conversation
    if transport is None:
        recording = Cassette(plan.cassette.path, list(conversation.interactions), {})
        transport = ReplayTransport(recording, conversation.api, start=op.counters.requests)
    toolbox: Toolbox | None = None
    if plan.mode == "recorded":
        adapter = make_adapter(op.provider, op.api_family)
        results = recorded_results(adapter, conversation)
        states = {c["call_id"]: c["state"] for c in meta_list(plan.meta, "calls")}
        toolbox = RecordedToolbox(policy_toolbox(plan, store.data_dir, clock), results, states)
    return deps_for(
        store,
        op,
        plan.registry,
        clock=clock,
        on_event=on_event,
        transport=transport,
        toolbox=toolbox,
    )


def meta_list(meta: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = meta.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


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
    cassette = load_cassette(source["replay"])
    split = split_conversations(cassette)
    index = int(source.get("conversation", 0))
    if index >= len(split.conversations):
        raise TranscriptError(
            f"transcript {cassette.path} changed: it has no conversation {index + 1} any more"
        )
    meta = cassette.metadata.get(METADATA_KEY)
    own = meta if isinstance(meta, dict) and len(split.conversations) == 1 else {}
    registry = load_registry(op.registry_path) if source.get("tools") == "registry" else None
    plan = Plan(cassette, split.conversations[index], own, registry, str(source["results"]))
    return plan_deps(store, op, plan, clock or SystemClock(), on_event, transport)
