"""Helpers of the tests that lay the shipped refund recordings out as other recorders do and
expect what the recording itself replays to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

TRANSCRIPTS = ROOT / "transcripts"


def recorded(name: str) -> list[dict[str, Any]]:
    """The interactions of ``transcripts/refund-NAME.yaml``, as vcrpy keeps them."""
    document = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())
    interactions: list[dict[str, Any]] = document["interactions"]
    return interactions


def replayed(cli: Invoke, path: Path) -> tuple[Any, ...]:
    """The exit code, end state, divergences, turn count and calls of ``toolloop replay``."""
    result = cli("replay", str(path), "--registry", str(REGISTRY), "--json")
    out = json_out(result)
    calls = [(c["name"], c["state"], c["arguments"], c["result"]) for c in out["calls"]]
    return result.exit_code, out["state"], out["divergences"], len(out["turns"]), calls


def replays_as_recorded(cli: Invoke, path: Path, name: str) -> None:
    """``path`` replays exactly as ``transcripts/refund-NAME.yaml`` does, which has calls and
    no divergence."""
    expected = replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")
    assert expected[2] == [] and expected[4], expected
    assert replayed(cli, path) == expected


def refused(cli: Invoke, path: Path, problem: str) -> None:
    """``toolloop replay path`` exits 2 with one stderr line that says ``problem``."""
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and problem in lines[0], result.stderr
    assert "Traceback" not in result.output
