"""Generate the six branches of the refund exercise as transcripts, for each provider API.

Each branch runs the real engine, registry and refund handlers with a provider's adapter
(OpenAI Responses, Anthropic Messages, Gemini Interactions) against a scripted model (a
transport that answers in that API's shape, see ``branch_answers``), and is written by the
same recorder as ``toolloop run --record``: every request in a transcript is exactly what
toolloop sends, and the ``toolloop`` metadata holds the approvals and call states. Ids, times
and token counts derive from the branch name: running this again writes the same bytes.

    python -m scripts.gen_branches [--out transcripts/branches]
    python -m scripts.gen_branches --check   # exit 1 if a file would change
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store
from toolloop_cli.wiring import records

from . import ROOT
from .branch_answers import PROVIDERS, START, Item, Provider, Scripted, call, cut_call, say

REGISTRY = ROOT / "registries" / "refunds.yaml"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."
APPROVER = "ops-lead"
ORDER = {"order_id": "ord_1001"}
DRAFT = {"order_id": "ord_1001", "amount_cents": 4999, "reason": "arrived damaged"}
SUBMIT = {"order_id": "ord_1001", "amount_cents": 4999}
DONE = (
    "I looked up order ord_1001 (delivered, $49.99), drafted a full refund and submitted it "
    "after approval: refund rf_1001_1 for $49.99 is submitted."
)
#: variables that would point a provider elsewhere or change its URL
_BASE_URLS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GEMINI_BASE_URL")


class Clock:
    """The engine's clock while generating: fixed, moved only by the branch script."""

    def __init__(self) -> None:
        self.moment = START

    def now(self) -> datetime:
        return self.moment


Turn = list[Item]


@dataclass
class Branch:
    name: str
    title: str
    state: str
    turns: list[Turn]
    #: what happens at each pause for approval: "approve" or "expire", in order
    waits: list[str] = field(default_factory=list)
    guards: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    max_output_tokens: int | None = None
    sees: str = ""
    recover: str = ""


LEAD_IN: list[Turn] = [
    [call("get_order", ORDER)],
    [
        say("The order was delivered for $49.99; I'll draft a full refund."),
        call("create_refund_draft", DRAFT),
    ],
]
SUBMITTED: list[Turn] = [[call("submit_refund", SUBMIT)], [say(DONE)]]

BRANCHES = [
    Branch(
        "happy_path",
        "happy path",
        "COMPLETED",
        [*LEAD_IN, *SUBMITTED],
        waits=["approve"],
        sees="one pause for approval, then the final text; one refund in the ledger",
        recover="nothing to recover",
    ),
    Branch(
        "max_tokens_mid_call",
        "max tokens cut mid-call",
        "INCOMPLETE",
        [*LEAD_IN, [cut_call("submit_refund", {"order_id": "ord_1001"})]],
        max_output_tokens=200,
        sees="INCOMPLETE (exit 12): the answer hit the output-token limit; the cut "
        "submit_refund is never a call, nothing was submitted (the draft exists)",
        recover="run again with a larger --turn-max-output-tokens; the open draft is reused",
    ),
    Branch(
        "unknown_tool",
        "unknown tool",
        "COMPLETED",
        [
            [call("get_order", ORDER)],
            [call("refund_order", SUBMIT)],
            [
                say("There is no refund_order tool; I'll draft the refund first."),
                call("create_refund_draft", DRAFT),
            ],
            *SUBMITTED,
        ],
        waits=["approve"],
        sees="refund_order INVALID with an unknown_tool error envelope; the model switches to "
        "the declared tools and the run completes",
        recover="nothing to recover: the model did; the registry stays the only allowlist",
    ),
    Branch(
        "approval_expired",
        "approval expired",
        "COMPLETED",
        [
            *LEAD_IN,
            [call("submit_refund", SUBMIT)],
            [
                say("The approval window closed before the refund ran; proposing it again."),
                call("submit_refund", SUBMIT),
            ],
            [say(DONE)],
        ],
        waits=["expire", "approve"],
        sees="the first submit_refund EXPIRED (approval_expired envelope, nothing run); the "
        "re-proposal gets a fresh approval (new apr_ id) and runs once approved",
        recover="resume after expiry; approve the new approval id shown by toolloop pending",
    ),
    Branch(
        "submit_timeout_reconciled",
        "submit timeout, downstream succeeded",
        "COMPLETED",
        [*LEAD_IN, *SUBMITTED],
        waits=["approve"],
        guards={"tool_timeout_ms": 200},
        env={"TOOLLOOP_REFUND_DELAY_MS": "600"},
        sees="submit_refund times out (200 ms) after the ledger committed; it is RECONCILED "
        "through its idempotency key with the saved result: exactly one refund",
        recover="nothing to recover; were the ledger unable to answer, the run would stop "
        "ESCALATED for a person (resume --force-continue --as SUBJECT)",
    ),
    Branch(
        "duplicate_then_no_progress",
        "the model proposes the identical call again",
        "NO_PROGRESS",
        [*LEAD_IN, *[[call("submit_refund", SUBMIT)]] * 3, [say(DONE)]],
        waits=["approve"],
        sees="the second submit_refund is DUPLICATE (the earlier result, duplicate_of its call "
        "id, never submitted twice); the third stops the run NO_PROGRESS (exit 14)",
        recover="read the run (toolloop show); the refund was made once; start a new run if "
        "more is needed",
    ),
]


@contextmanager
def _environment(branch: Branch, seed: str) -> Iterator[None]:
    """The branch's environment, a fixed operation id, and no base-URL override."""
    names: dict[str, str | None] = {**branch.env, **dict.fromkeys(_BASE_URLS)}
    saved = {name: os.environ.get(name) for name in names}
    digest = hashlib.sha256(seed.encode()).hexdigest()
    try:
        _set(names)
        with mock.patch.object(records, "new_operation_id", lambda: f"op_{digest[:32]}"):
            yield
    finally:
        _set(saved)


def _set(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def generate(branch: Branch, provider: Provider, out: Path) -> str:
    """Run one branch against one provider's shape, write its transcript, return its state."""
    out.parent.mkdir(parents=True, exist_ok=True)
    seed = f"{provider.name}/{branch.name}"
    clock, model = Clock(), Scripted(provider, seed, branch.turns)
    with tempfile.TemporaryDirectory() as folder, _environment(branch, seed):
        store = open_store(Path(folder) / "store.db")
        options = operations.RunOptions(
            task=TASK,
            registry=REGISTRY,
            provider=provider.name,
            model=provider.model,
            guard_overrides=dict(branch.guards),
            max_output_tokens=branch.max_output_tokens,
            record=out,
        )
        result = operations.start(store, options, clock=clock, transport=model)
        op_id = result.operation.operation_id
        waits = list(branch.waits)
        while result.waiting:
            if waits.pop(0) == "expire":
                clock.moment += timedelta(seconds=3601)
            else:
                for apr in store.approvals(op_id):
                    if apr.status == "PENDING":
                        approvals.approve(store, apr.approval_id, APPROVER, clock=clock)
            result = operations.resume(store, op_id, clock=clock, transport=model)
        store.close()
    if result.target.value != branch.state or waits:
        raise SystemExit(f"{seed}: ended {result.target.value}, expected {branch.state}")
    return result.target.value


def readme(branches: list[Branch]) -> str:
    folders = [p.name for p in PROVIDERS]
    rows = "\n".join(
        f"| {', '.join(f'`{f}/{b.name}.yaml`' for f in folders)} | {b.title} | {b.state} "
        f"| {b.sees} | {b.recover} |"
        for b in branches
    )
    return f"""# The refund exercise, branch by branch

Six recordings of the refund task (`{TASK}`), one per way it can go, each in three provider
shapes: OpenAI Responses (`openai/`), Anthropic Messages (`anthropic/`) and Gemini
Interactions (`gemini/`). Each was produced by running toolloop itself against a scripted
model (`python -m scripts.gen_branches`, deterministic), so every request is exactly what
toolloop sends; the `toolloop:` key of each file holds the approvals, call states and end
state. Replay any of them with `toolloop replay FILE` (recorded results) or
`toolloop replay FILE --registry registries/refunds.yaml --approve-as ops-lead` (live
handlers: a decision written in a file authorises nothing that runs, so an approver decides;
without `--approve-as` the replay waits for `toolloop approve`); see docs/replay.md.
The timeout branch needs `TOOLLOOP_REFUND_DELAY_MS=600` for live handlers (its 200 ms tool
timeout comes from the recorded guards).

| transcripts | branch | terminal state | what the operator sees | how to recover |
|---|---|---|---|---|
{rows}
"""


def write(out: Path, verbose: bool = False) -> list[Path]:
    """Generate every branch of every provider and the README under ``out``; return the files."""
    files = []
    for provider in PROVIDERS:
        for branch in BRANCHES:
            path = out / provider.name / f"{branch.name}.yaml"
            state = generate(branch, provider, path)
            if verbose:
                print(f"{provider.name}/{branch.name}: {state}")
            files.append(path)
    (out / "README.md").write_text(readme(BRANCHES), encoding="utf-8")
    return [*files, out / "README.md"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "transcripts" / "branches")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file would change"
    )
    args = parser.parse_args(argv)
    if not args.check:
        write(args.out, verbose=True)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = []
        for made in write(Path(tmp)):
            name = made.relative_to(tmp)
            target = args.out / name
            if not target.exists() or target.read_bytes() != made.read_bytes():
                stale.append(str(name))
    if stale:
        print(f"out of date (run python -m scripts.gen_branches): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
