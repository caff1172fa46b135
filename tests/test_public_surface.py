"""The public surface: exported names, command help, and the direction of imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toolloop_cli
from toolloop_cli.cli import app

PACKAGE = Path(toolloop_cli.__file__).parent


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert toolloop_cli.__all__ == sorted(toolloop_cli.__all__)
    assert set(toolloop_cli.__all__) == set(toolloop_cli._HOME)
    for name in toolloop_cli.__all__:
        assert getattr(toolloop_cli, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        toolloop_cli.no_such_thing  # noqa: B018


@pytest.mark.parametrize(
    "command",
    ["run", "resume", "step", "approve", "pending", "show", "runs", "registry check"],
)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and toolloop_cli.__version__ in result.output


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from toolloop_cli.cli import app; "
        "CliRunner().invoke(app, ['--help']); "
        "print(sorted(m for m in ('httpx', 'jsonschema', 'toolloop_cli.adapters.openai_responses')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


#: package -> prefixes it must never import (design.md §10: imports point inward)
FORBIDDEN = {
    "engine": (
        "typer",
        "rich",
        "sqlite3",
        "sqlite_utils",
        "httpx",
        "toolloop_cli.cli",
        "toolloop_cli.store",
        "toolloop_cli.adapters",
        "toolloop_cli.tools",
        "toolloop_cli.transcripts",
        "toolloop_cli.wiring",
        "toolloop_cli.operations",
    ),
    "adapters": (
        "typer",
        "rich",
        "sqlite_utils",
        "toolloop_cli.store",
        "toolloop_cli.tools",
        "toolloop_cli.transcripts",
        "toolloop_cli.cli",
        "toolloop_cli.wiring",
    ),
    "tools": ("typer", "rich", "toolloop_cli.adapters", "toolloop_cli.store", "toolloop_cli.cli"),
    "store": ("typer", "rich", "httpx", "toolloop_cli.adapters", "toolloop_cli.cli"),
    # audit is a pure leaf (canonical JSON, hashes, chain checks) that engine, store and
    # adapters use: it must import none of them
    "audit": (
        "typer",
        "rich",
        "sqlite3",
        "sqlite_utils",
        "toolloop_cli.engine",
        "toolloop_cli.store",
        "toolloop_cli.adapters",
        "toolloop_cli.tools",
        "toolloop_cli.transcripts",
        "toolloop_cli.cli",
        "toolloop_cli.wiring",
    ),
    "transcripts": ("typer", "rich", "toolloop_cli.store", "toolloop_cli.cli"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_inward(package: str) -> None:
    bad = []
    for path in (PACKAGE / package).rglob("*.py"):
        for module in _imports(path):
            if module.startswith(FORBIDDEN[package]):
                bad.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert bad == []


def test_only_the_cli_prints_or_imports_rich() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts[:1]:
            continue
        source = path.read_text()
        if "import rich" in source or "from rich" in source or "import typer" in source:
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []
