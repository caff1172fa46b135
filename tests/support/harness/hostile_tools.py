"""Handlers of ``hostile.yaml``: each records what it received in the data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolloop_cli.tools.context import ToolContext


def record(arguments: dict[str, Any], context: ToolContext) -> Any:
    """The side effect: one line per run, with the arguments exactly as received."""
    with (Path(context.data_dir) / "effects.jsonl").open("a") as out:
        out.write(json.dumps({"call_id": context.call_id, "arguments": arguments}) + "\n")
    return {"recorded": True}


def lookup(arguments: dict[str, Any], context: ToolContext) -> Any:
    """A stored note (which may say anything), or ``size`` characters of padding."""
    if "size" in arguments:
        return "x" * arguments["size"]
    notes = Path(context.data_dir) / "notes.json"
    return json.loads(notes.read_text())[arguments.get("note_id", "")]


def effects(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "effects.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
