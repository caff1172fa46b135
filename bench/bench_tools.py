"""The benchmark's one handler: a trivial read, so the figures measure the loop around it."""

from __future__ import annotations

from typing import Any


def read_item(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Echo the key with a small value, as a cache or database lookup would."""
    return {"key": arguments["key"], "value": len(arguments["key"])}
