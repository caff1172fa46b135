"""``store copy SRC DST``: move a store between SQLite and PostgreSQL, verified on both sides."""

from __future__ import annotations

from typing import Annotated

import typer

from toolloop_cli.errors import UsageError

from . import render
from .exits import run_guarded
from .options import JsonOpt
from .render import line, safe

app = typer.Typer(help="Work with whole stores.", no_args_is_help=True)

#: exit code when either side does not verify, or the heads differ (as ``verify``)
MISMATCH = 20


@app.command("copy")
def copy(
    source: Annotated[str, typer.Argument(help="The store to copy: a file or postgresql://… URL.")],
    target: Annotated[
        str, typer.Argument(help="An empty (or new) store to copy into: a file or a URL.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Copy every operation, row and audit record; then verify both stores (same head)."""

    def body() -> int:
        from toolloop_cli.service.verify import verify_store
        from toolloop_cli.store import open_store
        from toolloop_cli.store.copy import copy_store

        src = open_store(source, read_only=True, must_exist=True)
        before = verify_store(src)
        if not before.ok:
            raise UsageError(
                f"store {src.location} does not verify ({len(before.mismatches)} mismatch(es)): "
                "nothing was copied; run toolloop verify on it"
            )
        dst = open_store(target)
        copied = copy_store(src, dst)
        after = verify_store(dst)
        same = after.ok and after.head == before.head
        heads = {"source": before.head.text(), "target": after.head.text()}
        if as_json:
            render.emit_json(
                {
                    "copied": copied.rows,
                    "verified": same,
                    "head": heads,
                    "mismatches": len(after.mismatches),
                }
            )
        else:
            counts = ", ".join(f"{n} {table}" for table, n in copied.rows.items())
            render.out.print(line(safe(f"copied {src.location} → {dst.location}: {counts}")))
            render.out.print(line(safe(f"head {heads['source']} (source)")))
            render.out.print(line(safe(f"head {heads['target']} (target)")))
            verdict = "both verify, same head" if same else "the copy does NOT verify the same"
            render.out.print(line(safe(verdict)))
        return 0 if same else MISMATCH

    run_guarded(as_json, body)
