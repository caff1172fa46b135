"""Errors and states become exit codes here: 2 for bad input, the state's code otherwise."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from toolloop_cli.errors import RegistryError, ToolloopError

from . import render
from .render import line, safe

#: Exit code for bad input or usage (one clear line on stderr).
USAGE = 2


@contextmanager
def guarded(as_json: bool) -> Iterator[None]:
    """Turn a ``ToolloopError`` into one stderr line (and one JSON object) and exit 2."""
    try:
        yield
    except ToolloopError as exc:
        report(exc, as_json)
        raise typer.Exit(USAGE) from None


def report(exc: ToolloopError, as_json: bool) -> None:
    message = str(exc)
    if as_json:
        payload: dict[str, object] = {"error": message, "error_type": type(exc).__name__}
        if isinstance(exc, RegistryError):
            payload["problems"] = [{"path": p, "message": m} for p, m in exc.problems]
        render.emit_json(payload)
    render.err.print(line(safe("error: ", "bold red"), safe(message)))
    if isinstance(exc, RegistryError) and len(exc.problems) > 1:
        for path, problem in exc.problems[1:]:
            render.err.print(safe(f"  {path or '<document>'}: {problem}"))


def run_guarded(as_json: bool, fn: Callable[[], int]) -> None:
    """Run ``fn`` under ``guarded`` and exit with the code it returns."""
    with guarded(as_json):
        code = fn()
    raise typer.Exit(code)
