"""``registry check FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolloop_cli.errors import RegistryError, UsageError

from .lazy import LazyModule

if TYPE_CHECKING:
    from toolloop_cli.tools import registry as registries
else:
    registries = LazyModule("toolloop_cli.tools.registry")

from . import render
from .exits import run_guarded
from .options import JsonOpt
from .render import safe

app = typer.Typer(help="Work with tool registries.", no_args_is_help=True)


@app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="Registry YAML file.")],
    no_import: Annotated[
        bool,
        typer.Option(
            "--no-import",
            help="Check the document, schemas and handler strings without importing any "
            "handler module (no code from the registry runs; whether handlers resolve is "
            "then not checked).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Validate a registry and print every problem with its YAML path (exit 2 if any).

    By default every handler and reconcile module is imported, to check that it resolves to
    a callable: that executes the modules' top-level code. Use --no-import to vet a registry
    you do not trust yet.
    """

    def body() -> int:
        try:
            registry = registries.load_registry(path, import_handlers=not no_import)
        except RegistryError as exc:
            if not as_json:
                for where, problem in exc.problems:
                    render.err.print(safe(f"{path}: {where or '<document>'}: {problem}"))
                render.err.print(safe(f"{len(exc.problems)} problem(s)", "bold red"))
                raise SystemExit(2) from None
            raise
        if as_json:
            render.emit_json(
                {
                    "registry": registry.name,
                    "revision": registry.revision,
                    "sha256": registry.sha256,
                    "tools": list(registry.tools),
                    "handlers_imported": registry.imported,
                    "problems": [],
                }
            )
        else:
            render.out.print(
                safe(
                    f"{path}: ok — registry {registry.name}@{registry.revision}, "
                    f"{len(registry.tools)} tool(s), {registry.sha256}"
                    + ("" if registry.imported else " (handlers not imported)")
                )
            )
        return 0

    run_guarded(as_json, body)


@app.command("import-mcp")
def import_mcp(
    stdio: Annotated[
        str | None,
        typer.Option("--stdio", help='The server\'s command line, e.g. "python server.py".'),
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="The server's streamable HTTP endpoint.")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The server's name in the registry.")] = (
        "server"
    ),
    approver: Annotated[
        list[str] | None,
        typer.Option("--approver", help="A policy approver (repeatable; default: owner)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the registry here (not stdout).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing --output file.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a registry skeleton from an MCP server's tool list, with pinned schema hashes.

    Every tool is risk: write and approval: always until its owner edits it; the announced
    input schema is the tool's parameters and its canonical hash is pinned, so a server that
    later changes a tool is refused at load. With --json, one object: the file written (or
    null), the tools, and the registry document itself. An existing --output file (an
    edited registry, say) is replaced only with --force.
    """
    import yaml

    from toolloop_cli.tools import mcp_import
    from toolloop_cli.transcripts.overwrite import existing_regular_file, replace_whole

    def body() -> int:
        entry = mcp_import.server_entry(stdio, url)
        if output is not None:  # before the server is started: a refusal changes nothing
            there = existing_regular_file("-o", output, output.resolve(), "registry")
            if there and not force:
                raise UsageError(f"-o {output} exists; refusing to replace it (--force does)")
        doc, left_out = mcp_import.skeleton(name, entry, approver or ["owner"])
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
        if output is not None:
            replace_whole(output, text, "registry")
            render.err.print(safe(f"wrote {output}: {len(doc['tools'])} tool(s) from {name}"))
        if as_json:
            render.emit_json(
                {
                    "output": None if output is None else str(output),
                    "server": name,
                    "tools": list(doc["tools"]),
                    "left_out": left_out,
                    "registry": doc,
                }
            )
            return 0
        for tool in left_out:
            render.err.print(safe(f"left out {tool['tool'][:80]!r}: {tool['reason']}"))
        if output is None:
            render.out.print(text, end="")
        return 0

    run_guarded(as_json, body)
