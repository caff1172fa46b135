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
        payload = error_json(message, type(exc).__name__)
        if isinstance(exc, RegistryError):
            payload["problems"] = [{"path": p, "message": m} for p, m in exc.problems]
        render.emit_json(payload)
    error_line(message)
    if isinstance(exc, RegistryError) and len(exc.problems) > 1:
        for path, problem in exc.problems[1:]:
            render.err.print(safe(f"  {path or '<document>'}: {problem}"))


def error_json(message: str, error_type: str) -> dict[str, object]:
    """The one JSON object of a command that failed with bad input."""
    return {"error": message, "error_type": error_type}


def error_line(message: str) -> None:
    """``error: …`` on stderr: the line a person reads whether or not --json was given."""
    render.err.print(line(safe("error: ", "bold red"), safe(message)))


def run_guarded(as_json: bool, fn: Callable[[], int]) -> None:
    """Run ``fn`` under ``guarded`` and exit with the code it returns."""
    with guarded(as_json):
        code = fn()
    raise typer.Exit(code)
