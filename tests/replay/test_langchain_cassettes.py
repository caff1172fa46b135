"""LangChain's cassettes: gzip-compressed YAML holding ``requests`` and ``responses`` lists.

LangChain's standard tests persist vcrpy's in-memory cassette as it is: vcrpy ``Request``
objects written as ``{method, uri, body, headers: {name: [value]}}`` (the body as bytes, so
``!!binary``), the responses as vcrpy's stubs recorded them (``{status: {code, message},
headers, body: {string: <bytes>}}``), in two lists paired by position, the whole file
compressed with gzip (``*.yaml.gz``).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import ROOT

HAPPY = ROOT / "transcripts" / "branches" / "openai" / "happy_path.yaml"


def langchain_layout() -> dict[str, Any]:
    """The refund happy path as LangChain's serializer lays a cassette out."""
    recorded = yaml.safe_load(HAPPY.read_text())["interactions"]
    requests = [
        {
            "method": i["request"]["method"],
            "uri": i["request"]["uri"],
            "body": i["request"]["body"].encode(),
            "headers": {k: [v[0]] for k, v in i["request"]["headers"].items()},
        }
        for i in recorded
    ]
    responses = [
        {
            "status": i["response"]["status"],
            "headers": i["response"]["headers"],
            "body": {"string": i["response"]["body"]["string"].encode()},
        }
        for i in recorded
    ]
    return {"requests": requests, "responses": responses}


def write_gz(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "TestChatOpenAI.test_tool_calling.yaml.gz"
    path.write_bytes(gzip.compress(yaml.safe_dump(document).encode()))
    return path


def test_a_langchain_cassette_replays_its_requests_paired_with_responses_by_position(
    cli: Invoke, tmp_path: Path
) -> None:
    path = write_gz(tmp_path, langchain_layout())
    assert b"!!binary" in gzip.decompress(path.read_bytes())
    result = cli("replay", str(path), "--json")
    out = json_out(result)
    assert result.exit_code == 0, result.output
    assert out["divergences"] == []
    assert out["state"] == "COMPLETED"
    assert len(out["turns"]) == 4
    assert [o["interactions"] for o in out["operations"]] == [[0, 1, 2, 3]]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda d: d["responses"].pop(),
            "holds 4 request(s) and 3 response(s): LangChain's layout pairs them by position,"
            " so there must be as many of each",
        ),
        (
            lambda d: d["requests"].pop(0),
            "holds 3 request(s) and 4 response(s)",
        ),
        (
            lambda d: d.pop("responses"),
            "holds 'requests' but no 'responses' list",
        ),
        (
            lambda d: d.pop("requests"),
            "holds 'responses' but no 'requests' list",
        ),
        (
            lambda d: d.update(responses={"string": "x"}),
            "'responses' is not a list",
        ),
    ],
)
def test_a_langchain_cassette_whose_lists_do_not_pair_is_refused_by_name(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    """Shifted answers would replay another conversation: refused whole, exit 2, one line."""
    document = langchain_layout()
    change(document)
    path = write_gz(tmp_path, document)
    result = cli("replay", str(path))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert problem in lines[0] and str(path) in lines[0]
    assert "Traceback" not in result.output
