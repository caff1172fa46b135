"""Typer's renderer loaded with deferred ``rich.markdown`` and ``rich.traceback``
(``cli/typer_help.py``): nothing it does changes, the modules load only when used.

Each check runs in a fresh interpreter: this test process may have imported Typer's renderer
already, and ``load`` is a no-op then.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_the_stand_ins_reach_the_real_classes_when_used() -> None:
    out = _run(
        """
        import sys
        from toolloop_cli.cli import typer_help
        typer_help.load()
        import typer.rich_utils as ru
        print("markdown" in " ".join(sys.modules), "rich.traceback" in sys.modules)
        import rich.markdown, rich.traceback
        made = ru.Markdown("# title")
        print(type(made) is rich.markdown.Markdown, isinstance(made, ru.Markdown))
        print(ru.Traceback.from_exception == rich.traceback.Traceback.from_exception)
        try:
            raise ValueError("boom")
        except ValueError as exc:
            tb = ru.get_traceback(exc, ru.DeveloperExceptionConfig(), [])
        print(type(tb) is rich.traceback.Traceback)
        """
    )
    assert out.splitlines() == ["False False", "True True", "True", "True"]


def test_markdown_help_still_renders_markdown() -> None:
    """A Typer app in markdown mode (not toolloop's) renders through the real Markdown class."""
    out = _run(
        """
        from toolloop_cli.cli import typer_help
        typer_help.load()
        import typer
        from typer.testing import CliRunner
        app = typer.Typer(rich_markup_mode="markdown")
        @app.command()
        def hello() -> None:
            '''Say **hello** to `someone`.'''
        print(CliRunner().invoke(app, ["--help"], terminal_width=80).output)
        """
    )
    assert "Say hello to someone." in out  # Markdown markup rendered, not shown raw
    assert "**" not in out


def test_a_later_import_gets_the_real_modules() -> None:
    out = _run(
        """
        import sys, types
        from toolloop_cli.cli import typer_help
        typer_help.load()
        import rich.markdown, rich.traceback
        print(rich.markdown.__file__ is not None, hasattr(rich.traceback, "install"))
        typer_help.load()  # once loaded, a no-op
        print(sys.modules["rich.markdown"] is rich.markdown)
        """
    )
    assert out.splitlines() == ["True True", "True"]


def test_a_renderer_taking_another_name_is_imported_as_it_is(tmp_path: Path) -> None:
    """Should a Typer release import a name the stand-ins lack, the CLI still starts."""
    (tmp_path / "other_renderer.py").write_text(
        "from rich.markdown import Markdown, MarkdownContext\n"
    )
    out = _run(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from toolloop_cli.cli import typer_help
        typer_help.load("other_renderer")
        import other_renderer, rich.markdown
        print(other_renderer.MarkdownContext is rich.markdown.MarkdownContext)
        print(other_renderer.Markdown is rich.markdown.Markdown)
        """
    )
    assert out.splitlines() == ["True", "True"]
