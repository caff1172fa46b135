"""Refund scenarios for the crash harness, and a driver that plays the operator.

``refund_scenario()`` is the bundled OpenAI recording (4 turns, 3 calls, 1 approval);
``refund50_scenario(dir)`` generates a recording in the same API shape whose 7 turns propose
50 calls: two order look-ups, 24 refund drafts and 24 refund submissions, each submission
awaiting a human approval. Amounts are distinct, so each intent has its own key and the
ledger can be checked per intent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support.paths import ROOT
from toolloop_cli.engine.states import OpState, is_terminal
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store
from toolloop_cli.transcripts.cassette import (
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
)

REFUNDS = ROOT / "registries" / "refunds.yaml"
REFUND_OPENAI = ROOT / "transcripts" / "refund-openai.yaml"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."
APPROVER = "ops-lead"
MOMENT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
URI = "https://api.openai.com/v1/responses"

#: the amounts (cents) of the 50-call scenario's two rounds of drafts and submissions
ROUNDS = (tuple(range(101, 113)), tuple(range(201, 213)))


class FixedClock:
    """Every process of a scenario sees the same instant, so its runs are reproducible."""

    def now(self) -> datetime:
        return MOMENT


@dataclass(frozen=True)
class Scenario:
    """What to run: a task, a registry and a recording, and who approves."""

    name: str
    cassette: Path
    registry: Path = REFUNDS
    task: str = TASK
    approver: str = APPROVER
    guards: dict[str, Any] = field(default_factory=lambda: {"max_parallel": 1})

    def options(self) -> operations.RunOptions:
        return operations.RunOptions(
            task=self.task,
            registry=self.registry,
            transcript=self.cassette,
            guard_overrides=dict(self.guards),
        )


def refund_scenario() -> Scenario:
    return Scenario("refund", REFUND_OPENAI)


def refund50_scenario(folder: Path, **guards: Any) -> Scenario:
    """The 50-call scenario, its recording written to ``folder`` (once)."""
    path = folder / "refund50-openai.yaml"
    if not path.exists():
        write_refund50_cassette(path)
    return Scenario("refund50", path, guards={"max_parallel": 1, **guards})


def refund50_serial_scenario(folder: Path) -> Scenario:
    """The same 50 calls one per turn: every per-turn boundary is met at each call index."""
    path = folder / "refund50-serial-openai.yaml"
    if not path.exists():
        turns: list[list[tuple[str, Any]] | str] = [[("get_order", {"order_id": "ord_1001"})]]
        for amount in (a for amounts in ROUNDS for a in amounts):
            arguments = {"order_id": "ord_1001", "amount_cents": amount}
            turns += [[("create_refund_draft", arguments)], [("submit_refund", arguments)]]
        turns.append([("get_order", {"order_id": "ord_1002"})])
        write_cassette(path, [*turns, "Refunded ord_1001 in 24 parts."])
    return Scenario("refund50-serial", path, guards={"max_parallel": 1, "max_turns": 60})


def write_refund50_cassette(path: Path) -> None:
    """Seven recorded OpenAI Responses answers proposing the 50 calls, then a final text."""
    turns: list[list[tuple[str, Any]] | str] = [[("get_order", {"order_id": "ord_1001"})]]
    for amounts in ROUNDS:
        turns.append(
            [("create_refund_draft", {"order_id": "ord_1001", "amount_cents": a}) for a in amounts]
        )
        turns.append(
            [("submit_refund", {"order_id": "ord_1001", "amount_cents": a}) for a in amounts]
        )
    turns.append([("get_order", {"order_id": "ord_1002"})])
    write_cassette(path, [*turns, "Refunded ord_1001 in 24 parts."])


def write_cassette(path: Path, turns: list[list[tuple[str, Any]] | str]) -> Path:
    """An OpenAI Responses recording: each turn a list of (tool, arguments) or a final text.

    Arguments given as a string are the raw argument text, exactly as the model "sent" it.
    """
    answers = [
        _text_answer(n, t) if isinstance(t, str) else _calls_answer(n, t)
        for n, t in enumerate(turns)
    ]
    dump_cassette([_interaction(n, body) for n, body in enumerate(answers)], path)
    return path


def _interaction(n: int, body: dict[str, Any]) -> Interaction:
    request = RecordedRequest(
        "POST",
        URI,
        {"content-type": ["application/json"]},
        json.dumps({"model": "gpt-4.1-2025-04-14", "note": f"generated request {n}"}).encode(),
    )
    response = RecordedResponse(
        200, {"content-type": ["application/json"]}, json.dumps(body).encode()
    )
    return Interaction.of(request, response)


def _response(n: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"resp_gen{n:02d}",
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    }


def _calls_answer(n: int, calls: list[tuple[str, Any]]) -> dict[str, Any]:
    output = [
        {
            "type": "function_call",
            "id": f"fc_gen{n:02d}_{i:02d}",
            "call_id": f"call_gen{n:02d}_{i:02d}",
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            "status": "completed",
        }
        for i, (name, arguments) in enumerate(calls)
    ]
    return _response(n, output)


def _text_answer(n: int, text: str) -> dict[str, Any]:
    message = {
        "type": "message",
        "id": f"msg_gen{n:02d}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return _response(n, [message])


@dataclass
class Drive:
    """How a drive ended: the terminal state, and how many resumes it took."""

    state: OpState
    resumes: int = 0
    forced: bool = False


def drive(store_path: Path, scenario: Scenario, *, max_rounds: int = 200) -> Drive:
    """Play the operator until the operation is terminal: start it if it is not there yet,
    approve every pending call, resume, and force-continue an escalation once.

    Runs wholly from the store, so it continues whatever a killed process left behind.
    """
    clock = FixedClock()
    store = open_store(store_path)
    try:
        ops = store.list_operations()
        if not ops:
            operations.start(store, scenario.options(), clock=clock)
            ops = store.list_operations()
        op_id = ops[0].operation_id
        done = Drive(store.get_operation(op_id).state)
        for _ in range(max_rounds):
            op = store.get_operation(op_id)
            done.state = op.state
            if op.state is OpState.WAITING_APPROVAL:
                for apr in store.pending_approvals():
                    approvals.approve(store, apr.approval_id, scenario.approver, clock=clock)
            elif op.state is OpState.ESCALATED and not done.forced:
                done.forced = True
            elif is_terminal(op.state):
                return done
            done.resumes += 1
            operations.resume(
                store,
                op_id,
                force_continue=op.state is OpState.ESCALATED,
                decided_by=scenario.approver,
                clock=clock,
            )
        raise AssertionError(f"{op_id} did not settle in {max_rounds} rounds")
    finally:
        store.close()
