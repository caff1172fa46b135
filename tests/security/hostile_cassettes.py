"""OpenAI Responses cassettes (the vcrpy shape) written by a hostile model, for CLI tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

Output = dict[str, Any]


def call(call_id: str, name: str, arguments: dict[str, Any]) -> Output:
    """One ``function_call`` output item."""
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "id": "fc_" + call_id,
        "status": "completed",
    }


def text(value: str) -> Output:
    """One assistant message with one ``output_text`` part."""
    return {
        "type": "message",
        "role": "assistant",
        "id": "msg_x",
        "content": [{"type": "output_text", "text": value}],
    }


def response(response_id: str, outputs: list[Output], status: str = "completed") -> Output:
    return {
        "id": response_id,
        "object": "response",
        "status": status,
        "model": "gpt-4.1",
        "output": outputs,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def write(path: Path, answers: list[Output], *, model: str = "gpt-4.1") -> Path:
    """A cassette answering each request with the next of ``answers``."""
    request = {"model": model, "input": [{"role": "user", "content": "t"}]}
    doc = {
        "interactions": [
            {
                "request": {
                    "body": json.dumps(request),
                    "headers": {"content-type": ["application/json"]},
                    "method": "POST",
                    "uri": "https://api.openai.com/v1/responses",
                },
                "response": {
                    "body": {"string": json.dumps(answer)},
                    "headers": {"content-type": ["application/json"]},
                    "status": {"code": 200, "message": "OK"},
                },
            }
            for answer in answers
        ],
        "version": 1,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1 << 30, allow_unicode=True))
    return path
