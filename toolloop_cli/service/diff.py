"""The library behind ``toolloop diff A B``: two operations, or two cassettes, side by side.

An operation is read from the store. A cassette is replayed with its recorded results into a
throw-away store (nothing runs, the user's store is not touched), one run per conversation,
and read back the same way, so a recording and an operation compare alike. The comparison
itself is ``engine.compare.compare_runs``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolloop_cli.engine.compare import CallView, Difference, RunView, TurnView, compare_runs
from toolloop_cli.errors import UsageError
from toolloop_cli.service.views import operation_view
from toolloop_cli.store import Store, open_store

__all__ = ["DiffReport", "diff", "reads_store", "run_view", "run_views"]


@dataclass(frozen=True)
class DiffReport:
    a: str
    b: str
    differences: list[Difference]

    @property
    def equal(self) -> bool:
        return not self.differences


def run_view(view: dict[str, Any], label: str) -> RunView:
    """A ``show --json`` object reduced to what a diff compares.

    A call's approval is the one its own row names (call ids repeat across responses).
    """
    approvals = {a["approval_id"]: a["status"] for a in view["approvals"]}
    turns = []
    for turn in view["turns"]:
        calls = tuple(
            CallView(
                call_id=c["call_id"],
                name=c["name"],
                arguments=c["arguments"],
                state=c["state"],
                result=c["result"],
                approval=approvals.get(c["approval_id"]) if c["approval_id"] else None,
            )
            for c in view["calls"]
            if c["turn"] == turn["index"]
        )
        turns.append(TurnView(turn["index"], turn["outcome"], turn["finish_reason"], calls))
    return RunView(label, view["state"], view["final_text"], tuple(turns))


def reads_store(*targets: str) -> bool:
    """Whether comparing ``targets`` needs the store: only an operation id does, so a diff
    of two recordings (or a target that names nothing) opens no store and creates none."""
    return any(t.startswith("op_") and not Path(t).is_file() for t in targets)


def run_views(store: Store | None, target: str) -> list[RunView]:
    """The runs ``target`` names: an operation id, or a cassette file (one run a conversation).

    ``store`` may be None when ``reads_store`` said no store is needed.
    """
    path = Path(target)
    if path.is_file():
        return _cassette_views(path)
    if target.startswith("op_") and store is not None:
        return [run_view(operation_view(store, target), target)]
    raise UsageError(f"{target} is neither an operation id (op_…) nor a cassette file")


def _cassette_views(path: Path) -> list[RunView]:
    from toolloop_cli.replay.run import ReplayOptions, replay

    with tempfile.TemporaryDirectory(prefix="toolloop-diff-") as folder:
        scratch = open_store(Path(folder) / "store.db")
        try:
            report = replay(scratch, ReplayOptions(path, results="recorded"))
            return [
                run_view(operation_view(scratch, op.operation_id), f"{path}#{index}")
                for index, op in enumerate(report.operations)
            ]
        finally:
            scratch.close()


def diff(store: Store | None, a: str, b: str) -> DiffReport:
    """Every difference between the runs ``a`` and ``b`` name, with JSON paths."""
    left, right = run_views(store, a), run_views(store, b)
    if len(left) == 1 and len(right) == 1:
        return DiffReport(a, b, compare_runs(left[0], right[0]))
    found: list[Difference] = []
    if len(left) != len(right):
        found.append(Difference("$.conversations", "changed", len(left), len(right)))
    for index, (one, other) in enumerate(zip(left, right, strict=False)):
        prefix = f"$.conversations[{index}]"
        for change in compare_runs(one, other):
            found.append(
                Difference(
                    prefix + change.path[1:],
                    change.kind,
                    change.a,
                    change.b,
                    change.turn,
                    change.call_a,
                    change.call_b,
                )
            )
    return DiffReport(a, b, found)
