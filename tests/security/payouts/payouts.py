"""The payout handler of ``registry.yaml``: one line per payout made, in the data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolloop_cli.tools.context import Escalate, ToolContext


def payout(arguments: dict[str, Any], context: ToolContext) -> Any:
    with (Path(context.data_dir) / "payouts.jsonl").open("a") as out:
        out.write(json.dumps(arguments) + "\n")
    return {"paid": arguments["amount_cents"], "memo": arguments.get("memo", "")}


def escalate(arguments: dict[str, Any], context: ToolContext) -> Any:
    """Stops the operation for a person, with whatever reason the model gave."""
    raise Escalate(arguments["why"])


def payouts(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "payouts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
