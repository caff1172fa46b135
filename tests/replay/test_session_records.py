"""Test-proxy session records (the Azure SDKs, OpenAI's .NET SDK) replay as the recording they
hold does: ``Entries`` in order, JSON bodies kept parsed, an event stream kept as its lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

TRANSCRIPTS = ROOT / "transcripts"


def _kept(body: str) -> Any:
    """A body as the proxy keeps it: parsed when it is JSON, else its lines."""
    try:
        return json.loads(body)
    except ValueError:
        return body.splitlines(keepends=True)


def session_record(name: str) -> dict[str, Any]:
    """``transcripts/refund-NAME.yaml`` as a session record."""
    recorded = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())["interactions"]
    entries = []
    for i in recorded:
        request, response = i["request"], i["response"]
        headers = {k: v[0] for k, v in (response.get("headers") or {}).items()}
        entries.append(
            {
                "RequestUri": request["uri"],
                "RequestMethod": request["method"],
                "RequestHeaders": {"Authorization": "Sanitized", "Accept": ["application/json"]},
                "RequestBody": json.loads(request["body"]),
                "StatusCode": response["status"]["code"],
                "ResponseHeaders": {**headers, "Date": "Tue, 23 Sep 2025 23:52:00 GMT"},
                "ResponseBody": _kept(response["body"]["string"]),
            }
        )
    return {"Entries": entries, "Variables": {}}


def replayed(cli: Invoke, path: Path) -> tuple[Any, ...]:
    """The exit code, end state, divergences, turn count and calls of ``toolloop replay``."""
    result = cli("replay", str(path), "--registry", str(REGISTRY), "--json")
    out = json_out(result)
    calls = [(c["name"], c["state"], c["arguments"], c["result"]) for c in out["calls"]]
    return result.exit_code, out["state"], out["divergences"], len(out["turns"]), calls


@pytest.mark.parametrize("name", ["openai", "openai-stream", "anthropic-stream", "gemini"])
def test_a_session_record_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str
) -> None:
    """Was "no 'interactions' list" for every record."""
    document = session_record(name)
    if name.endswith("stream"):
        assert isinstance(document["Entries"][0]["ResponseBody"], list)
    path = tmp_path / "ResponsesTests" / "RefundWithTools.json"
    path.parent.mkdir()
    path.write_text(json.dumps(document))
    expected = replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")
    assert expected[2] == [] and expected[4], expected
    assert replayed(cli, path) == expected


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(Entries={}), "'Entries' is not a list"),
        (lambda d: d["Entries"].append("x"), "Entries[4] is not a mapping"),
        (
            lambda d: d["Entries"][1].pop("RequestUri"),
            "Entries[1] has no 'RequestUri' and 'RequestMethod' strings",
        ),
        (
            lambda d: d["Entries"][1].update(ResponseHeaders={"Date": 5}),
            "Entries[1].ResponseHeaders 'Date' is not text",
        ),
        (
            lambda d: d["Entries"][1].update(ResponseBody=["data: {}\n", "b64:%%"]),
            "Entries[1].ResponseBody line 'b64:%%' says b64: but is not base64",
        ),
        (lambda d: d["Entries"][1].update(ResponseBody=5), "Entries[1].ResponseBody is not JSON"),
    ],
)
def test_a_session_record_that_is_not_one_is_refused_naming_the_entry(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    document = session_record("openai")
    change(document)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and problem in lines[0], result.stderr
    assert "Traceback" not in result.output
