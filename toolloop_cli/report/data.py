"""The data of a run report: one plain dict, built from the read models and the store.

Everything a report shows is here, as JSON values (no markup): the template only lays it
out. Strings from a model, a cassette or a handler are kept as they are; escaping them is
the renderer's job (Jinja2 autoescape), never this module's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolloop_cli import __version__
from toolloop_cli.engine.clock import SystemClock, iso, parse_iso
from toolloop_cli.engine.records import CallRecord, OperationRecord, TurnRecord
from toolloop_cli.engine.sources import ReplaySource
from toolloop_cli.engine.types import TurnOutcome
from toolloop_cli.service.diff import diff
from toolloop_cli.service.verify import verify_store
from toolloop_cli.service.views import summary
from toolloop_cli.store import Store

__all__ = ["budgets", "histories", "report_data"]

Row = dict[str, Any]


def report_data(
    store: Store,
    operation_id: str,
    *,
    against: str | None = None,
    tenant: str | None = None,
    generated_at: str | None = None,
) -> dict[str, Any]:
    """The whole report of one operation (and, with ``against``, its diff with another run)."""
    op = store.get_operation(operation_id, tenant)
    if against is not None and against.startswith("op_") and not Path(against).is_file():
        store.get_operation(against, tenant)  # another tenant's run is "not found" here too
    transitions = store.transitions(operation_id)
    turns = store.turns(operation_id)
    calls = store.calls(operation_id)
    logged = histories(turns, calls, transitions)
    return {
        "toolloop_version": __version__,
        "generated_at": generated_at or iso(SystemClock().now()),
        "operation": summary(op),
        "budgets": budgets(op),
        "turns": _turns(turns, calls, transitions),
        "calls": _calls(turns, calls, logged),
        "approvals": _approvals(store, operation_id, calls, logged),
        "transitions": [t for t in transitions if t["kind"] == "operation"],
        "verify": _verify(store, operation_id),
        "replay": _replay(op),
        "diff": _diff(store, operation_id, against) if against is not None else None,
    }


def budgets(op: OperationRecord) -> list[Row]:
    """Each budget used against its limit (``limit`` None: no limit was set)."""
    guards, counters = op.guards, op.counters
    rows: list[Row] = [
        _budget("model turns", counters.turns, guards.max_turns, "max_turns"),
        _budget("tool calls", counters.tool_calls, guards.max_tool_calls, "max_tool_calls"),
    ]
    for tool, limit in sorted(guards.max_calls_per_tool.items()):
        used = counters.tool_calls_by_tool.get(tool, 0)
        rows.append(_budget(f"calls of {tool}", used, limit, "max_calls_per_tool"))
    rows += [
        _budget("retries", counters.retries, guards.max_retries, "max_retries"),
        _budget("input tokens", counters.input_tokens, guards.max_input_tokens, "max_input_tokens"),
        _budget(
            "output tokens", counters.output_tokens, guards.max_output_tokens, "max_output_tokens"
        ),
        _budget("total tokens", counters.total_tokens, guards.max_total_tokens, "max_total_tokens"),
        _budget("cost (USD)", counters.cost_usd, guards.max_cost_usd, "max_cost_usd"),
        _budget("time (s)", _elapsed_s(op), guards.deadline_s, "deadline_s"),
    ]
    return rows


def _budget(name: str, used: float, limit: float | None, guard: str) -> Row:
    return {"name": name, "guard": guard, "used": used, "limit": limit}


def _elapsed_s(op: OperationRecord) -> float:
    """From the start to the last write: how much of the deadline the operation spent."""
    seconds = (parse_iso(op.updated_at) - parse_iso(op.created_at)).total_seconds()
    return round(max(seconds, 0.0), 3)


def _turns(turns: list[TurnRecord], calls: list[CallRecord], transitions: list[Row]) -> list[Row]:
    """Each model request with its answer; ``latency_ms`` runs from the operation entering
    MODEL_REQUESTED for that request to the answer's commit (None where the log cannot say)."""
    entries = [
        t for t in transitions if t["kind"] == "operation" and t["target"] == "MODEL_REQUESTED"
    ]
    by_turn: dict[int, list[Row]] = {}
    for n, c in enumerate(calls):
        by_turn.setdefault(c.turn_idx, []).append(
            {"anchor": _anchor(n), "name": c.name, "state": c.state.value}
        )
    rows = []
    for turn in turns:
        entered = entries[turn.idx]["at"] if turn.idx < len(entries) else None
        rows.append(
            {
                "index": turn.idx,
                "response_id": turn.response_id,
                "outcome": turn.outcome.value,
                "finish_reason": turn.finish_reason,
                "text": turn.text,
                "detail": turn.detail,
                "error": turn.error.model_dump() if turn.error else None,
                "usage": turn.usage.model_dump(),
                "request_sha256": turn.request_sha256,
                "response_sha256": turn.response_sha256,
                "requested_at": entered,
                "answered_at": turn.created_at,
                "latency_ms": _latency_ms(entered, turn.created_at),
                "calls": by_turn.get(turn.idx, []),
            }
        )
    return rows


def _latency_ms(start: str | None, end: str) -> float | None:
    if start is None:
        return None
    milliseconds = (parse_iso(end) - parse_iso(start)).total_seconds() * 1000
    return round(milliseconds, 1) if milliseconds >= 0 else None


def _anchor(index: int) -> str:
    """The element id of a call: by position, never from a model-supplied id."""
    return f"call-{index + 1}"


def histories(
    turns: list[TurnRecord], calls: list[CallRecord], transitions: list[Row]
) -> dict[tuple[str, int, str], list[Row]]:
    """The call and approval entries of the state log, by (kind, turn, call id).

    A model may use one call id in two turns: an entry names its call by response id and call
    id. Entries from before the log kept the response id name the call id only; each turn
    that proposed calls logged MODEL_REQUESTED -> VALIDATING when its calls were stored, so
    such an entry belongs to the latest turn proposed so far that has a call with that id.
    """
    proposing = iter(t.idx for t in turns if t.outcome is TurnOutcome.TOOL_PROPOSALS)
    ids: dict[int, set[str]] = {}
    turn_of = {(c.response_id, c.call_id): c.turn_idx for c in calls}
    for call in calls:
        ids.setdefault(call.turn_idx, set()).add(call.call_id)
    reached: list[int] = []
    found: dict[tuple[str, int, str], list[Row]] = {}
    for entry in transitions:
        kind, call_id, response_id = entry["kind"], entry["call_id"], entry.get("response_id")
        if kind == "operation" and (entry["source"], entry["target"]) == _PROPOSED:
            turn = next(proposing, None)
            if turn is not None:
                reached.append(turn)
        elif kind in ("call", "approval") and call_id is not None and response_id is not None:
            owner = turn_of.get((response_id, call_id), -1)
            found.setdefault((kind, owner, call_id), []).append(entry)
        elif kind in ("call", "approval") and call_id is not None:
            guess = next((k for k in reversed(reached) if call_id in ids.get(k, ())), None)
            if guess is None:  # logged before its turn's marker: the first turn with that id
                guess = next((k for k in sorted(ids) if call_id in ids[k]), -1)
            found.setdefault((kind, guess, call_id), []).append(entry)
    return found


_PROPOSED = ("MODEL_REQUESTED", "VALIDATING")


def _calls(
    turns: list[TurnRecord], calls: list[CallRecord], logged: dict[tuple[str, int, str], list[Row]]
) -> list[Row]:
    proposed_at = {t.idx: t.created_at for t in turns}
    rows = []
    for n, call in enumerate(calls):
        history: list[Row] = [
            {
                "source": None,
                "target": "PROPOSED",
                "reason": f"proposed in turn {call.turn_idx}",
                "at": proposed_at.get(call.turn_idx),
            }
        ]
        history += logged.get(("call", call.turn_idx, call.call_id), [])
        rows.append(
            {
                "anchor": _anchor(n),
                "turn": call.turn_idx,
                "seq": call.seq,
                "response_id": call.response_id,
                "call_id": call.call_id,
                "name": call.name,
                "state": call.state.value,
                "arguments": call.arguments,
                "raw_arguments": call.raw_arguments,
                "argument_error": call.argument_error,
                "idempotency_key": call.idempotency_key,
                "approval_id": call.approval_id,
                "arguments_sha256": call.arguments_sha256,
                "tool_sha256": call.tool_sha256,
                "result_sha256": call.result_sha256,
                "call_binding_sha256": call.call_binding_sha256,
                "model_result": call.model_result,
                "protected_audit": call.protected_audit,
                "started_at": call.started_at,
                "finished_at": call.finished_at,
                "history": history,
            }
        )
    return rows


def _approvals(
    store: Store,
    operation_id: str,
    calls: list[CallRecord],
    logged: dict[tuple[str, int, str], list[Row]],
) -> list[Row]:
    turn_of = {(c.response_id, c.call_id): c.turn_idx for c in calls}
    rows = []
    for apr in store.approvals(operation_id):
        row: Row = apr.model_dump()
        turn = turn_of.get((apr.response_id, apr.call_id), -1)
        row["history"] = logged.get(("approval", turn, apr.call_id), [])
        rows.append(row)
    return rows


def _verify(store: Store, operation_id: str) -> Row:
    """``toolloop verify OP`` as data: its counts, the chain head, and every mismatch."""
    report = verify_store(store, operation_id)
    return {
        "ok": report.ok,
        "counts": report.counts,
        "head": report.head.text(),
        "mismatches": [m.as_dict() for m in report.mismatches],
    }


def _replay(op: OperationRecord) -> Row | None:
    """What a replay found (kept on the operation by ``replay``); None for other runs."""
    source = op.source
    if not isinstance(source, ReplaySource):
        return None
    check = op.divergence_check
    return {
        "cassette": source.replay,
        "results": source.results,
        "conversation": source.conversation,
        "interactions": source.interactions,
        "strict_requests": source.strict_requests,
        # None: replayed before divergences were kept; the replay has to be run again
        "requests_compared": check.get("requests") if isinstance(check, dict) else None,
        "divergences": check.get("divergences") if isinstance(check, dict) else None,
    }


def _diff(store: Store, operation_id: str, against: str) -> Row:
    found = diff(store, operation_id, against)
    return {
        "a": found.a,
        "b": found.b,
        "equal": found.equal,
        "differences": [d.as_json() for d in found.differences],
    }
