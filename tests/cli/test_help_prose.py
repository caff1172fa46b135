"""Command help reads as paragraphs (``cli/prose.py``): a docstring's source line breaks do
not reach the terminal, which wraps each paragraph to its own width."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.cli.prose import reflow


def _commands() -> list[tuple[tuple[str, ...], str]]:
    """Every command's words on the command line and its docstring."""
    found: list[tuple[tuple[str, ...], str]] = [
        ((c.name or "",), c.callback.__doc__ or "") for c in app.registered_commands
    ]
    for group in app.registered_groups:
        assert group.typer_instance is not None
        found += [
            ((group.name or "", c.name or ""), c.callback.__doc__ or "")
            for c in group.typer_instance.registered_commands
        ]
    return found


def test_reflow_joins_the_lines_of_each_paragraph_and_keeps_paragraphs_apart() -> None:
    doc = """First line
    goes on.

    Second paragraph,
    on two lines.

    \b
    kept
    as written
    """
    assert reflow(doc) == (
        "First line goes on.\n\nSecond paragraph, on two lines.\n\n\b\nkept\nas written"
    )


@pytest.mark.parametrize(
    ("words", "doc"), [pytest.param(w, d, id=" ".join(w)) for w, d in _commands()]
)
def test_every_paragraph_of_a_command_help_is_one_line_on_a_wide_terminal(
    words: tuple[str, ...], doc: str
) -> None:
    """At 400 columns nothing needs wrapping: each docstring paragraph shows on one line
    (Typer kept the source's line breaks in every paragraph after the first)."""
    shown = CliRunner().invoke(app, [*words, "--help"], terminal_width=400, env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    lines = [line.strip() for line in shown.output.splitlines()]
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        assert " ".join(paragraph.split()) in lines, paragraph
