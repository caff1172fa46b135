"""``registry check FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolloop_cli.errors import RegistryError

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
