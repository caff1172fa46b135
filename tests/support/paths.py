"""Where things are: the repository, the package, the shipped registry, recordings and task."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolloop_cli"
REGISTRY = ROOT / "registries" / "refunds.yaml"
REFUND_OPENAI = ROOT / "transcripts" / "refund-openai.yaml"
BRANCHES = ROOT / "transcripts" / "branches"
FIXTURES = ROOT / "tests" / "fixtures"
HARNESS = Path(__file__).resolve().parent / "harness"
TASK = "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did."
