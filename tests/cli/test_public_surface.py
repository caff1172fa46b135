"""The public surface: exported names, command help, and the direction of imports."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
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
    [
        "run",
        "resume",
        "step",
        "approve",
        "pending",
        "show",
        "runs",
        "report",
        "registry check",
        "export-otel",
    ],
)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every command under ``group``, sub-groups' included (Typer's own click classes)."""
    found: list[tuple[str, Any]] = []
    for name, command in sorted(group.commands.items()):
        found.append((prefix + name, command))
        if hasattr(command, "commands"):
            found += _commands(command, f"{prefix}{name} ")
    return found


def test_each_command_is_summed_up_in_one_line() -> None:
    """The summary ``toolloop --help`` lists is the help's first paragraph, and Typer keeps its
    line breaks: a summary written over two source lines shows broken mid-sentence."""
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 15
    for name, command in commands:
        summary = (command.help or "").strip().split("\n\n")[0]
        assert summary and "\n" not in summary, f"{name}: {summary!r}"


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and toolloop_cli.__version__ in result.output


HEAVY = (
    "httpx",
    "jsonschema",
    "toolloop_cli.adapters.openai_responses",
    "opentelemetry",
    "toolloop_cli.telemetry.tracing",
    "rich.markdown",  # Typer's renderer gets them only when it uses them (cli/typer_help.py)
    "markdown_it",
    "rich.traceback",
)


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["export-otel", "--help"]])
def test_help_does_not_import_heavy_modules(args: list[str]) -> None:
    """OpenTelemetry (the otel extra) included: it is imported only when tracing is asked for."""
    code = (
        "import sys; from typer.testing import CliRunner; from toolloop_cli.cli import app; "
        f"CliRunner().invoke(app, {args!r}); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"  # set, yet --help traces nothing
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
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
        "toolloop_cli.service.operations",
        "toolloop_cli.telemetry",
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
        "toolloop_cli.telemetry",
    ),
    "tools": (
        "typer",
        "rich",
        "toolloop_cli.adapters",
        "toolloop_cli.store",
        "toolloop_cli.cli",
        "toolloop_cli.telemetry",
    ),
    "store": (
        "typer",
        "rich",
        "httpx",
        "toolloop_cli.adapters",
        "toolloop_cli.cli",
        "toolloop_cli.telemetry",
    ),
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
        "toolloop_cli.telemetry",
    ),
    "transcripts": (
        "typer",
        "rich",
        "toolloop_cli.store",
        "toolloop_cli.cli",
        "toolloop_cli.service",
        "toolloop_cli.replay",
        "toolloop_cli.wiring",
        "toolloop_cli.telemetry",
    ),
    # the composition root builds what operations run with; the layers above it use it
    "wiring": (
        "typer",
        "rich",
        "toolloop_cli.cli",
        "toolloop_cli.service",
        "toolloop_cli.replay",
        "toolloop_cli.telemetry",
    ),
    # the replay feature sits under the library API
    "replay": (
        "typer",
        "rich",
        "toolloop_cli.cli",
        "toolloop_cli.service",
        "toolloop_cli.telemetry",
    ),
    # the library API behind the commands prints nothing; it does not know about tracing
    "service": (
        "typer",
        "rich",
        "toolloop_cli.cli",
        "toolloop_cli.telemetry",
        "toolloop_cli.report",
    ),
    # the OpenTelemetry export reads the store after the fact and prints nothing
    "telemetry": ("typer", "rich", "toolloop_cli.cli"),
    # the HTML report reads through the library API; only the command prints
    "report": ("typer", "rich", "toolloop_cli.cli"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_inward(package: str) -> None:
    """Every import, function-local and ``TYPE_CHECKING`` ones included, points inward."""
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


def test_wire_is_a_leaf_over_the_standard_library() -> None:
    """``wire/`` (content encodings) is shared by the live transport and HTTP tools: it may
    import the error tree and the standard library only."""
    bad = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in (PACKAGE / "wire").rglob("*.py")
        for module in _imports(path)
        if module.split(".")[0] not in sys.stdlib_module_names
        and module not in ("toolloop_cli.errors", "__future__")
    ]
    assert bad == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_edges() -> dict[str, set[str]]:
    """Module -> the toolloop_cli modules it imports anywhere in its source (not packages)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    packages = {_module_name(path) for path in PACKAGE.rglob("__init__.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                if target in modules and target not in packages and target != name:
                    found.add(target)
        edges[name] = found
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    """No two modules import each other, directly or round a circle, even inside functions."""
    edges = _import_edges()
    assert "toolloop_cli.service.operations" in edges  # the walk sees the package
    assert _cycles(edges) == []


def test_the_cycle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_at_most_two_loose_top_level_modules() -> None:
    """Layers live in folders; only the foundations sit at the top (beside ``__init__``)."""
    loose = sorted(
        p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert loose == ["errors.py", "strict_json.py"]
