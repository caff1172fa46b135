"""Budgets hold across crashes: killed and resumed 20 times, a run never passes a limit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from support.scripted import GUARDS

URI = "https://api.openai.com/v1/responses"


def openai_turn(k: int) -> dict[str, Any]:
    return {
        "id": f"resp_{k:04d}",
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "type": "function_call",
                "id": f"fc_{k:04d}",
                "call_id": f"call_{k:04d}",
                "name": "echo",
                "arguments": json.dumps({"n": k}),
                "status": "completed",
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
    }


def cassette(path: Path, turns: int) -> None:
    interactions = [
        {
            "request": {"method": "POST", "uri": URI, "headers": {}, "body": "{}"},
            "response": {
                "status": {"code": 200, "message": "OK"},
                "headers": {"content-type": ["application/json"]},
                "body": {"string": json.dumps(openai_turn(k))},
            },
        }
        for k in range(turns)
    ]
    path.write_text(yaml.safe_dump({"version": 1, "interactions": interactions}))


def toolloop(
    store: Path, *args: str, failpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLLOOP_FAILPOINT"}
    if failpoint:
        env["TOOLLOOP_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "toolloop_cli", *args, "--store", str(store), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_twenty_kills_never_exceed_the_budgets(tmp_path: Path) -> None:
    rng = random.Random(7)
    recording = tmp_path / "long.yaml"
    cassette(recording, 30)
    store = tmp_path / "store.db"
    points = ["before_model_request", "after_intent_commit", "after_effect_before_result_commit"]
    first = toolloop(
        store,
        "run",
        "echo a lot",
        "--registry",
        str(GUARDS),
        "--transcript",
        str(recording),
        "--max-turns",
        "12",
        "--max-tool-calls",
        "9",
        failpoint=f"{rng.choice(points)}:{rng.randint(1, 2)}",
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    op_id = json.loads(
        subprocess.run(
            [sys.executable, "-m", "toolloop_cli", "runs", "--json", "--store", str(store)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["operations"][0]["operation_id"]
    kills = 1
    while kills < 20:
        result = toolloop(
            store, "resume", op_id, failpoint=f"{rng.choice(points)}:{rng.randint(1, 2)}"
        )
        if result.returncode != -signal.SIGKILL:
            break
        kills += 1
    final = toolloop(store, "resume", op_id)
    shown = json.loads(toolloop(store, "show", op_id).stdout)
    assert kills >= 10
    assert shown["state"] == "BUDGET_EXHAUSTED", (final.stderr, shown["reason"])
    assert shown["counters"]["tool_calls"] <= 9
    assert shown["counters"]["turns"] <= 12
    executed = {c["call_id"] for c in shown["calls"] if c["state"] == "SUCCEEDED"}
    assert len(executed) <= 9
    log = [json.loads(line) for line in (tmp_path / "handler-log.jsonl").read_text().splitlines()]
    assert {e["call_id"] for e in log} == executed
