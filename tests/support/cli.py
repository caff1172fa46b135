"""The in-process CLI runner (the ``cli`` fixture's type) and reading its ``--json`` output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: ``cli("run", TASK, ...)``: runs a toolloop command in-process against the test's store
Invoke = Callable[..., Any]


def json_out(result: Any) -> dict[str, Any]:
    """The one JSON object a ``--json`` command printed."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    parsed: dict[str, Any] = json.loads(lines[0])
    return parsed
