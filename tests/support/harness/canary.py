"""A module no model-supplied name may ever reach: importing or calling it leaves a mark."""

from __future__ import annotations

import os
from pathlib import Path

MARK = Path(os.environ.get("TOOLLOOP_CANARY", "/nonexistent")) / "canary-imported"
if MARK.parent.is_dir():  # pragma: no cover - only if a name reached the import system
    MARK.write_text("imported")


def fire(*_: object) -> None:  # pragma: no cover - never called
    (MARK.parent / "canary-fired").write_text("fired")
