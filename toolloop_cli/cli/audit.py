"""``verify``: recompute every hash and walk the audit chain (exit 0, or 20 on any mismatch)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolloop_cli.errors import UsageError

if TYPE_CHECKING:  # imported when verify runs, so `toolloop --help` does not pay for them
    from toolloop_cli.audit.verify import Report

from . import render
from .exits import run_guarded
from .options import DEFAULT_STORE, JsonOpt, StoreOpt
from .render import dim, line, safe

#: Exit code when anything does not recompute (design.md §8).
MISMATCH = 20
#: what ``--head`` prints (``SEQ:sha256:<hex>``), or the digest alone
_HEAD = re.compile(r"(?:[0-9]+:)?sha256:[0-9a-fA-F]{64}")


def verify(
    operation_id: Annotated[
        str | None,
        typer.Argument(help="Only this operation's rows (the whole chain is still walked)."),
    ] = None,
    head: Annotated[
        bool, typer.Option("--head", help="Print only the chain head (SEQ:sha256:…) to keep.")
    ] = False,
    expect_head: Annotated[
        str | None,
        typer.Option(
            "--expect-head",
            help="A head kept earlier: fail unless the chain reaches it (catches a cut tail).",
        ),
    ] = None,
    store_path: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Recompute every hash from the stored inputs and walk the audit chain; repair nothing."""

    def body() -> int:
        from toolloop_cli.service.verify import verify_store
        from toolloop_cli.store import open_store

        expected = _checked_head(expect_head)
        # verify writes nothing, migrates nothing, and creates no store
        store = open_store(store_path, read_only=True, must_exist=True)
        report = verify_store(store, operation_id, expect_head=expected)
        if as_json:
            render.emit_json(report_json(report, operation_id))
        elif head:
            render.out.print(safe(report.head.text()))
        else:
            _print(report)
        return 0 if report.ok else MISMATCH

    run_guarded(as_json, body)


def _checked_head(expect_head: str | None) -> str | None:
    """The head as ``verify --head`` writes it (hex in lower case, the seq without leading
    zeros: a head copied through a tool that changed either is the same head, not a mismatch).
    A head that is not one at all is bad input (exit 2), not a cut or altered chain."""
    if expect_head is None:
        return None
    if not _HEAD.fullmatch(expect_head):
        raise UsageError(
            f"--expect-head {expect_head!r} is not a head: expected SEQ:sha256:<64 hex> "
            "(as verify --head prints it) or sha256:<64 hex>"
        )
    seq, _, digest = expect_head.rpartition("sha256:")
    seq = f"{int(seq[:-1])}:" if seq else ""
    return f"{seq}sha256:{digest.lower()}"


def report_json(report: Report, operation_id: str | None) -> dict[str, Any]:
    """The one JSON object of ``verify --json``."""
    return {
        "ok": report.ok,
        "operation_id": operation_id,
        "counts": report.counts,
        "head": {"seq": report.head.seq, "chain_sha256": report.head.chain_sha256},
        "expected_head": report.expected_head,
        "mismatches": [m.as_dict() for m in report.mismatches],
    }


def _print(report: Report) -> None:
    c = report.counts
    summary = (
        f"{c['operations']} operation(s), {c['turns']} turn(s), {c['calls']} call(s), "
        f"{c['approvals']} approval(s), {c['records']} audit record(s); "
        f"{c['requests_rebuilt']} request(s) rebuilt, {c['requests_unchecked']} not rebuildable"
    )
    for mismatch in report.mismatches:
        render.out.print(safe(mismatch.line()))
    if report.ok:
        render.out.print(line(safe("verified ", "bold green"), safe(summary)))
    else:
        count = f"{len(report.mismatches)} mismatch(es) "
        render.out.print(line(safe(count, "bold red"), safe(summary)))
    render.out.print(dim(f"head {report.head.text()}"))
