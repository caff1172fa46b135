"""The interfaces the engine calls. Implementations live outside the engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from .parallel import Running
from .records import ApprovalRecord, CallRecord, OperationRecord, TurnRecord
from .states import ApprovalStatus, CallState, OpState
from .types import (
    CallContext,
    HttpRequest,
    HttpResponse,
    JSONObject,
    ModelSettings,
    ModelTurn,
    RecordedResult,
    ResultForModel,
    ToolExecution,
    ToolInfo,
    ToolSpec,
)


class ModelAdapter(Protocol):
    """One provider API family. Stateless: the conversation is handed in every time.

    - ``start`` returns the conversation items for a new task;
    - ``build_request`` turns the conversation so far into the exact request to send;
    - ``parse_response`` classifies an answer into a ``ModelTurn``; it raises
      ``MalformedProviderPayload`` for an answer without the documented shape, and never
      returns calls from a turn that is not ``TOOL_PROPOSALS``. A streamed answer
      (``response.chunks``) is consumed and its raw bytes left in ``response.body``; while it
      streams, ``on_event("call_streaming", {"call_id", "name"})`` says a call is being
      prepared (never that it runs);
    - ``result_items`` renders the results of one turn in the provider's return shape, in the
      order given; it is handed exactly one result per call of that turn.
    """

    provider: str
    api_family: str
    revision: str

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]: ...

    def build_request(
        self,
        conversation: Sequence[JSONObject],
        tools: Sequence[ToolSpec],
        settings: ModelSettings,
    ) -> HttpRequest: ...

    def parse_response(
        self,
        response: HttpResponse,
        on_event: Callable[[str, dict[str, object]], None] | None = None,
    ) -> ModelTurn: ...

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]: ...


@runtime_checkable
class RecordingReader(Protocol):
    """What an adapter reads from a recorded request of its own API family, for replays.

    Optional: an adapter that has these methods can have recordings of its API replayed (the
    scripted adapter has none). Each method takes a request body as parsed JSON, accepts
    whatever spelling the provider accepts (Gemini's snake_case and camelCase alike) and
    returns ``None`` or ``[]`` for what a request does not say; none of them raises.

    - ``request_items``: the conversation items the request carries, as this adapter keeps a
      conversation: an operation started from them sends this conversation again;
    - ``continues_from``: a key naming the provider-side state the request continues (a
      previous answer's response id, ``conversation:<id>``), or None for a stateless one;
    - ``task_text``: the user's words the request answers (its last user text);
    - ``declared_tools``: every tool it declares, functions and provider-defined ones, in
      the order declared (``ToolSpec.declaration`` holds each one as recorded);
    - ``recorded_settings``: the ``ModelSettings`` fields it shows (model, output cap,
      streaming, instructions), ``uri`` being where it was sent;
    - ``request_results``: the tool results it carries, in order;
    - ``comparable``: an item as conversations are matched: what a client may legitimately
      change when it echoes an item back (a moved cache marker, a null field, a spelling)
      removed.
    """

    def request_items(self, body: Any) -> list[JSONObject]: ...

    def continues_from(self, body: Any) -> str | None: ...

    def task_text(self, body: Any) -> str | None: ...

    def declared_tools(self, body: Any) -> list[ToolSpec]: ...

    def recorded_settings(self, body: Any, uri: str) -> JSONObject: ...

    def request_results(self, body: Any) -> list[RecordedResult]: ...

    def comparable(self, item: Any) -> Any: ...


class Transport(Protocol):
    """Sends a request and returns the answer: live HTTP, or a recording played back.

    Raises ``AdapterError`` (retryable or not) for a request that got no answer, and
    ``TranscriptError`` when a recording has no answer left.
    """

    name: str

    def send(self, request: HttpRequest) -> HttpResponse: ...


@runtime_checkable
class Flushable(Protocol):
    """A transport that keeps something to write out once a run ends (``--record``'s
    cassette, whose metadata says how the operation ended). Optional."""

    def flush(self) -> None: ...


@runtime_checkable
class KnowsRecordedModel(Protocol):
    """A transport over a recording that can say which model the recording asked for, so an
    operation started from it is shown under that model. Optional."""

    def recorded_model(self) -> str | None: ...


class Toolbox(Protocol):
    """The registry as the engine uses it: lookup by exact name, validation, execution."""

    @property
    def registry_sha256(self) -> str: ...

    @property
    def policy_revision(self) -> str: ...

    @property
    def policy_sha256(self) -> str | None:
        """The canonical hash of the policy block (None: a recording's policy, no block)."""
        ...

    @property
    def policy_document(self) -> JSONObject | None:
        """The policy block that hash is of, kept with each approval that pins it."""
        ...

    @property
    def approval_ttl_s(self) -> int: ...

    def pin_problem(self, revision: str, sha256: str | None) -> str | None:
        """Why an approval pinned to this policy may not be used under the current one."""
        ...

    def specs(self) -> list[ToolSpec]: ...

    def lookup(self, name: str) -> ToolInfo | None: ...

    def validate(self, name: str, arguments: JSONObject) -> list[str]: ...

    def execute(self, name: str, arguments: JSONObject, context: CallContext) -> ToolExecution: ...

    def start(
        self,
        name: str,
        arguments: JSONObject,
        context: CallContext,
        on_done: Callable[[], None],
    ) -> Running[ToolExecution]:
        """Start the handler (``execute`` without the wait); ``on_done`` is called once it
        has returned or raised, from whichever thread ran it."""
        ...

    def reconcile(
        self, name: str, arguments: JSONObject, context: CallContext
    ) -> ToolExecution | None: ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class StorePort(Protocol):
    """The writes and reads the engine makes; every write inside ``transaction()``."""

    def transaction(self, *, before_wait: bool = False) -> AbstractContextManager[None]:
        """All of a state change or none of it; ``before_wait``: something outside the store
        (a side effect's handler, a model request) follows, so a held commit cannot wait any
        longer. (Read handlers may run with the commit held: the engine ``release``s it if
        they take long.)"""
        ...

    def holding(self) -> AbstractContextManager[None]:
        """Within it, commits may be held open and joined until the next wait or barrier."""
        ...

    def release(self) -> None:
        """Commit the held state changes now: the engine is about to wait outside the store."""
        ...

    def after_commit(self, announce: Callable[[], None]) -> None:
        """Call ``announce`` once the open transaction has committed (never on a rollback)."""
        ...

    def barrier(self) -> None:
        """Make the open transaction durable through a power loss once it commits (fsync)."""
        ...

    def get_operation(self, operation_id: str, tenant: str | None = None) -> OperationRecord: ...

    def insert_operation(self, op: OperationRecord) -> None: ...

    def save_operation(self, op: OperationRecord, expected_state: OpState) -> None: ...

    def log_transition(
        self,
        operation_id: str,
        kind: str,
        source: str | None,
        target: str,
        at: str,
        reason: str | None = None,
        call_id: str | None = None,
        response_id: str | None = None,
    ) -> None: ...

    def conversation(self, operation_id: str) -> list[JSONObject]: ...

    def append_items(self, operation_id: str, items: Sequence[JSONObject]) -> None: ...

    def insert_turn(
        self,
        turn: TurnRecord,
        request_items: int,
        response_body: bytes,
        tools: Sequence[ToolSpec] | None = None,
    ) -> None: ...

    def insert_call(self, call: CallRecord) -> None: ...

    def save_call(self, call: CallRecord, expected_state: CallState) -> None: ...

    def calls(self, operation_id: str, turn_idx: int | None = None) -> list[CallRecord]: ...

    def check_call_logged(self, call: CallRecord) -> None:
        """Raise ``TamperedStore`` unless the call's row is what the audit log last recorded."""
        ...

    def turn_and_unsettled_calls(
        self, operation_id: str, turn_idx: int
    ) -> tuple[list[CallRecord], list[CallRecord]]:
        """The calls of one turn in order, and the operation's calls of other turns still in
        a state they may leave (in turn order), read together."""
        ...

    def get_call(self, operation_id: str, response_id: str, call_id: str) -> CallRecord | None:
        """The one call a (response id, call id) pair names: ids are unique per response only."""
        ...

    def calls_of_response(
        self, operation_id: str, response_id: str, call_ids: Sequence[str]
    ) -> list[CallRecord]: ...

    def earlier_calls(
        self,
        operation_id: str,
        before_turn: int,
        intents: Sequence[tuple[str, str]],
        keys: Sequence[str] = (),
    ) -> list[CallRecord]: ...

    def insert_approval(self, apr: ApprovalRecord, policy: JSONObject | None = None) -> None: ...

    def get_approval(self, approval_id: str, tenant: str | None = None) -> ApprovalRecord: ...

    def approvals(self, operation_id: str) -> list[ApprovalRecord]: ...

    def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        by: str | None,
        at: str,
        reason: str | None,
    ) -> None: ...

    def audited_bindings(
        self, operation_id: str, calls: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], str | None]:
        """The binding the audit log last recorded for each (response id, call id) given."""
        ...

    def check_approval_logged(self, approval_id: str) -> None:
        """Raise ``TamperedStore`` unless the approval is what the audit log last recorded."""
        ...
