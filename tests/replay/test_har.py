"""HTTP Archives (HAR 1.2), as browsers, Playwright, mitmproxy and Polly.js save them, replay
as the recording they hold does: entries in order, ``[{name, value}]`` headers, the request
body in ``postData.text``, the answer in ``content.text`` (base64 when it says so)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from foreign import TRANSCRIPTS, recorded, refused, replayed, replays_as_recorded
from support.cli import Invoke

from toolloop_cli.transcripts.cassette import load_cassette

PAGE = {
    "request": {"method": "GET", "url": "https://app.example.com/app.js", "headers": []},
    "response": {"status": 0, "headers": [], "content": {"size": 0, "mimeType": "x-unknown"}},
}


def har(name: str, *, base64_answers: bool = False) -> dict[str, Any]:
    """``transcripts/refund-NAME.yaml`` as a HAR, with a page's unanswered request first."""
    exchanges = recorded(name)
    entries: list[dict[str, Any]] = [PAGE]
    for i in exchanges:
        request, response = i["request"], i["response"]
        answer = response["body"]["string"]
        content: dict[str, Any] = {"size": len(answer), "mimeType": "application/json"}
        if base64_answers:
            content.update(text=base64.b64encode(answer.encode()).decode(), encoding="base64")
        else:
            content["text"] = answer
        headers = [{"name": k, "value": v[0]} for k, v in (response.get("headers") or {}).items()]
        entries.append(
            {
                "startedDateTime": "2026-12-01T10:00:00.000Z",
                "time": 812.5,
                "request": {
                    "method": request["method"],
                    "url": request["uri"],
                    "httpVersion": "HTTP/2",
                    "headers": [{"name": "content-type", "value": "application/json"}],
                    "postData": {"mimeType": "application/json", "text": request["body"]},
                },
                "response": {
                    "status": response["status"]["code"],
                    "statusText": "",
                    "headers": [*headers, {"name": "content-encoding", "value": "br"}],
                    "content": content,
                },
            }
        )
    return {"log": {"version": "1.2", "creator": {"name": "Playwright"}, "entries": entries}}


@pytest.mark.parametrize("base64_answers", [False, True])
@pytest.mark.parametrize("name", ["openai", "anthropic-stream", "gemini-stream"])
def test_a_har_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str, base64_answers: bool
) -> None:
    """The answers are the text the client decoded (the ``br`` header names how they came)."""
    path = tmp_path / "session.har"
    path.write_text(json.dumps(har(name, base64_answers=base64_answers)))
    replays_as_recorded(cli, path, name)


def _as_polly_chunks(entry: dict[str, Any]) -> None:
    """Polly.js's layout for a body that is not text: the gzip bytes as a JSON list of the
    base64 texts of the chunks they came in."""
    content = entry["response"]["content"]
    packed = gzip.compress(content["text"].encode())
    pieces = [packed[:40], packed[40:97], packed[97:]]
    content.update(
        text=json.dumps([base64.b64encode(p).decode() for p in pieces]), encoding="base64"
    )
    headers = [h for h in entry["response"]["headers"] if h["name"] != "content-encoding"]
    entry["response"]["headers"] = [*headers, {"name": "content-encoding", "value": "gzip"}]


@pytest.mark.parametrize("name", ["openai", "anthropic-stream"])
def test_a_polly_body_kept_as_a_list_of_base64_chunks_is_read_whole(
    cli: Invoke, tmp_path: Path, name: str
) -> None:
    """Was "'text' says base64 but is not: Only base64 data is allowed" for every gzip answer
    Polly.js recorded (openllmetry-js's Responses recordings)."""
    document = har(name)
    for entry in document["log"]["entries"][1:]:
        _as_polly_chunks(entry)
    path = tmp_path / "recording.har"
    path.write_text(json.dumps(document))
    replays_as_recorded(cli, path, name)


def test_an_emoji_escaped_as_a_surrogate_pair_is_read(cli: Invoke, tmp_path: Path) -> None:
    """``json.dumps`` writes 🏴‍☠️ as ``\\ud83c\\udff4…``, which YAML's reader refused ("found
    invalid Unicode character escape code"): a JSON recording is read as JSON."""
    document = har("openai")
    final = document["log"]["entries"][-1]["response"]["content"]
    body = json.loads(final["text"])
    body["output"][0]["content"][0]["text"] += " 🏴‍☠️"
    final["text"] = json.dumps(body, ensure_ascii=False)
    path = tmp_path / "session.har"
    path.write_text(json.dumps(document))  # ensure_ascii: the emoji as surrogate escapes
    assert "\\ud83c" in path.read_text()
    assert replayed(cli, path) == replayed(cli, TRANSCRIPTS / "refund-openai.yaml")
    answer = load_cassette(path).interactions[-1].response.body
    assert " 🏴‍☠️".encode() in answer  # the escapes read as the characters they stand for


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["log"].update(entries={}), "'log.entries' is not a list"),
        (lambda d: d["log"]["entries"].append("x"), "log.entries[5] is not a mapping"),
        (
            lambda d: d["log"]["entries"][1].pop("response"),
            "log.entries[1] has no 'request' and 'response' mappings",
        ),
        (
            lambda d: d["log"]["entries"][1]["request"].update(headers={"a": "b"}),
            "log.entries[1].request 'headers' is not a list of {name, value}",
        ),
        (
            lambda d: d["log"]["entries"][1]["response"]["content"].update(
                text="%%", encoding="base64"
            ),
            "log.entries[1].response 'text' says base64 but is not",
        ),
        (
            lambda d: d["log"]["entries"][1]["response"]["content"].update(
                text="é", encoding="base64"
            ),
            "log.entries[1].response 'text' says base64 but is not: not ASCII",
        ),
        (
            lambda d: d["log"]["entries"][1]["response"]["content"].update(
                text='["H4sI", "%%"]', encoding="base64"
            ),
            "log.entries[1].response 'text' says base64 but is not",
        ),
        (
            lambda d: d["log"]["entries"][1]["response"].update(status=0),
            "response status 0 is not an HTTP status code",
        ),
    ],
)
def test_a_har_that_is_not_one_is_refused_naming_the_entry(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    document = har("openai")
    change(document)
    path = tmp_path / "broken.har"
    path.write_text(json.dumps(document))
    refused(cli, path, problem)
