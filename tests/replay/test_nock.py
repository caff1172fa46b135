"""nock recordings (Node's HTTP recorder) replay as the recording they hold does: definitions
in order, the URI as scope and path, JSON kept parsed, bytes kept as hex (one string, or a
string per chunk of an encoded answer), headers as Node's raw ``[name, value, ...]`` list."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from foreign import recorded, refused, replays_as_recorded
from support.cli import Invoke


def _response(body: str, headers: list[str], keep: str) -> dict[str, Any]:
    if keep == "json":
        try:
            return {"response": json.loads(body), "rawHeaders": headers}
        except ValueError:
            return {"response": body, "rawHeaders": headers}  # an event stream: its text
    packed = gzip.compress(body.encode())
    if keep == "gzip-chunks":
        chunks = [packed[:50].hex(), packed[50:].hex()]
        return {"response": chunks, "rawHeaders": [*headers, "Content-Encoding", "gzip"]}
    # bytes that are not UTF-8 (gzip data its client did not ask nock to decode): hex
    return {
        "response": packed.hex(),
        "responseIsBinary": True,
        "rawHeaders": [*headers, "Content-Encoding", "gzip"],
    }


def nock(name: str, keep: str) -> list[dict[str, Any]]:
    """``transcripts/refund-NAME.yaml`` as nock definitions."""
    exchanges = recorded(name)
    definitions = []
    for i in exchanges:
        request, response = i["request"], i["response"]
        uri = urlsplit(request["uri"])
        headers = [h for k, v in (response.get("headers") or {}).items() for h in (k, v[0])]
        definitions.append(
            {
                "scope": f"{uri.scheme}://{uri.hostname}:443",
                "method": request["method"],
                "path": uri.path + (f"?{uri.query}" if uri.query else ""),
                "body": json.loads(request["body"]),
                "status": response["status"]["code"],
                **_response(response["body"]["string"], headers, keep),
            }
        )
    return definitions


@pytest.mark.parametrize(
    ("name", "keep"),
    [
        ("openai", "json"),
        ("anthropic-stream", "json"),
        ("gemini-generate", "gzip-chunks"),
        ("openai-stream", "binary"),
    ],
)
def test_a_nock_recording_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str, keep: str
) -> None:
    """Was "not a YAML mapping": a list, but not of VCR interactions."""
    path = tmp_path / "refund.json"
    path.write_text(json.dumps(nock(name, keep)))
    replays_as_recorded(cli, path, name)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d[1].update(path=5), "nock definition 1: 'scope', 'path' and 'method'"),
        (lambda d: d[1].update(rawHeaders=["a"]), "nock definition 1 headers list has a name"),
        (
            lambda d: d[1].update(response="zz", responseIsBinary=True),
            "nock definition 1: 'response' says it holds bytes but is not hex",
        ),
    ],
)
def test_a_nock_recording_that_is_not_one_is_refused_naming_the_definition(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    document = nock("openai", "json")
    change(document)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))
    refused(cli, path, problem)


def test_a_path_given_as_a_whole_url_is_not_glued_to_the_scope(cli: Invoke, tmp_path: Path) -> None:
    definitions = nock("openai", "json")
    for definition in definitions:
        definition["path"] = "https://api.openai.com/v1/responses"
    path = tmp_path / "refund.json"
    path.write_text(json.dumps(definitions))
    replays_as_recorded(cli, path, "openai")


def test_a_header_value_that_is_no_text_is_refused(cli: Invoke, tmp_path: Path) -> None:
    """``true`` was read as the header value "True"."""
    definitions = nock("openai", "json")
    definitions[1]["rawHeaders"] = ["x-flag", True]
    path = tmp_path / "refund.json"
    path.write_text(json.dumps(definitions))
    refused(cli, path, "nock definition 1 headers: 'x-flag' is not a header name with a text value")
