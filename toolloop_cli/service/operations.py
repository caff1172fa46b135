"""The library API behind ``run``, ``step`` and ``resume``: start and continue operations.

Each function opens nothing and prints nothing: it is handed a store and returns records,
so the CLI stays a thin layer and programs can drive toolloop without it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolloop_cli.engine import loop
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.ports import Clock, KnowsRecordedModel, Transport
from toolloop_cli.engine.records import Guards, OperationRecord
from toolloop_cli.engine.sources import LiveSource, ReplaySource, Source, TranscriptSource
from toolloop_cli.engine.states import OpState, is_terminal
from toolloop_cli.engine.types import JSONObject, ModelSettings
from toolloop_cli.errors import (
    ApprovalError,
    UsageError,
)
from toolloop_cli.store import Store, lease
from toolloop_cli.tools import policy as policy_rules
from toolloop_cli.tools.registry import Registry
from toolloop_cli.transcripts.cassette import scrub_uri
from toolloop_cli.wiring import (
    PROVIDERS,
    base_url,
    build_guards,
    cached_registry,
    deps_for,
    flush_recording,
    live_transport,
    transcript_transport,
)
from toolloop_cli.wiring.pricing import load_prices, price_for
from toolloop_cli.wiring.records import Pins, new_operation_record

from .names import check_name, check_task

EventSink = Callable[[str, dict[str, object]], None]


@dataclass
class RunOptions:
    """What ``toolloop run`` starts an operation with."""

    task: str
    registry: Path
    transcript: Path | None = None
    provider: str | None = None
    model: str | None = None
    tenant: str = "default"
    subject: str = "operator"
    #: explicit guards; when None they are built from the registry's ``defaults`` + overrides
    guards: Guards | None = None
    guard_overrides: dict[str, Any] = field(default_factory=dict)
    prices: Path | None = None
    stream: bool = False
    max_output_tokens: int | None = None
    #: write every exchange to this cassette (vcrpy format), resumes appending to it
    record: Path | None = None


@dataclass(frozen=True)
class Planned:
    """A new operation as ``plan`` checked it, not stored yet."""

    op: OperationRecord
    registry: Registry
    transport: Transport


def plan(
    options: RunOptions,
    *,
    store_file: Path | None,
    clock: Clock | None = None,
    transport: Transport | None = None,
) -> Planned:
    """Check everything ``options`` ask for (registry, guards, model source, prices, the
    ``--record`` target, given the store's file: None for PostgreSQL) and build the operation,
    touching no store: a run refused for its input creates and changes nothing."""
    check_task(options.task)
    check_name(options.tenant, "tenant")
    check_name(options.subject, "subject")
    registry = cached_registry(options.registry)
    guards = options.guards or _guards(registry, options.guard_overrides)
    op, transport = _new_operation(
        store_file, options, registry, guards, clock or SystemClock(), transport
    )
    return Planned(op, registry, transport)


def start(
    store: Store,
    options: RunOptions,
    *,
    clock: Clock | None = None,
    on_event: EventSink | None = None,
    transport: Transport | None = None,
    planned: Planned | None = None,
) -> loop.StepResult:
    """Create an operation and run it until it ends or waits for a human (``planned``: as
    ``plan`` checked it before the store was opened)."""
    planned = planned or plan(options, store_file=store.path, clock=clock, transport=transport)
    op = planned.op
    deps = deps_for(
        store, op, planned.registry, clock=clock, on_event=on_event, transport=planned.transport
    )
    loop.begin(deps, op, options.task)
    with lease.held(store, op.operation_id) as held:
        result = loop.run(deps, op.operation_id, after_step=_still_held(held), op=op)
        flush_recording(deps)
    return result


def submit(
    store: Store,
    options: RunOptions,
    *,
    clock: Clock | None = None,
    planned: Planned | None = None,
) -> OperationRecord:
    """Create an operation for a worker to run (``run --detach``): stored and announced,
    nothing sent to the model here. Its first step is a worker's."""
    planned = planned or plan(options, store_file=store.path, clock=clock)
    op = planned.op
    deps = deps_for(store, op, planned.registry, clock=clock, transport=planned.transport)
    loop.begin(deps, op, options.task)
    store.announce_runnable(op.operation_id)  # after the commit: a worker finds it stored
    return store.get_operation(op.operation_id)


def _guards(registry: Registry, overrides: dict[str, Any]) -> Guards:
    """The operation's guards; a per-tool limit must name a tool of the registry, as in its
    ``defaults`` (a misspelt name would otherwise limit nothing, silently)."""
    per_tool = overrides.get("max_calls_per_tool") or {}
    unknown = sorted(name for name in per_tool if name not in registry.tools)
    if unknown:
        raise UsageError(
            f"--max-calls-per-tool {unknown[0]}: not a tool of registry {registry.name} "
            f"(its tools: {', '.join(registry.tools)})"
        )
    return build_guards(registry, overrides)


def _still_held(held: lease.Lease) -> loop.AfterStep:
    """Stop after a committed step once the lease was taken over (its keeper found another
    token): the next step would only be refused at its commit, after a model request."""

    def after_step(_: loop.StepResult) -> None:
        held.check()

    return after_step


def _absolute(path: Path) -> Path:
    """The path a source is kept under: resolved for a file, only made absolute for a pipe or
    a device (``--transcript <(…)``: resolving ``/dev/fd/63`` names ``pipe:[…]``, which
    cannot be opened)."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except OSError:
        regular = True  # missing or unreadable: resolved, and the read says why
    return path.resolve() if regular else Path(os.path.abspath(path))


def _new_operation(
    store_file: Path | None,
    options: RunOptions,
    registry: Registry,
    guards: Guards,
    clock: Clock,
    transport: Transport | None,
) -> tuple[OperationRecord, Transport]:
    if (options.transcript is None) == (options.provider is None):
        raise UsageError("give exactly one of --transcript CASSETTE or --provider NAME")
    transcript: str | None = None
    url = ""
    if options.transcript is not None:
        transcript = str(_absolute(options.transcript))
        replay, (provider, api_family) = transcript_transport(Path(transcript))
        transport = transport or replay
        model = options.model or _recorded_model(replay) or "recorded"
    else:
        assert options.provider is not None
        if not options.model:
            raise UsageError("--model is required with --provider")
        provider, model = options.provider, options.model
        transport = transport or live_transport(provider)
        if provider not in PROVIDERS:
            known = ", ".join(sorted(PROVIDERS))
            raise UsageError(f"unknown provider {provider!r}; known: {known}")
        url = scrub_uri(base_url(provider))  # no user:password@ in the store
        spec = PROVIDERS[provider]
        api_family = spec.family
        provider = spec.provider  # gemini-generate is gemini
    record = str(_record_path(options, store_file)) if options.record is not None else None
    price = _price(model, options, guards)
    source: Source
    if transcript is not None:
        source = TranscriptSource(transcript=transcript, record=record, price=price)
    else:
        kind: Literal["live", "scripted"] = "live" if provider != "scripted" else "scripted"
        source = LiveSource(kind=kind, base_url=url, record=record, price=price)
    settings = ModelSettings(
        model=model, stream=options.stream, max_output_tokens=options.max_output_tokens
    )
    op = new_operation_record(
        task=options.task,
        provider=provider,
        api_family=api_family,
        settings=settings,
        source=source,
        pins=Pins.of(registry),
        guards=guards,
        tenant=options.tenant,
        subject=options.subject,
        now=clock.now(),
    )
    return op, transport


def _price(model: str, options: RunOptions, guards: Guards) -> JSONObject | None:
    """The model's price as the operation keeps it; a cost budget without one is refused."""
    price = price_for(model, load_prices(options.prices))
    if guards.max_cost_usd is not None and price is None:
        raise UsageError(
            f"no price known for model {model!r}: a cost budget needs one "
            "(add it to a price file and pass --prices FILE)"
        )
    return None if price is None else {"model": model, **price}


def _record_path(options: RunOptions, store_file: Path | None) -> Path:
    """Where ``--record`` writes: never a file this run reads or keeps, nor a non-cassette."""
    from toolloop_cli.transcripts.record_target import record_target

    assert options.record is not None
    return record_target(
        options.record,
        store=store_file,
        registry=options.registry,
        prices=options.prices,
        transcript=options.transcript,
    )


def _recorded_model(transport: Transport) -> str | None:
    return transport.recorded_model() if isinstance(transport, KnowsRecordedModel) else None


def open_operation(
    store: Store,
    operation_id: str,
    *,
    tenant: str | None = None,
    clock: Clock | None = None,
    on_event: EventSink | None = None,
    transport: Transport | None = None,
) -> Deps:
    """The dependencies to step an existing operation, from what the store recorded (and
    the audit log vouches for: its registry is loaded from the path the row names)."""
    op = store.get_logged_operation(operation_id, tenant)
    return _deps_of(store, op, clock=clock, on_event=on_event, transport=transport)


def _deps_of(
    store: Store,
    op: OperationRecord,
    *,
    clock: Clock | None = None,
    on_event: EventSink | None = None,
    transport: Transport | None = None,
) -> Deps:
    """``open_operation`` from the operation record already read."""
    if isinstance(op.source, ReplaySource):
        from toolloop_cli.replay.deps import replay_deps

        return replay_deps(store, op, clock=clock, on_event=on_event, transport=transport)
    registry = cached_registry(op.registry_path)
    return deps_for(store, op, registry, clock=clock, on_event=on_event, transport=transport)


def step(store: Store, operation_id: str, **kwargs: object) -> loop.StepResult:
    """Exactly one transition."""
    _refuse_terminal(store, operation_id, kwargs.get("tenant"))
    with lease.held(store, operation_id) as held:
        deps = open_operation(store, operation_id, **kwargs)  # type: ignore[arg-type]
        deps.taken_over = held.inherited
        result = loop.step(deps, operation_id)
        flush_recording(deps)
    return result


def resume(
    store: Store,
    operation_id: str,
    *,
    force_continue: bool = False,
    decided_by: str | None = None,
    taken: lease.Lease | None = None,
    **kwargs: object,
) -> loop.StepResult:
    """Continue until the operation ends or waits again.

    Continuing an ESCALATED operation is an operator's decision: ``force_continue`` with
    ``decided_by`` naming a policy approver, recorded in the transition log. ``taken``: the
    operation's lease, already claimed by a worker (given back when this returns).
    """
    tenant = kwargs.pop("tenant", None)
    try:
        _refuse_terminal(store, operation_id, tenant, force_continue)
    except BaseException:
        if taken is not None:
            taken.release()
        raise
    with _leased(store, operation_id, taken) as held:
        # read again under the lease: the one read the steps start from, as last logged
        op = store.get_logged_operation(operation_id, tenant if isinstance(tenant, str) else None)
        deps = _deps_of(store, op, **kwargs)  # type: ignore[arg-type]
        deps.taken_over = held.inherited
        if force_continue and op.state is OpState.ESCALATED:
            _check_operator(op, decided_by)
        result = loop.resume(
            deps,
            operation_id,
            force_continue=force_continue,
            decided_by=decided_by,
            after_step=_still_held(held),
            op=op,
        )
        flush_recording(deps)
    return result


@contextmanager
def _leased(store: Store, operation_id: str, taken: lease.Lease | None) -> Iterator[lease.Lease]:
    """The lease a worker claimed (released at the end), else one taken now."""
    if taken is None:
        with lease.held(store, operation_id) as held:
            yield held
        return
    try:
        yield taken
    finally:
        taken.release()


def _check_operator(op: OperationRecord, decided_by: str | None) -> None:
    """A forced continue is decided under the policy the operation continues under.

    That is the registry's current policy; a block edited under the operation's own
    revision (``policy_sha256`` differs, the revision does not) is refused, as for approvals.
    """
    if not decided_by:
        raise UsageError("--force-continue is an operator's decision: say who with --as SUBJECT")
    policy = cached_registry(op.registry_path).policy
    if op.policy_revision == policy.revision:
        changed = policy_rules.pin_problem(
            op.policy_revision,
            op.policy_sha256,
            policy.revision,
            policy.policy_sha256,
            pinned="started",
        )
        if changed is not None:
            raise ApprovalError(
                f"operation {op.operation_id} {changed}: nothing was run; restore the "
                "registry (a changed policy needs a new revision)"
            )
    refused = policy_rules.may_force_continue(policy, decided_by)
    if refused is not None:
        raise ApprovalError(refused)


def _refuse_terminal(
    store: Store, operation_id: str, tenant: object, force_continue: bool = False
) -> None:
    """Say so before building anything (no transport is opened for a finished operation)."""
    op = store.get_operation(operation_id, tenant if isinstance(tenant, str) else None)
    if op.state is OpState.ESCALATED:
        if force_continue:
            return
        raise loop.OperationTerminal(
            f"operation {operation_id} is ESCALATED ({op.reason}); nothing was run. After "
            f"checking, an operator may continue it: toolloop resume {operation_id} "
            "--force-continue --as SUBJECT"
        )
    if is_terminal(op.state):
        raise loop.OperationTerminal(
            f"operation {operation_id} is already {op.state.value}: nothing to do, "
            "nothing was run" + (f" ({op.reason})" if op.reason else "")
        )
