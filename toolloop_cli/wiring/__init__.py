"""The composition root: builds the store, adapter, transport and toolbox an operation runs with.

This is the one place that knows every package; the engine only sees the ports.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, assert_never

from toolloop_cli.adapters.providers import BASE_URL_ENV, BY_NAME, ProviderSpec
from toolloop_cli.engine.clock import SystemClock
from toolloop_cli.engine.context import Deps
from toolloop_cli.engine.parallel import Running
from toolloop_cli.engine.ports import (
    Clock,
    Flushable,
    ModelAdapter,
    Toolbox,
    Transport,
)
from toolloop_cli.engine.records import Guards, OperationRecord
from toolloop_cli.engine.sources import LiveSource, ReplaySource, TranscriptSource
from toolloop_cli.engine.types import CallContext, JSONObject, ToolExecution, ToolInfo, ToolSpec
from toolloop_cli.errors import UsageError
from toolloop_cli.store import Store
from toolloop_cli.tools import policy as policy_rules
from toolloop_cli.tools.context import ToolContext
from toolloop_cli.tools.dispatcher import (
    execute as run_handler,
    reconcile as run_reconcile,
    start as start_handler,
)
from toolloop_cli.tools.registry import MAX_REGISTRY_BYTES, Registry, ToolDef, load_registry
from toolloop_cli.tools.strict_yaml import read_capped_bytes
from toolloop_cli.wiring import failpoints, pricing

#: ``--provider`` name → where it is reached live and how (the provider table's entries)
PROVIDERS: Mapping[str, ProviderSpec] = BY_NAME


class RegistryToolbox:
    """The engine's ``Toolbox`` over a loaded registry: exact-name lookup, strict checks.

    A provider-defined tool exists only for its own provider: with ``provider`` given, the
    others' are neither declared nor found (a call to one is a call to an unknown tool).
    """

    def __init__(
        self,
        registry: Registry,
        data_dir: Path,
        now: Callable[[], float] = time.time,
        provider: str | None = None,
    ) -> None:
        self.registry = registry
        self.data_dir = data_dir
        self.now = now  # the engine's clock, so deadlines and timeouts agree
        self.provider = provider
        self._specs = [spec for spec in registry.tool_specs() if spec.provider in (None, provider)]
        # built once: the registry is frozen, and a reloaded one gets a toolbox of its own
        self._infos = {
            tool.name: _info(tool)
            for tool in registry.tools.values()
            if tool.provider_tool is None or tool.provider_tool.provider == provider
        }

    @property
    def registry_sha256(self) -> str:
        return self.registry.sha256

    @property
    def policy_revision(self) -> str:
        return self.registry.policy.revision

    @property
    def policy_sha256(self) -> str | None:
        return self.registry.policy.policy_sha256

    @property
    def policy_document(self) -> JSONObject | None:
        return policy_rules.policy_document(self.registry.policy)

    @property
    def approval_ttl_s(self) -> int:
        return self.registry.policy.approval_ttl_s

    def pin_problem(self, revision: str, sha256: str | None) -> str | None:
        policy = self.registry.policy
        return policy_rules.pin_problem(revision, sha256, policy.revision, policy.policy_sha256)

    def specs(self) -> list[ToolSpec]:
        return self._specs

    def lookup(self, name: str) -> ToolInfo | None:
        return self._infos.get(name)

    def validate(self, name: str, arguments: JSONObject) -> list[str]:
        return self._tool(name).argument_violations(arguments)

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution:
        return run_handler(self._tool(name), arguments, self._context(name, context), now=self.now)

    def start(
        self,
        name: str,
        arguments: JSONObject,
        context: CallContext,
        on_done: Callable[[], None],
    ) -> Running[ToolExecution]:
        tool, own = self._tool(name), self._context(name, context)
        return start_handler(tool, arguments, own, now=self.now, on_done=on_done)

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None:
        return run_reconcile(
            self._tool(name), arguments, self._context(name, context), now=self.now
        )

    def _tool(self, name: str) -> ToolDef:
        tool = self.registry.get(name)
        if tool is None:  # the engine only asks for tools it looked up: reaching here is a bug
            raise AssertionError(
                f"internal error: tool {name!r} was never looked up in registry "
                f"{self.registry.name}"
            )
        return tool

    def _context(self, name: str, context: CallContext) -> ToolContext:
        return ToolContext(
            operation_id=context.operation_id,
            call_id=context.call_id,
            idempotency_key=context.idempotency_key,
            tenant=context.tenant,
            subject=context.subject,
            deadline=context.deadline,
            tool=name,
            data_dir=self.data_dir,
            max_result_bytes=context.max_result_bytes,
            timeout_ms=context.timeout_ms,
        )


def _info(tool: ToolDef) -> ToolInfo:
    """What the engine knows of a registered tool."""
    return ToolInfo(
        name=tool.name,
        schema_version=tool.schema_version,
        side_effecting=tool.side_effecting,
        needs_approval=tool.approval == "always",
        key_fields=tool.key_fields,
        sha256=tool.sha256,
        max_argument_bytes=tool.max_argument_bytes,
        has_reconcile=tool.reconcile is not None,
        sequential=tool.sequential,
        provider_type=tool.provider_tool.type if tool.provider_tool else None,
        timeout_ms=tool.timeout_ms,
    )


def make_adapter(provider: str, api_family: str, base_url: str | None = None) -> ModelAdapter:
    from toolloop_cli.adapters import get_adapter

    return get_adapter(provider, api_family, base_url=base_url)


def transcript_transport(path: Path, skip: int = 0) -> tuple[Transport, tuple[str, str]]:
    """A replay transport over a cassette, positioned after ``skip`` answered requests."""
    from toolloop_cli.transcripts.cassette import load_cassette
    from toolloop_cli.transcripts.transport import ReplayTransport, cassette_api

    cassette = load_cassette(path)
    api = cassette_api(cassette)
    transport = ReplayTransport(cassette, api, start=skip)
    return transport, api


def live_transport(provider: str) -> Transport:
    """An httpx transport with the provider's key from its environment variable.

    A key that cannot be sent as it is (a CR from a CRLF key file, whitespace, non-ASCII) is
    refused here, naming the variable but none of the key, before any operation exists.
    ``TOOLLOOP_REQUEST_TIMEOUT_S`` sets the total time one request may take (default 600 s);
    ``TOOLLOOP_ALLOW_INSECURE_HTTP=1`` lets the key go over plaintext http to other hosts.
    """
    from toolloop_cli.adapters.live import REQUEST_TIMEOUT_S, LiveTransport, key_problem

    info = PROVIDERS.get(provider)
    if info is None:
        raise UsageError(f"unknown provider {provider!r}; known: {', '.join(sorted(PROVIDERS))}")
    if not info.key_env:
        raise UsageError(f"the {provider} provider has no live transport")
    key = os.environ.get(info.key_env, "")
    if not key:
        raise UsageError(f"{info.key_env} is not set: the {provider} provider needs an API key")
    problem = key_problem(key)
    if problem is not None:
        raise UsageError(f"{info.key_env} {problem}; fix the variable")
    raw = os.environ.get("TOOLLOOP_REQUEST_TIMEOUT_S", "").strip()
    try:
        limit = float(raw) if raw else REQUEST_TIMEOUT_S
    except ValueError:
        limit = -1.0
    if not 0 < limit < float("inf"):
        raise UsageError(
            f"TOOLLOOP_REQUEST_TIMEOUT_S must be a positive number of seconds, not {raw!r}"
        )
    return LiveTransport(
        info.provider,
        key,
        request_timeout_s=limit,
        allow_insecure_http=_insecure_http_allowed(),
    )


def _insecure_http_allowed() -> bool:
    return os.environ.get("TOOLLOOP_ALLOW_INSECURE_HTTP", "") == "1"


def base_url(provider: str) -> str:
    """The provider's base URL; plaintext http to a host that is not loopback is refused."""
    from toolloop_cli.adapters.live import plaintext_host

    info = PROVIDERS[provider]
    given = info.base_env and os.environ.get(info.base_env)
    if given:  # the built-in URLs are known good (the scripted one is not http)
        _check_url(info.base_env, given)
    url = given or info.base_url
    host = plaintext_host(url)
    if host is not None and not _insecure_http_allowed():
        raise UsageError(
            f"{info.base_env} is plaintext http:// to {host}, which is not loopback: the key "
            "would travel unencrypted; use https://, or set TOOLLOOP_ALLOW_INSECURE_HTTP=1"
        )
    return url


def _check_url(name: str, url: str) -> None:
    """An http(s) URL with a host (nothing else can be sent to); the URL is not echoed, as
    it may carry credentials."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port  # each raises on a malformed host or port
    except ValueError as exc:
        raise UsageError(f"{name} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise UsageError(f"{name} must be an http:// or https:// URL with a host")


def stored_base_url(provider: str, stored: str | None) -> str | None:
    """The base URL to send to: the store keeps it with credentials scrubbed, so the
    environment's URL is used when it is the same URL once scrubbed."""
    from toolloop_cli.transcripts.cassette import scrub_uri

    env = BASE_URL_ENV.get(provider, ("", ""))[0]
    current = os.environ.get(env) if env else None
    return current if stored and current and scrub_uri(current) == stored else stored


def deps_for(
    store: Store,
    op: OperationRecord,
    registry: Registry | None,
    *,
    clock: Clock | None = None,
    on_event: Callable[[str, dict[str, object]], None] | None = None,
    transport: Transport | None = None,
    toolbox: Toolbox | None = None,
    adapter: ModelAdapter | None = None,
) -> Deps:
    """Everything needed to step ``op``, rebuilt from what the store recorded about it.

    ``toolbox`` replaces the registry's (a replay answers calls from its recording); an
    operation started with ``--record`` gets its transport wrapped in a recorder. ``adapter``
    is the one its caller already built for this operation (it is built once).
    """
    base: str | None = None
    record: str | None = None
    price: JSONObject | None = None
    data_dir = store.data_dir
    match op.source:
        case TranscriptSource():
            if transport is None:
                path = Path(op.source.transcript)
                transport, _ = transcript_transport(path, op.counters.requests)
            record, price = op.source.record, op.source.price
        case LiveSource():
            transport = transport or live_transport(op.provider)
            base = stored_base_url(op.provider, op.source.base_url)
            record, price = op.source.record, op.source.price
        case ReplaySource():
            if transport is None:  # replay.deps builds it from the cassette
                raise AssertionError("internal error: a replay's transport is handed in")
            data_dir = Path(op.source.data_dir) if op.source.data_dir else data_dir
        case _:  # pragma: no cover - the union has no other member
            assert_never(op.source)
    adapter = adapter or make_adapter(op.provider, op.api_family, base)
    engine_clock: Clock = clock if clock is not None else SystemClock()
    if toolbox is None:
        if registry is None:
            raise UsageError(f"operation {op.operation_id} needs its registry to run tools")
        toolbox = RegistryToolbox(
            registry, data_dir, lambda: engine_clock.now().timestamp(), provider=op.provider
        )
    if record:
        transport = recording_transport(store, op, transport, toolbox, record)
    deps = Deps(
        store=store,
        adapter=adapter,
        transport=transport,
        toolbox=toolbox,
        clock=engine_clock,
        failpoint=failpoints.hit,
    )
    if price is not None:
        rates = price
        deps.cost_of = lambda model, usage: pricing.cost(rates, usage)
    if on_event is not None:
        deps.on_event = on_event
    return deps


def recording_transport(
    store: Store, op: OperationRecord, transport: Transport, toolbox: Toolbox, record: str
) -> Transport:
    """``transport`` wrapped to append each exchange to ``op``'s ``--record`` cassette."""
    from toolloop_cli.transcripts.record import (
        RecordingTransport,
        answered_requests,
        operation_metadata,
    )

    if isinstance(transport, RecordingTransport):
        return transport
    op_id = op.operation_id

    def metadata() -> dict[str, Any]:
        current = store.get_operation(op_id)
        return operation_metadata(current, store.calls(op_id), store.approvals(op_id), toolbox)

    keep = answered_requests(store.turns(op_id))
    return RecordingTransport(transport, record, metadata=metadata, keep=keep)


def flush_recording(deps: Deps) -> None:
    """Rewrite a ``--record`` cassette's metadata after a run (its end state, decisions)."""
    if isinstance(deps.transport, Flushable):
        deps.transport.flush()


#: registries already loaded, by (resolved path, sha256 of the file's bytes)
_REGISTRIES: dict[tuple[str, str, bool], Registry] = {}


def cached_registry(path: str | Path, *, import_handlers: bool = True) -> Registry:
    """``load_registry``, once per file content: a run's approvals and resumes reuse it.

    Keyed by the file's bytes, so an edited registry is loaded (and checked) afresh; a
    parse-only load (``import_handlers=False``, for views that only read the policy and the
    tools' risk) is cached apart and never runs anything.
    """
    resolved = Path(path).resolve()
    if not resolved.is_file():  # a pipe is read once, by the load; a missing file it reports
        return load_registry(path, import_handlers=import_handlers)
    try:
        digest = hashlib.sha256(read_capped_bytes(resolved, MAX_REGISTRY_BYTES)).hexdigest()
    except (OSError, ValueError):  # ValueError: over the size limit
        return load_registry(path, import_handlers=import_handlers)  # it reports the problem
    key = (str(resolved), digest, import_handlers)
    cached = _REGISTRIES.get(key)
    if cached is None:
        if len(_REGISTRIES) >= 32:
            _REGISTRIES.clear()
        cached = _REGISTRIES[key] = load_registry(path, import_handlers=import_handlers)
    return cached


def build_guards(registry: Registry, overrides: dict[str, Any]) -> Guards:
    """Built-in defaults, then the registry's ``defaults``, then the command-line flags.

    The defaults were checked when the registry was loaded (``tools.registry``: a registry
    whose defaults a run would refuse does not load), so what can fail here is a flag.
    """
    values: dict[str, Any] = dict(registry.defaults)
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Guards.checked(values)
    except ValueError as exc:
        raise UsageError(f"guard {exc}") from None
