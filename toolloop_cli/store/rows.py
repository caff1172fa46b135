"""Records to table rows and back: the column lists and the one place that maps them.

The audit log records each row write under these column names, so the mapping is kept in one
module that the store and the audit checks agree on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from toolloop_cli.engine.clock import parse_iso
from toolloop_cli.engine.records import (
    ApprovalRecord,
    CallRecord,
    Counters,
    Guards,
    OperationRecord,
    TurnRecord,
)
from toolloop_cli.engine.sources import parse_source
from toolloop_cli.engine.states import ApprovalStatus, CallState, OpState
from toolloop_cli.engine.types import ApiError, TurnOutcome, Usage
from toolloop_cli.errors import StoreError

from .unreadable import (
    BAD_VALUE,
    TRANSPORTS,
    Table,
    json_object,
    loads,
    reason_of,
    tampered,
    tampered_row,
)

OP_COLUMNS = (
    "operation_id, state, task, provider, api_family, model, transport, adapter_revision, "
    "tenant, subject, registry_name, registry_revision, registry_path, registry_sha256, "
    "policy_revision, settings_json, source_json, guards_json, counters_json, current_turn, "
    "final_text, reason, created_at, updated_at, deadline_at, policy_sha256, divergence_json"
)


OP_NAMES = tuple(c.strip() for c in OP_COLUMNS.split(","))
#: ``response_id`` with ``call_id`` names the call (ids are unique per response only); rows
#: written before the ``transition_response_id`` migration have none
TRANSITION_NAMES = (
    "id",
    "operation_id",
    "kind",
    "call_id",
    "source",
    "target",
    "reason",
    "at",
    "response_id",
)


def _json(value: Any) -> str:
    """A JSON column as stored. NaN and the infinities have no JSON form: written, every later
    read of the row would call the store tampered, so the write is refused instead."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except ValueError:
        raise StoreError(
            "refused to store a value holding NaN or an infinity, which JSON has no form for"
        ) from None


def dump(value: Any) -> str | None:
    return None if value is None else _json(value)


#: id -> (value, its JSON): a JSON column is dumped once per value object. Records are
#: copied shallowly from write to write (``model_copy``), so a call's arguments and results
#: and an operation's counters are the same objects in each; nothing changes them in place
#: (handlers get deep copies, counters are replaced). The value is held while cached, so its
#: id cannot be reused by another object.
_DUMPED: dict[int, tuple[object, str]] = {}
_DUMPED_MAX = 256


def dump_once(value: object, make: Callable[[], object] | None = None) -> str | None:
    """``dump(value)`` (or ``dump(make())``), remembered for this very object."""
    if value is None:
        return None
    hit = _DUMPED.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    text = _json(value if make is None else make())
    if len(_DUMPED) >= _DUMPED_MAX:
        _DUMPED.clear()
    _DUMPED[id(value)] = (value, text)
    return text


def load(text: str | None) -> Any:
    return None if text is None else loads(text)


CALL_COLUMNS = (
    "operation_id, turn_idx, seq, response_id, call_id, name, raw_arguments, arguments_json,"
    " argument_error, state, idempotency_key, arguments_sha256, tool_sha256, approval_id,"
    " model_result_json, protected_audit_json, started_at, finished_at, result_sha256,"
    " call_binding_sha256"
)
CALL_NAMES = tuple(c.strip() for c in CALL_COLUMNS.split(","))

APR_COLUMNS = (
    "approval_id, operation_id, response_id, call_id, tool, tenant, requested_by, status,"
    " arguments_sha256, policy_revision, tool_sha256, requested_at, expires_at, decided_by,"
    " decided_at, reason, policy_sha256"
)
APR_NAMES = tuple(c.strip() for c in APR_COLUMNS.split(","))


def as_row(named: Mapping[str, Any] | None, names: Sequence[str]) -> tuple[Any, ...] | None:
    """A row given by column name as a tuple in ``names`` order (None when it lacks one)."""
    if named is None:
        return None
    try:
        return tuple(map(named.__getitem__, names))
    except KeyError:
        return None


def op_row(op: OperationRecord) -> tuple[Any, ...]:
    return (
        op.operation_id,
        op.state.value,
        op.task,
        op.provider,
        op.api_family,
        op.model,
        op.transport,
        op.adapter_revision,
        op.tenant,
        op.subject,
        op.registry_name,
        op.registry_revision,
        op.registry_path,
        op.registry_sha256,
        op.policy_revision,
        dump_once(op.settings),
        dump_once(op.source, op.source.stored),
        dump_once(op.guards, op.guards.model_dump),
        dump_once(op.counters, op.counters.model_dump),
        op.current_turn,
        op.final_text,
        op.reason,
        op.created_at,
        op.updated_at,
        op.deadline_at,
        op.policy_sha256,
        None if op.divergence_check is None else dump(op.divergence_check),
    )


def _no_bytes(table: Table, r: Sequence[Any]) -> None:
    """Refuse a BLOB in a column toolloop writes text or numbers to: pydantic would decode
    it as text, so a status stored as bytes would read as the status yet match no query."""
    for column, value in zip(table.columns, r, strict=False):
        if isinstance(value, bytes | memoryview):
            raise tampered(table, r, column, "bytes where toolloop writes text or a number")


def op_from_row(r: Sequence[Any]) -> OperationRecord:
    _no_bytes(OPERATIONS, r)
    try:
        source = parse_source(r[6], loads(r[16]))
    except BAD_VALUE as exc:
        column = "source_json" if r[6] in TRANSPORTS else "transport"
        raise tampered(OPERATIONS, r, column, reason_of(exc)) from None
    if isinstance(r[12], str) and "\x00" in r[12]:  # the registry is opened by this path
        raise tampered(OPERATIONS, r, "registry_path", "a path with a NUL byte, which no file has")
    try:
        # the engine and the report parse these later: a bad one is refused here, by name
        parse_iso(r[22])
        parse_iso(r[23])
        parse_iso(r[24])
        return OperationRecord(
            operation_id=r[0],
            state=OpState(r[1]),
            task=r[2],
            provider=r[3],
            api_family=r[4],
            model=r[5],
            adapter_revision=r[7],
            tenant=r[8],
            subject=r[9],
            registry_name=r[10],
            registry_revision=r[11],
            registry_path=r[12],
            registry_sha256=r[13],
            policy_revision=r[14],
            settings=loads(r[15]),
            source=source,
            guards=Guards(**loads(r[17])),
            counters=Counters(**loads(r[18])),
            current_turn=r[19],
            final_text=r[20],
            reason=r[21],
            created_at=r[22],
            updated_at=r[23],
            deadline_at=r[24],
            policy_sha256=r[25],
            divergence_check=None if r[26] is None else loads(r[26]),
        )
    except BAD_VALUE as exc:
        raise tampered_row(OPERATIONS, r, exc) from None


def call_row(c: CallRecord) -> tuple[Any, ...]:
    return (
        c.operation_id,
        c.turn_idx,
        c.seq,
        c.response_id,
        c.call_id,
        c.name,
        c.raw_arguments,
        dump_once(c.arguments),
        c.argument_error,
        c.state.value,
        c.idempotency_key,
        c.arguments_sha256,
        c.tool_sha256,
        c.approval_id,
        dump_once(c.model_result),
        dump_once(c.protected_audit),
        c.started_at,
        c.finished_at,
        c.result_sha256,
        c.call_binding_sha256,
    )


def _moment(text: str | None) -> None:
    """A timestamp column that may be empty: when set, it must be ``iso``'s form."""
    if text is not None:
        parse_iso(text)


def call_from_row(r: Sequence[Any]) -> CallRecord:
    _no_bytes(CALLS, r)
    try:
        # started_at: a takeover waits out a handler's timeout from it; both are reported
        _moment(r[16])
        _moment(r[17])
        return CallRecord(
            operation_id=r[0],
            turn_idx=r[1],
            seq=r[2],
            response_id=r[3],
            call_id=r[4],
            name=r[5],
            raw_arguments=r[6],
            arguments=load(r[7]),
            argument_error=r[8],
            state=CallState(r[9]),
            idempotency_key=r[10],
            arguments_sha256=r[11],
            tool_sha256=r[12],
            approval_id=r[13],
            model_result=load(r[14]),
            protected_audit=load(r[15]),
            started_at=r[16],
            finished_at=r[17],
            result_sha256=r[18],
            call_binding_sha256=r[19],
        )
    except BAD_VALUE as exc:
        raise tampered_row(CALLS, r, exc) from None


def apr_from_row(r: Sequence[Any]) -> ApprovalRecord:
    _no_bytes(APPROVALS, r)
    try:
        parse_iso(r[11])  # requested_at: the report and the traces time the wait by it
        parse_iso(r[12])  # expires_at: parsed again when the approval is decided or resumed
        _moment(r[14])  # decided_at, when decided
        return ApprovalRecord(**dict(zip(APR_NAMES, r, strict=True)))
    except BAD_VALUE as exc:
        raise tampered_row(APPROVALS, r, exc) from None


TURN_COLUMNS = (
    "operation_id, idx, response_id, outcome, finish_reason, text, detail, request_sha256,"
    " response_sha256, usage_json, error_json, created_at"
)
TURN_NAMES = tuple(c.strip() for c in TURN_COLUMNS.split(","))


def turn_from_row(r: Sequence[Any]) -> TurnRecord:
    _no_bytes(TURNS, r)
    try:
        parse_iso(r[11])  # created_at: the report times each answer by it
        return TurnRecord(
            operation_id=r[0],
            idx=r[1],
            response_id=r[2],
            outcome=TurnOutcome(r[3]),
            finish_reason=r[4],
            text=r[5],
            detail=r[6],
            request_sha256=r[7],
            response_sha256=r[8],
            usage=Usage(**loads(r[9])),
            error=ApiError(**loads(r[10])) if r[10] else None,
            created_at=r[11],
        )
    except BAD_VALUE as exc:
        raise tampered_row(TURNS, r, exc) from None


def response_body_from(operation_id: str, idx: Any, body: Any) -> bytes:
    """A turn's answer bytes as stored: text is taken as its UTF-8 bytes, as ``verify``
    hashes it; anything else was never written."""
    if isinstance(body, str):
        return body.encode("utf-8")
    if not isinstance(body, bytes | memoryview):
        row = (operation_id, idx, body)
        raise tampered(TURN_BODIES, row, "response_body", "neither bytes nor text")
    return bytes(body)


#: what a read of the state log gives of each transition (``Store.transitions``)
LOGGED_NAMES = TRANSITION_NAMES[2:]
#: the columns a transition needs filled; the others may be empty
_FILLED = ("kind", "target", "at")


#: the states each kind of state log entry moves between
_LOGGED_STATES: dict[str, frozenset[str]] = {
    "operation": frozenset(OpState),
    "call": frozenset(CallState),
    "approval": frozenset(ApprovalStatus),
    "approval_refused": frozenset(ApprovalStatus),  # a decision refused: the status it kept
}


def transition_from_row(operation_id: str, r: Sequence[Any]) -> dict[str, Any]:
    """One entry of an operation's state log: every column is text (or empty, where it may
    be), its kind one toolloop logs, its states of that kind, and ``at`` in ``iso``'s form,
    which the report and the traces measure time by."""
    row = dict(zip(LOGGED_NAMES, r, strict=True))
    for name, value in row.items():
        if value is None and name not in _FILLED:
            continue
        try:
            if not isinstance(value, str):
                raise TypeError(f"{type(value).__name__} where text belongs")
            if name == "at":
                parse_iso(value)
            elif name == "kind" and value not in _LOGGED_STATES:
                raise ValueError("not a kind of state change toolloop logs")
            elif name in ("source", "target") and value not in _LOGGED_STATES.get(
                row["kind"], (value,)
            ):
                raise ValueError(f"not a state of a {row['kind']} entry")
        except BAD_VALUE as exc:
            raise tampered(TRANSITIONS, (operation_id, *r), name, reason_of(exc)) from None
    return row


# -- rows toolloop did not write ---------------------------------------------------------------
#
# A store file is writable by whoever can reach it, so a row may hold what toolloop never
# writes. Its conversion above fails as it would anyway; only then is the row looked at again,
# to say which column holds what, so a row that reads cleanly pays for a ``try`` and no more.

OPERATIONS = Table(
    "operations",
    OP_NAMES,
    "operation {operation_id}",
    {
        "state": OpState,
        "settings_json": loads,
        "guards_json": json_object,
        "counters_json": json_object,
        "divergence_json": load,
        "created_at": parse_iso,
        "updated_at": parse_iso,
        "deadline_at": parse_iso,
    },
)
CALLS = Table(
    "calls",
    CALL_NAMES,
    "call {call_id} of operation {operation_id}",
    {
        "state": CallState,
        "arguments_json": load,
        "model_result_json": load,
        "protected_audit_json": load,
        "started_at": _moment,
        "finished_at": _moment,
    },
)
APPROVALS = Table(
    "approvals",
    APR_NAMES,
    "approval {approval_id} of operation {operation_id}",
    {"requested_at": parse_iso, "expires_at": parse_iso, "decided_at": _moment},
)
TRANSITIONS = Table(
    "transitions",
    ("operation_id", *LOGGED_NAMES),
    "a transition of operation {operation_id}",
    {},
)
#: a turn's answer as ``Store.response_bodies`` reads it
TURN_BODIES = Table(
    "turns", ("operation_id", "idx", "response_body"), "turn {idx} of operation {operation_id}", {}
)
TURNS = Table(
    "turns",
    TURN_NAMES,
    "turn {idx} of operation {operation_id}",
    {
        "outcome": TurnOutcome,
        "usage_json": json_object,
        "error_json": partial(json_object, nullable=True),
        "created_at": parse_iso,
    },
)
