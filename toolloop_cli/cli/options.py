"""Flags shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_STORE = Path(".toolloop/store.db")

StoreOpt = Annotated[
    Path,
    typer.Option(
        "--store",
        envvar="TOOLLOOP_STORE",
        help="Store file (env TOOLLOOP_STORE).",
        show_default=True,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")]
TenantOpt = Annotated[
    str | None,
    typer.Option("--tenant", envvar="TOOLLOOP_TENANT", help="Only see this tenant's operations."),
]
