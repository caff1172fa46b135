"""Toolboxes over a recording, for ``replay --results recorded``: no handler runs.

``RecordedToolbox`` answers each call with the result the recording sent back for it (taken
from the request that followed its answer, ``pairing``), and leaves lookup, validation and
approval policy to another toolbox: the registry's, or ``DeclaredTools`` when there is no
registry, which knows the tools each recorded request declared (tools may be added, loaded
or replaced as a conversation goes on) and toolloop's own metadata about them when the
recording was made by toolloop. The engine cannot tell it is replaying.

Both ask a ``Cursor`` (the replay transport) how many recorded answers were served: the next
request declares what its recorded request declared, and a call is looked up among the tools
of the request its answer came to, and answered with what followed that answer.

A recorded error envelope becomes the execution status that produces it again; a call the
recording shows as RECONCILED times out here and is answered by ``reconcile``, so the engine
walks the same path it walked when it was recorded.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from toolloop_cli.audit.canonical import canonical_bytes, sha256_of
from toolloop_cli.engine.parallel import Finished, Running
from toolloop_cli.engine.ports import Toolbox
from toolloop_cli.engine.types import (
    CallContext,
    ExecutionStatus,
    JSONObject,
    RecordedResult,
    ToolExecution,
    ToolInfo,
    ToolSpec,
)
from toolloop_cli.tools import policy as policy_rules

from .divergence import is_envelope

__all__ = ["Cursor", "DeclaredTools", "RecordedToolbox", "execution_of"]

#: Error envelope codes a handler's outcome produces, and the execution status behind each.
S = ExecutionStatus

#: the error codes of a result envelope, by the handler outcome that writes each
_HANDLER_CODES = {
    "tool_error": S.TOOL_ERROR,
    "timeout": S.TIMED_OUT,
    "result_too_large": S.RESULT_TOO_LARGE,
    "invalid_result": S.INVALID_RESULT,
    "tool_failed": S.FAILED,
    "escalated": S.ESCALATE,
}
_ESCALATED_PREFIX = "the call was stopped for a person: "
DEFAULT_MAX_ARGUMENT_BYTES = 65_536

SchemaCheck = Callable[[ToolSpec, JSONObject], list[str]]
#: an id the engine qualified with its turn
_QUALIFIED = re.compile(r"(.+)_t[0-9]+")


class Cursor(Protocol):
    """How far a replay is: the number of recorded answers served so far."""

    @property
    def answered(self) -> int: ...


class _Start:
    answered = 0


class _AnsweredAtOnce(ABC):
    """``start`` for a toolbox whose answers are recorded: ``execute`` returns at once, so
    the started work is done before it is handed back."""

    @abstractmethod
    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution: ...

    def start(
        self,
        name: str,
        arguments: JSONObject,
        context: CallContext,
        on_done: Callable[[], None],
    ) -> Running[ToolExecution]:
        return answered_at_once(self.execute(name, arguments, context), on_done)


class DeclaredTools(_AnsweredAtOnce):
    """Lookup and validation over the tools the recorded requests declared (no handlers).

    ``declared[k]`` are the tools of recorded request ``k``. ``meta`` is toolloop's per-tool
    metadata from the cassette (approval, side effects, intent fields). A tool without it
    belongs to another tool's recording, so toolloop cannot know what it does: it needs no
    approval, and each recorded turn is its own intent (a repeated identical call is answered
    with what the recording answered it then, never with an earlier result).
    """

    def __init__(
        self,
        declared: Sequence[Sequence[ToolSpec]],
        check: SchemaCheck,
        meta: Mapping[str, Mapping[str, Any]] | None = None,
        policy_revision: str = "recorded",
        approval_ttl_s: int = 3600,
        cursor: Cursor | None = None,
    ) -> None:
        self._declared = [list(specs) for specs in declared] or [[]]
        self._check = check
        self._meta = meta or {}
        self._policy_revision = policy_revision
        self._ttl = approval_ttl_s
        self.cursor: Cursor = cursor or _Start()
        self._sha256 = sha256_of([[s.model_dump() for s in specs] for specs in self._declared])

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

    def _at(self, index: int) -> tuple[int, list[ToolSpec]]:
        index = max(0, min(index, len(self._declared) - 1))
        return index, self._declared[index]

    def specs(self) -> list[ToolSpec]:
        """The tools the next request declares: those its recorded request declared."""
        return self._at(self.cursor.answered)[1]

    def _spec(self, name: str) -> tuple[int, ToolSpec | None]:
        index, specs = self._at(self.cursor.answered - 1)
        return index, next((s for s in specs if s.name == name), None)

    def lookup(self, name: str) -> ToolInfo | None:
        """A tool the request answered last declared (a call comes from that answer)."""
        index, spec = self._spec(name)
        if spec is None:
            return None
        meta = self._meta.get(name)
        fields = meta.get("key_fields") if meta else None
        return ToolInfo(
            name=name,
            schema_version=str(meta.get("schema_version", "recorded")) if meta else f"turn-{index}",
            side_effecting=bool(meta.get("side_effecting", False)) if meta else True,
            needs_approval=bool(meta.get("needs_approval", False)) if meta else False,
            key_fields=tuple(str(f) for f in fields) if isinstance(fields, list) else None,
            sha256=sha256_of(spec.model_dump()),
            max_argument_bytes=int(
                meta.get("max_argument_bytes", DEFAULT_MAX_ARGUMENT_BYTES)
                if meta
                else DEFAULT_MAX_ARGUMENT_BYTES
            ),
            has_reconcile=bool(meta.get("has_reconcile", False)) if meta else False,
            sequential=bool(meta.get("sequential", False)) if meta else False,
            provider_type=spec.provider_type,
        )

    def validate(self, name: str, arguments: JSONObject) -> list[str]:
        spec = self._spec(name)[1]
        return [] if spec is None else self._check(spec, arguments)

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution:
        return ToolExecution(S.FAILED, error=f"{name} has no handler: it was only recorded")

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None:
        return None


class RecordedToolbox(_AnsweredAtOnce):
    """A ``Toolbox`` whose handlers answer with the recording's results.

    ``results[k]`` holds, by call id, the results recorded for the calls of answer ``k``;
    ``recorded_states`` the recorded end state of each call, by (answer ``k``, call id).
    """

    def __init__(
        self,
        policy: Toolbox,
        results: Sequence[Mapping[str, RecordedResult]],
        recorded_states: Mapping[tuple[int, str], str] | None = None,
        cursor: Cursor | None = None,
        foreign: bool = False,
    ) -> None:
        self.policy = policy
        self.results = list(results)
        self.recorded_states = recorded_states or {}
        self.cursor: Cursor = cursor or _Start()
        #: another tool's recording: a call it holds no result for was never answered there
        #: (its client rewrote the history), which is an error for the model, not a fault
        self.foreign = foreign
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

    def _reconciled(self, call_id: str) -> bool:
        """The recording shows this call of the answer served last RECONCILED."""
        return self.recorded_states.get((self.cursor.answered - 1, call_id)) == "RECONCILED"

    def _result(self, call_id: str) -> RecordedResult | None:
        """The result recorded for a call of the answer served last. The engine may qualify
        an id the adapter made up with its turn (``<id>_t<turn>``): that id counts too."""
        index = self.cursor.answered - 1
        if not 0 <= index < len(self.results):
            return None
        turn = self.results[index]
        qualified = _QUALIFIED.fullmatch(call_id)
        return turn.get(call_id) or (turn.get(qualified.group(1)) if qualified else None)

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution:
        self.answered.append(context.call_id)
        reconciled = self._reconciled(context.call_id)
        result = self._result(context.call_id)
        if result is None and self.foreign:
            return ToolExecution(S.TOOL_ERROR, error="the recording has no result for this call")
        return execution_of(result, reconciled=reconciled)

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None:
        result = self._result(context.call_id)
        if not self._reconciled(context.call_id) or result is None:
            return None
        return execution_of(result)


def answered_at_once(
    execution: ToolExecution, on_done: Callable[[], None]
) -> Running[ToolExecution]:
    """A recorded answer as started work: done already (no handler runs)."""
    on_done()
    return Finished(execution)


def execution_of(result: RecordedResult | None, reconciled: bool = False) -> ToolExecution:
    """The handler outcome that makes the engine send ``result`` again."""
    if result is None:
        return ToolExecution(S.FAILED, error="the recording has no result for this call")
    if reconciled:
        return ToolExecution(S.TIMED_OUT, error="timed out, as recorded; reconciled next")
    value = result.value
    if is_envelope(value):
        if value["ok"]:
            return _ok(value["result"])
        code, message = value["error"].get("code"), str(value["error"].get("message", ""))
        status = _HANDLER_CODES.get(code) if isinstance(code, str) else None
        if status is None:
            return ToolExecution(
                S.FAILED, error=f"the recording answered with {code!r}, which no handler produces"
            )
        if status is S.ESCALATE:
            message = message.removeprefix(_ESCALATED_PREFIX)
        return ToolExecution(status, error=message)
    if result.is_error:
        text = value if isinstance(value, str) else canonical_bytes(value).decode("utf-8")
        return ToolExecution(S.TOOL_ERROR, error=text)
    return _ok(value)


def _ok(value: Any) -> ToolExecution:
    return ToolExecution(S.OK, value=value, result_bytes=len(canonical_bytes(value)))
