"""Toolboxes over a recording, for ``replay --results recorded``: no handler runs.

``RecordedToolbox`` answers each call with the result the recording sent back for that call
id (taken from the request that followed), and leaves lookup, validation and approval policy
to another toolbox: the registry's, or ``DeclaredTools`` when there is no registry, which
knows the tools the recording declared (and toolloop's own metadata about them when the
recording was made by toolloop). The engine cannot tell it is replaying.

A recorded error envelope becomes the execution status that produces it again; a call the
recording shows as RECONCILED times out here and is answered by ``reconcile``, so the engine
walks the same path it walked when it was recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolloop_cli.audit.canonical import canonical_bytes, sha256_of
from toolloop_cli.engine.ports import ModelAdapter, Toolbox
from toolloop_cli.engine.types import (
    CallContext,
    HttpResponse,
    JSONObject,
    ToolExecution,
    ToolInfo,
    ToolSpec,
)
from toolloop_cli.errors import ToolloopError
from toolloop_cli.tools import policy as policy_rules

from .divergence import (
    RecordedResult,
    ResultsReader,
    is_envelope,
    keyed,
    recorded_result,
    result_list,
)
from .split import Conversation

__all__ = ["DeclaredTools", "RecordedToolbox", "execution_of", "recorded_results", "results_reader"]

#: Error envelope codes a handler's outcome produces, and the execution status behind each.
_HANDLER_CODES = {
    "tool_error": "tool_error",
    "timeout": "timed_out",
    "result_too_large": "result_too_large",
    "invalid_result": "invalid_result",
    "tool_failed": "failed",
    "escalated": "escalate",
}
_ESCALATED_PREFIX = "the call was stopped for a person: "
DEFAULT_MAX_ARGUMENT_BYTES = 65_536

SchemaCheck = Callable[[str, JSONObject], list[str]]


class DeclaredTools:
    """Lookup and validation over the tools a recording declared (no handlers).

    ``meta`` is toolloop's per-tool metadata from the cassette (approval, side effects,
    intent fields); a tool without it is a read that needs no approval.
    """

    def __init__(
        self,
        specs: Sequence[ToolSpec],
        check: SchemaCheck,
        meta: Mapping[str, Mapping[str, Any]] | None = None,
        policy_revision: str = "recorded",
        approval_ttl_s: int = 3600,
    ) -> None:
        self._specs = list(specs)
        self._by_name = {spec.name: spec for spec in specs}
        self._check = check
        self._meta = meta or {}
        self._policy_revision = policy_revision
        self._ttl = approval_ttl_s
        self._sha256 = sha256_of([spec.model_dump() for spec in specs])

    @property
    def registry_sha256(self) -> str:
        return self._sha256

    @property
    def policy_revision(self) -> str:
        return self._policy_revision

    @property
    def policy_sha256(self) -> str | None:
        return None  # a recording names its policy's revision, not its block

    @property
    def policy_document(self) -> JSONObject | None:
        return None

    @property
    def approval_ttl_s(self) -> int:
        return self._ttl

    def pin_problem(self, revision: str, sha256: str | None) -> str | None:
        return policy_rules.pin_problem(revision, sha256, self._policy_revision, None)

    def specs(self) -> list[ToolSpec]:
        return self._specs

    def lookup(self, name: str) -> ToolInfo | None:
        spec = self._by_name.get(name)
        if spec is None:
            return None
        meta = self._meta.get(name, {})
        fields = meta.get("key_fields")
        return ToolInfo(
            name=name,
            schema_version=str(meta.get("schema_version", "recorded")),
            side_effecting=bool(meta.get("side_effecting", False)),
            needs_approval=bool(meta.get("needs_approval", False)),
            key_fields=tuple(str(f) for f in fields) if isinstance(fields, list) else None,
            sha256=sha256_of(spec.model_dump()),
            max_argument_bytes=int(meta.get("max_argument_bytes", DEFAULT_MAX_ARGUMENT_BYTES)),
            has_reconcile=bool(meta.get("has_reconcile", False)),
            sequential=bool(meta.get("sequential", False)),
        )

    def validate(self, name: str, arguments: JSONObject) -> list[str]:
        return self._check(name, arguments)

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution:
        return ToolExecution("failed", error=f"{name} has no handler: it was only recorded")

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None:
        return None


class RecordedToolbox:
    """A ``Toolbox`` whose handlers answer with the recording's results, by call id."""

    def __init__(
        self,
        policy: Toolbox,
        results: Mapping[str, RecordedResult],
        recorded_states: Mapping[str, str] | None = None,
    ) -> None:
        self.policy = policy
        self.results = results
        self.recorded_states = recorded_states or {}
        #: call ids answered from the recording, in order
        self.answered: list[str] = []

    @property
    def registry_sha256(self) -> str:
        return self.policy.registry_sha256

    @property
    def policy_revision(self) -> str:
        return self.policy.policy_revision

    @property
    def policy_sha256(self) -> str | None:
        return self.policy.policy_sha256

    @property
    def policy_document(self) -> JSONObject | None:
        return self.policy.policy_document

    @property
    def approval_ttl_s(self) -> int:
        return self.policy.approval_ttl_s

    def pin_problem(self, revision: str, sha256: str | None) -> str | None:
        return self.policy.pin_problem(revision, sha256)

    def specs(self) -> list[ToolSpec]:
        return self.policy.specs()

    def lookup(self, name: str) -> ToolInfo | None:
        return self.policy.lookup(name)

    def validate(self, name: str, arguments: JSONObject) -> list[str]:
        return self.policy.validate(name, arguments)

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution:
        self.answered.append(context.call_id)
        reconciled = self.recorded_states.get(context.call_id) == "RECONCILED"
        return execution_of(self.results.get(context.call_id), reconciled=reconciled)

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None:
        result = self.results.get(context.call_id)
        if self.recorded_states.get(context.call_id) != "RECONCILED" or result is None:
            return None
        return execution_of(result)


def execution_of(result: RecordedResult | None, reconciled: bool = False) -> ToolExecution:
    """The handler outcome that makes the engine send ``result`` again."""
    if result is None:
        return ToolExecution("failed", error="the recording has no result for this call")
    if reconciled:
        return ToolExecution("timed_out", error="timed out, as recorded; reconciled next")
    value = result.value
    if is_envelope(value):
        if value["ok"]:
            return _ok(value["result"])
        code, message = value["error"].get("code"), str(value["error"].get("message", ""))
        status = _HANDLER_CODES.get(code) if isinstance(code, str) else None
        if status is None:
            return ToolExecution(
                "failed", error=f"the recording answered with {code!r}, which no handler produces"
            )
        if status == "escalate":
            message = message.removeprefix(_ESCALATED_PREFIX)
        return ToolExecution(status, error=message)
    if result.is_error:
        text = value if isinstance(value, str) else canonical_bytes(value).decode("utf-8")
        return ToolExecution("tool_error", error=text)
    return _ok(value)


def _ok(value: Any) -> ToolExecution:
    return ToolExecution("ok", value=value, result_bytes=len(canonical_bytes(value)))


def results_reader(adapter: object) -> ResultsReader:
    """The adapter's own reader of results in a request when it has one, else the helper."""
    method = getattr(adapter, "request_results", None)
    if not callable(method):
        return result_list

    def read(api: tuple[str, str], body: Any) -> list[RecordedResult]:
        if not isinstance(body, dict):
            return []
        found = method(body)
        return [recorded_result(cid, out, flag) for cid, (out, flag) in found.items()]

    return read


def recorded_results(
    adapter: ModelAdapter, conversation: Conversation
) -> dict[str, RecordedResult]:
    """Each call's recorded result, by the call id the engine will see.

    The recorded answers are parsed with the adapter, and each call is paired with a result
    the next request brought back: by id, else by position (generateContent sends no ids).
    """
    read = results_reader(adapter)
    bodies = conversation.bodies
    found: dict[str, RecordedResult] = {}
    for index, interaction in enumerate(conversation.interactions[:-1]):
        before = keyed(read(conversation.api, bodies[index]))
        after = keyed(read(conversation.api, bodies[index + 1]))
        new = [result for key, result in after.items() if key not in before]
        recorded = interaction.response
        headers = {name: ", ".join(values) for name, values in recorded.headers.items()}
        try:
            turn = adapter.parse_response(HttpResponse(recorded.status, headers, recorded.body))
        except ToolloopError:
            continue
        by_id = {result.call_id: result for result in new}
        unpaired = [r for r in new if r.call_id not in {c.call_id for c in turn.calls}]
        for call in turn.calls:
            result = by_id.get(call.call_id) or (unpaired.pop(0) if unpaired else None)
            if result is not None:
                found.setdefault(call.call_id, result)
    return found
