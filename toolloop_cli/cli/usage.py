"""Errors in the command line itself, kept to the ``--json`` contract.

Click reports a bad command line (a missing argument, an unknown option, a value that does
not convert or is out of range, a bad ``TOOLLOOP_DURABILITY``) while it parses, before any
command runs, as a boxed message on stderr. With ``--json`` anywhere in argv the caller is a
program reading stdout, so the root group turns such an error into exactly one JSON error
object on stdout (the shape every other error has), one ``error:`` line on stderr, and exit 2.
Without ``--json``, click's own message (usage line, help hint) is kept for people.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperGroup

from . import render
from .exits import USAGE, error_json, error_line

__all__ = ["JsonUsageErrors", "usage_message"]

_JSON_FLAG = "--json"
#: ``ctx.meta`` key: whether the command line asked for JSON
_WANTS_JSON = "toolloop.json"


class JsonUsageErrors(TyperGroup):
    """The root group: a usage error under ``--json`` becomes one JSON object and exit 2.

    Parsing happens in ``make_context`` (the root's own options) and in ``invoke`` (each
    subcommand's), which also covers a ``BadParameter`` a command raises while it runs.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Any = None,
        **extra: Any,
    ) -> Any:
        wants_json = wants_json_output(args)
        with _as_json_errors(wants_json):
            ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta[_WANTS_JSON] = wants_json
        return ctx

    def invoke(self, ctx: Any) -> Any:
        with _as_json_errors(bool(ctx.meta.get(_WANTS_JSON))):
            return super().invoke(ctx)


def wants_json_output(args: Sequence[str]) -> bool:
    """``--json`` anywhere on the command line (before a ``--`` that ends the options)."""
    options = args[: list(args).index("--")] if "--" in args else args
    return _JSON_FLAG in options


def usage_message(exc: typer.TyperException) -> str:
    """Click's message on one line, prefixed with the command it is about."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path}: {message}" if ctx is not None else message


@contextmanager
def _as_json_errors(wants_json: bool) -> Iterator[None]:
    try:
        yield
    except typer.TyperException as exc:  # click's errors (vendored by Typer) derive from it
        if not wants_json:
            raise
        message = usage_message(exc)
        render.emit_json(error_json(message, "UsageError"))
        error_line(message)
        raise typer.Exit(USAGE) from None
