"""Shared fixtures: paths to the shipped registry and recordings, a CLI runner, a fake clock."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

# pytest-xdist workers run with COLUMNS=80 in their environment, which Rich would fix as the
# width of the CLI's consoles when they are created (at import): drop it first, so each test
# gets the width it asks for with ``env={"COLUMNS": ...}`` (80 when it asks for none).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

from toolloop_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "registries" / "refunds.yaml"
REFUND_OPENAI = ROOT / "transcripts" / "refund-openai.yaml"
FIXTURES = ROOT / "tests" / "fixtures"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.moment = start or datetime(2026, 12, 1, 10, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


Invoke = Callable[..., Any]


@pytest.fixture
def cli(store_path: Path) -> Invoke:
    """Run a toolloop command in-process against the test store; returns the Click result."""
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
        full = [*args] if args[0] == "registry" else [*args, "--store", str(store_path)]
        return runner.invoke(app, full, env=env, catch_exceptions=False)

    return invoke


def json_out(result: Any) -> dict[str, Any]:
    """The one JSON object a ``--json`` command printed."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    parsed: dict[str, Any] = json.loads(lines[0])
    return parsed
