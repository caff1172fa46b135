"""Command help written as docstrings, shown as paragraphs that the terminal wraps.

Typer (0.29) keeps the single line breaks inside every paragraph after the first, so a
docstring wrapped at the source's line length came out with ragged breaks at 80 columns.
Each command's help is its docstring with the lines of a paragraph joined; paragraphs stay
apart, and ``\\b`` (Click's "keep these lines") is left as written.
"""

from __future__ import annotations

import inspect

import typer

__all__ = ["reflow", "reflow_commands"]


def reflow(doc: str) -> str:
    """``doc`` (a docstring) with each paragraph on one line."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


def reflow_commands(app: typer.Typer) -> None:
    """Give every command of ``app`` and of its sub-apps its docstring as reflowed help (a
    command given ``help=`` keeps it)."""
    for info in app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = reflow(info.callback.__doc__)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_commands(group.typer_instance)
