"""Test-proxy session records (the Azure SDKs, OpenAI's .NET SDK) replay as the recording they
hold does: ``Entries`` in order, JSON bodies kept parsed, an event stream kept as its lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from foreign import recorded, refused, replays_as_recorded
from support.cli import Invoke


def _kept(body: str) -> Any:
    """A body as the proxy keeps it: parsed when it is JSON, else its lines."""
    try:
        return json.loads(body)
    except ValueError:
        return body.splitlines(keepends=True)


def session_record(name: str) -> dict[str, Any]:
    """``transcripts/refund-NAME.yaml`` as a session record."""
    exchanges = recorded(name)
    entries = []
    for i in exchanges:
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
    replays_as_recorded(cli, path, name)


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
            lambda d: d["Entries"][1].update(
                RequestBody=["--b\r\n", "b64:%%"],
                RequestHeaders={"Content-Type": "multipart/form-data; boundary=b"},
            ),
            "Entries[1].RequestBody line 'b64:%%' says b64: but is not base64",
        ),
        (
            lambda d: d["Entries"][1].update(ResponseBody=5),
            "Entries[1].ResponseBody is 5: not JSON",
        ),
        (
            lambda d: d["Entries"][1].update(ResponseBody="%%", ResponseHeaders={}),
            "Entries[1].ResponseBody is not text by its content type, and not base64",
        ),
    ],
)
def test_a_session_record_that_is_not_one_is_refused_naming_the_entry(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    document = session_record("openai")
    change(document)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))
    refused(cli, path, problem)


def test_bodies_are_read_as_the_proxys_own_reader_gives_them_back() -> None:
    """``[]`` was served as the two bytes ``[]``; a body the proxy kept as base64 (not text
    by its content type) as its base64 text; a multipart body holding the proxy's ``[]``
    marker of an empty part was written out as a JSON list."""
    from toolloop_cli.transcripts.session_records import session_interactions

    octets = {"Content-Type": "application/octet-stream"}
    multipart = {"Content-Type": "multipart/form-data; boundary=b"}
    plain = {"Content-Type": "text/plain"}
    entries = [
        {"RequestUri": "https://x/f", "RequestMethod": "DELETE", "RequestHeaders": {},
         "RequestBody": [], "StatusCode": 204, "ResponseHeaders": {}, "ResponseBody": []},
        {"RequestUri": "https://x/f", "RequestMethod": "GET", "RequestHeaders": {},
         "RequestBody": None, "StatusCode": 200, "ResponseHeaders": octets,
         "ResponseBody": "aGVsbG8Ad29ybGQ="},
        {"RequestUri": "https://x/f", "RequestMethod": "POST", "RequestHeaders": multipart,
         "RequestBody": ["--b\r\n", "b64:aGk=", [], "\r\n--b--\r\n"], "StatusCode": 200,
         "ResponseHeaders": plain, "ResponseBody": ["b64:not decoded in plain text\n"]},
    ]  # fmt: skip
    bodies = [
        (i["request"]["body"], i["response"]["body"]["string"])
        for i in session_interactions({"Entries": entries}) or []
    ]
    assert bodies == [
        (b"", b""),
        (None, b"hello\x00world"),
        (b"--b\r\nhi\r\n--b--\r\n", b"b64:not decoded in plain text\n"),
    ]
