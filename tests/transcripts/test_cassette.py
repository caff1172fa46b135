"""Cassettes: body and header variants, clear errors, provider detection, replay, round-trip."""

from __future__ import annotations

import base64
import gzip
import json
import os
import stat
import textwrap
from pathlib import Path
from typing import Any

import brotli
import pytest
import yaml
import zstandard
from support.paths import ROOT

from toolloop_cli.adapters.openai_responses import OpenAIResponsesAdapter
from toolloop_cli.engine.types import (
    HttpRequest,
    HttpResponse,
    ModelSettings,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import TranscriptError
from toolloop_cli.transcripts import (
    SCRUBBED,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    ReplayTransport,
    cassette as cassette_module,
    cassette_api,
    detect_api,
    dump_cassette,
    load_cassette,
    scrub_headers,
)

REFUND = ROOT / "transcripts" / "refund-openai.yaml"
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "openai").glob("*.yaml"))
OPENAI_URI = "https://api.openai.com/v1/responses"
ANTHROPIC_URI = "https://api.anthropic.com/v1/messages"


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one(tmp_path: Path, request: str, response: str) -> Interaction:
    """Load a one-interaction cassette from YAML fragments (each indented by 4)."""
    text = f"interactions:\n- request:\n{request}\n  response:\n{response}\nversion: 1\n"
    (interaction,) = load_cassette(write(tmp_path, text)).interactions
    return interaction


REQ = f"    method: POST\n    uri: {OPENAI_URI}"
RESP = "    status: {code: 200, message: OK}\n    body: {string: '{}'}"


# -- variants ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        ("    body: '{\"a\": 1}'", b'{"a": 1}'),
        ("    body: {string: '{\"a\": 1}'}", b'{"a": 1}'),
        ("    body: {string: !!binary eyJhIjogMX0=}", b'{"a": 1}'),
        ("    body: null", None),
        ("", None),
        ("    parsed_body: {a: 1}", b'{"a":1}'),
        ("    body: null\n    parsed_body: {a: 1}", b'{"a":1}'),
        ("    body: '{\"a\": 2}'\n    parsed_body: {a: 1}", b'{"a": 2}'),
        ("    body: {type: json, content: {a: 1}}", b'{"a":1}'),
        ("    body: {a: 1, b: [x]}", b'{"a":1,"b":["x"]}'),
        ("    parsed_body: {when: 2026-04-12}", b'{"when":"2026-04-12"}'),
    ],
)
def test_request_body_variants(tmp_path: Path, fragment: str, expected: bytes | None) -> None:
    interaction = one(tmp_path, REQ + ("\n" + fragment if fragment else ""), RESP)
    assert interaction.request.body == expected
    if expected is not None:
        assert interaction.request.json() == json.loads(expected)


@pytest.mark.parametrize(
    ("fragment", "status", "body"),
    [
        ("    status: {code: 200, message: OK}\n    body: {string: 'hi'}", 200, b"hi"),
        ("    status: 429\n    body: 'slow down'", 429, b"slow down"),
        ("    status: {code: '503'}\n    body: {string: !!binary /w==}", 503, b"\xff"),
        ("    status: 200\n    parsed_body: {ok: true}", 200, b'{"ok":true}'),
        ("    status: 204", 204, b""),
    ],
)
def test_response_status_and_body_variants(
    tmp_path: Path, fragment: str, status: int, body: bytes
) -> None:
    response = one(tmp_path, REQ, fragment).response
    assert (response.status, response.body) == (status, body)


def test_headers_are_lower_cased_lists_of_text(tmp_path: Path) -> None:
    response = (
        "    status: 200\n    body: ''\n    headers:\n"
        "      Content-Type: application/json\n"
        "      openai-version:\n      - 2020-10-01\n"
        "      content-length: [236]\n"
        "      x-flag: true\n"
        "      Set-Cookie: [a=1]\n      set-cookie: [b=2]\n"
    )
    headers = one(tmp_path, REQ + "\n    headers: {Accept: [application/json]}", response)
    assert headers.request.headers == {"accept": ["application/json"]}
    assert headers.response.headers == {
        "content-type": ["application/json"],
        "openai-version": ["2020-10-01"],
        "content-length": ["236"],
        "x-flag": ["true"],
        "set-cookie": ["a=1", "b=2"],
    }


def test_vcrpys_older_httpx_response_shape_is_read(tmp_path: Path) -> None:
    """``{status_code, http_version, headers: {name: text}, content}``: what vcrpy's httpx stub
    wrote before it used the common shape (vcrpy still plays these back)."""
    response = (
        "    status_code: 400\n    http_version: HTTP/1.1\n"
        "    headers:\n      content-type: application/json\n      content-encoding: gzip\n"
        '    content: \'{"error": {"message": "no"}}\''
    )
    recorded = one(tmp_path, REQ, response).response
    assert recorded.status == 400
    assert recorded.body == b'{"error": {"message": "no"}}'  # httpx had decoded it already
    assert recorded.headers["content-type"] == ["application/json"]


def test_status_wins_over_status_code_and_content_must_be_text(tmp_path: Path) -> None:
    assert (
        one(tmp_path, REQ, "    status: 200\n    status_code: 500\n    body: ''").response.status
        == 200
    )
    with pytest.raises(TranscriptError, match="response 'content' is not text"):
        one(tmp_path, REQ, "    status_code: 200\n    content: [1]")


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("999", "response status 999 is not an HTTP status code (100-599)"),
        ("{code: 0, message: x}", "response status 0 is not an HTTP status code (100-599)"),
        ("ok", "response has no HTTP status code (an int or {code, message})"),
    ],
)
def test_a_status_out_of_range_is_named_as_such_not_as_missing(
    tmp_path: Path, status: str, message: str
) -> None:
    with pytest.raises(TranscriptError) as info:
        one(tmp_path, REQ, f"    status: {status}\n    body: ''")
    assert message in str(info.value)


def encoded_response(body: bytes, coding: str) -> str:
    packed = base64.b64encode(body).decode()
    return (
        "    status: {code: 200, message: OK}\n"
        f"    headers: {{content-encoding: ['{coding}'], content-type: [application/json]}}\n"
        f"    body: {{string: !!binary '{packed}'}}"
    )


ANSWER = b'{"id": "resp_1"}'


@pytest.mark.parametrize(
    ("body", "coding", "read"),
    [
        (gzip.compress(gzip.compress(ANSWER)), "gzip, gzip", ANSWER),
        (ANSWER, "br", ANSWER),  # the recorder decoded it and kept the header
        (ANSWER, "gzip", ANSWER),
        (brotli.compress(ANSWER), "br", ANSWER),
        (zstandard.ZstdCompressor().compress(ANSWER), "zstd", ANSWER),
        (ANSWER, "zstd", ANSWER),
        (brotli.compress(b"event: x\ndata: {}\n\n"), "identity, br", b"event: x\ndata: {}\n\n"),
    ],
    ids=[
        "two gzip layers",
        "br already decoded",
        "gzip already decoded",
        "br",
        "zstd",
        "zstd already decoded",
        "br event stream",
    ],
)
def test_encoded_bodies_are_read_as_the_text_they_carry(
    tmp_path: Path, body: bytes, coding: str, read: bytes
) -> None:
    assert one(tmp_path, REQ, encoded_response(body, coding)).response.body == read


@pytest.mark.parametrize(
    ("coding", "message"),
    [
        ("br", "says content-encoding br but does not decode"),
        ("zstd", "says content-encoding zstd but does not decode"),
        ("gzip", "says content-encoding gzip but is neither that nor text"),
        ("compress", "says content-encoding compress and is not text: toolloop decodes gzip,"),
    ],
)
def test_a_body_still_encoded_in_a_way_toolloop_does_not_undo_is_the_cassettes_fault(
    tmp_path: Path, coding: str, message: str
) -> None:
    """Reported when the cassette is read (exit 2), not later as a provider answer that is
    not UTF-8 (FAILED), which would blame the provider for the recording."""
    with pytest.raises(TranscriptError) as info:
        one(tmp_path, REQ, encoded_response(b"\x1b\xff\xfe\x00 not text", coding))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("body", "coding", "message"),
    [
        (brotli.compress(b"{" + b" " * (17 * 1024 * 1024) + b"}"), "br", "decodes to more than"),
        (
            zstandard.ZstdCompressor().compress(b"{" + b" " * (17 * 1024 * 1024) + b"}"),
            "zstd",
            "decodes to more than",
        ),
        (brotli.compress(ANSWER * 100)[:-4], "br", "ends too soon"),
    ],
    ids=["br bomb", "zstd bomb", "br cut short"],
)
def test_a_br_or_zstd_body_past_the_cap_or_cut_short_is_refused(
    tmp_path: Path, body: bytes, coding: str, message: str
) -> None:
    """A few kilobytes that decode past the 16 MiB cap of an answer are refused while decoding,
    a piece at a time, as gzip bodies are."""
    assert len(body) < 64 * 1024 or message == "ends too soon"
    with pytest.raises(TranscriptError) as info:
        one(tmp_path, REQ, encoded_response(body, coding))
    assert message in str(info.value)


def test_aiohttp_header_names_are_read_as_text_and_no_other_python_tag_is(tmp_path: Path) -> None:
    """vcrpy's aiohttp stub writes header names as multidict ``istr`` objects, with a Python
    tag; only that class, called with one string, is read (as the string)."""
    istr = "!!python/object/apply:multidict._multidict.istr"
    request = REQ + f"\n    headers:\n      ? {istr}\n      - Content-Type\n      : - a/b"
    assert one(tmp_path, request, RESP).request.headers == {"content-type": ["a/b"]}
    for tag, arg in [
        ("!!python/object/apply:os.system", "['true']"),
        ("!!python/object/apply:multidict._multidict.istr", "[[nested]]"),
        ("!!python/object/apply:multidict._multidict.istr", "[a, b]"),
        ("!!python/name:os.system", "''"),
    ]:
        text = f"interactions:\n- request: {{uri: {OPENAI_URI}, headers: {{x: {tag} {arg}}}}}\n"
        path = write(tmp_path, text + GOOD_RESPONSE, "tagged.yaml")
        with pytest.raises(TranscriptError) as info:
            load_cassette(path)
        assert "not valid YAML at line 2, column" in str(info.value)  # where, and why:
        assert tag.removeprefix("!!") in str(info.value)


def test_a_header_value_recorded_as_bytes_is_its_text(tmp_path: Path) -> None:
    """vcrpy's boto3 stub keeps header values as bytes (``!!binary``)."""
    request = REQ + "\n    headers:\n      X-Amz-Date: !!binary |\n        MjAyNjEyMDZUMTAwMDAwWg=="
    headers = one(tmp_path, request, RESP).request.headers
    assert headers == {"x-amz-date": ["20261206T100000Z"]}
    latin = REQ + "\n    headers: {x-name: !!binary 6Q==}"  # one byte, not UTF-8
    assert one(tmp_path, latin, RESP).request.headers == {"x-name": ["é"]}


def test_metadata_keeps_other_top_level_keys(tmp_path: Path) -> None:
    text = f"version: 1\nrecorded_with: vcrpy\ninteractions:\n- request: {{uri: {OPENAI_URI}}}\n"
    text += "  response: {status: 200, body: ''}\n"
    cassette = load_cassette(write(tmp_path, text))
    assert cassette.metadata == {"version": 1, "recorded_with": "vcrpy"}
    assert cassette.interactions[0].request.method == "POST"
    assert cassette.path == str(tmp_path / "c.yaml")


# -- malformed cassettes -------------------------------------------------------------------

GOOD_RESPONSE = "  response: {status: 200, body: ''}\n"
MALFORMED = [
    (
        "interactions: [\n  - {request: ",
        "not valid YAML at line 2, column 3: did not find expected node",
    ),
    ("- just\n- a list\n", "a list, but not of interactions"),
    ("", "the file holds nothing"),
    ("version: 1\n", "no 'interactions' list"),
    ("interactions: {request: {}}\n", "no 'interactions' list"),
    ("interactions:\n- 42\n", "interaction 0: not a mapping"),
    ("interactions:\n- response: {status: 200}\n", "interaction 0: no 'request' mapping"),
    (f"interactions:\n- request: {{uri: {OPENAI_URI}}}\n", "interaction 0: no 'response' mapping"),
    ("interactions:\n- request: {method: POST}\n" + GOOD_RESPONSE, "request has no 'uri'"),
    (
        f"interactions:\n- request: {{uri: {OPENAI_URI}}}\n  response: {{status: OK}}\n",
        "no HTTP status code",
    ),
    (
        f"interactions:\n- request: {{uri: {OPENAI_URI}}}\n  response: {{status: 200, body: 7}}\n",
        "response 'body' is not a string",
    ),
    (
        f"interactions:\n- request: {{uri: {OPENAI_URI}, headers: [a]}}\n" + GOOD_RESPONSE,
        "request 'headers' is not a mapping",
    ),
    (
        "interactions:\n- request: {uri: 'https://example.com/v1/chat/completions'}\n"
        + GOOD_RESPONSE,
        "no interaction with a known provider API URI",
    ),
    ("interactions: []\n", "no interaction with a known provider API URI"),
]


@pytest.mark.parametrize(("text", "problem"), MALFORMED, ids=[p for _, p in MALFORMED])
def test_malformed_cassette_is_one_clear_line(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text, "broken.yaml")
    with pytest.raises(TranscriptError) as info:
        load_cassette(path)
    message = str(info.value)
    assert message.startswith(f"transcript {path}: ")
    assert problem in message
    assert "\n" not in message


def test_a_cassette_of_other_endpoints_says_which_it_holds_and_which_toolloop_reads(
    tmp_path: Path,
) -> None:
    """Paths only, most frequent first, at most three: a host or query may carry a key."""
    chat = "https://user:pw@api.openai.com/v1/chat/completions?api_key=sk-secret"
    uris = [chat, chat, "https://api.openai.com/v1/embeddings", "https://x.test/a", "https://x/b"]
    text = "interactions:\n" + "".join(f"- request: {{uri: '{u}'}}\n" + GOOD_RESPONSE for u in uris)
    with pytest.raises(TranscriptError) as info:
        load_cassette(write(tmp_path, text))
    message = str(info.value)
    assert (
        "no interaction with a known provider API URI (it holds: POST /v1/chat/completions ×2, "
        "POST /v1/embeddings, POST /a, and 1 other(s)); toolloop reads POST requests to OpenAI "
        "/v1/responses"
    ) in message
    assert "secret" not in message and "pw" not in message and "api.openai.com" not in message
    with pytest.raises(TranscriptError, match=r"URI \(it holds no interaction\); toolloop"):
        load_cassette(write(tmp_path, "interactions: []\n"))


def test_a_long_path_is_shown_with_its_end_where_its_method_is(tmp_path: Path) -> None:
    """Anthropic on Vertex: the path's end (``:rawPredict``) is what says why it is refused.
    A GET of a stored response is told apart from the POST toolloop reads."""
    vertex = (
        "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project-123/locations/"
        "us-east5/publishers/anthropic/models/claude-3-7-sonnet@20250219:rawPredict"
    )
    stored = "https://api.openai.com/v1/responses/resp_67d4"
    text = (
        f"interactions:\n- request: {{uri: '{vertex}'}}\n{GOOD_RESPONSE}"
        f"- request: {{uri: '{stored}', method: GET}}\n{GOOD_RESPONSE}"
    )
    with pytest.raises(TranscriptError) as info:
        load_cassette(write(tmp_path, text))
    message = str(info.value)
    assert "(it holds: POST /v1/projects/my-project-123/locations/us…" in message
    assert "…s/claude-3-7-sonnet@20250219:rawPredict, GET /v1/responses/resp_67d4); " in message
    assert "toolloop reads POST requests to OpenAI /v1/responses" in message


def test_missing_and_undecodable_files(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match=r"transcript .*nope\.yaml: cannot read"):
        load_cassette(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"interactions: ['\xe9']\n")
    with pytest.raises(TranscriptError, match=r"latin1\.yaml: cannot read"):
        load_cassette(bad)


def test_a_gzip_compressed_cassette_file_reads_as_the_yaml_it_holds(tmp_path: Path) -> None:
    """LangChain keeps its cassettes as ``.yaml.gz``: the same recording, compressed."""
    packed = tmp_path / "refund.yaml.gz"
    packed.write_bytes(gzip.compress(REFUND.read_bytes()))
    plain = load_cassette(REFUND)
    read = load_cassette(packed)
    assert read.interactions == plain.interactions
    assert read.metadata == plain.metadata


def test_a_compressed_cassette_that_is_corrupt_or_too_big_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = tmp_path / "cut.yaml.gz"
    cut.write_bytes(gzip.compress(REFUND.read_bytes())[:-40])
    with pytest.raises(TranscriptError, match=r"cut\.yaml\.gz: gzip data does not decompress"):
        load_cassette(cut)
    bomb = tmp_path / "bomb.yaml.gz"
    bomb.write_bytes(gzip.compress(b"#" * 200_000))  # a few hundred bytes on disk
    monkeypatch.setattr(cassette_module, "MAX_CASSETTE_BYTES", 100_000)
    with pytest.raises(TranscriptError, match=r"bomb\.yaml\.gz: decompresses to more than 100000"):
        load_cassette(bomb)


def test_request_json_helper_refuses_non_json() -> None:
    request = RecordedRequest(method="POST", uri=OPENAI_URI, body=b"not json")
    with pytest.raises(TranscriptError, match="no JSON body"):
        request.json()
    assert RecordedRequest(method="GET", uri=OPENAI_URI).json() is None


# -- detection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "api"),
    [
        (OPENAI_URI, ("openai", "responses")),
        ("http://127.0.0.1:8080/v1/responses?trace=1", ("openai", "responses")),
        ("https://gateway.example/openai/v1/responses/", ("openai", "responses")),
        (ANTHROPIC_URI, ("anthropic", "messages")),
        ("http://localhost:9/v1/messages?beta=true", ("anthropic", "messages")),
        (
            "https://generativelanguage.googleapis.com/v1beta/interactions",
            ("gemini", "interactions"),
        ),
        ("https://proxy.local/v1/interactions", ("gemini", "interactions")),
        (
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
            ("gemini", "generate_content"),
        ),
        (
            "https://x/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            ("gemini", "generate_content"),
        ),
        ("https://api.openai.com/v1/responses/resp_123", None),
        ("https://api.openai.com/v1/chat/completions", None),
        ("https://example.com/search?q=/v1/responses", None),
        ("https://api.anthropic.com/v1/messages/count_tokens", None),
        ("not a uri", None),
    ],
)
def test_detect_api(uri: str, api: tuple[str, str] | None) -> None:
    assert detect_api(uri) == api


# -- replay --------------------------------------------------------------------------------


def interaction(uri: str, body: bytes, status: int = 200) -> Interaction:
    return Interaction.of(
        RecordedRequest(method="POST", uri=uri, body=b"{}"),
        RecordedResponse(
            status=status,
            headers={"content-type": ["application/json"], "x-multi": ["a", "b"]},
            body=body,
        ),
    )


def request(n: int) -> HttpRequest:
    return HttpRequest(url=OPENAI_URI, body={"n": n})


def mixed() -> Cassette:
    return Cassette(
        path="mixed.yaml",
        interactions=[
            interaction("https://telemetry.example/v1/events", b"t"),
            interaction(OPENAI_URI, b"first"),
            interaction(ANTHROPIC_URI, b"claude"),
            interaction(OPENAI_URI, b"second", status=500),
        ],
    )


def test_replay_serves_in_order_skipping_other_endpoints() -> None:
    transport = ReplayTransport(mixed())
    assert (transport.name, transport.api, transport.remaining) == (
        "transcript",
        ("openai", "responses"),
        2,
    )
    first = transport.send(request(1))
    second = transport.send(request(2))
    assert isinstance(first, HttpResponse)
    assert (first.status, first.body, second.status, second.body) == (200, b"first", 500, b"second")
    assert first.headers == {"content-type": "application/json", "x-multi": "a, b"}
    assert [r.body["n"] for r in transport.sent] == [1, 2]
    assert [i.response.body for i in transport.served] == [b"first", b"second"]
    with pytest.raises(TranscriptError) as info:
        transport.send(request(3))
    assert str(info.value) == (
        "transcript mixed.yaml has no recorded response left for request 2 (counted from 0)"
    )
    assert len(transport.sent) == 3 and transport.remaining == 0


def test_replay_for_an_explicit_api() -> None:
    transport = ReplayTransport(mixed(), api=("anthropic", "messages"))
    assert transport.send(request(1)).body == b"claude"
    with pytest.raises(TranscriptError, match=r"for request 1 \(counted from 0\)"):
        transport.send(request(2))


def test_cassette_api_is_the_first_known_one() -> None:
    assert cassette_api(mixed()) == ("openai", "responses")
    unknown = Cassette("u.yaml", [interaction("https://example.com/x", b"")])
    with pytest.raises(TranscriptError, match="u.yaml"):
        cassette_api(unknown)


# -- writing -------------------------------------------------------------------------------


def test_scrub_headers() -> None:
    scrubbed = scrub_headers(
        {
            "Authorization": "Bearer sk-secret",
            "x-api-key": ["k1"],
            "X-Goog-Api-Key": "g",
            "api-key": "a",
            "OpenAI-Organization": "org",
            "Cookie": ["c=1"],
            "set-cookie": ["s=1", "s=2"],
            "content-type": "application/json",
        }
    )
    assert scrubbed == {
        "authorization": [SCRUBBED],
        "x-api-key": [SCRUBBED],
        "x-goog-api-key": [SCRUBBED],
        "api-key": [SCRUBBED],
        "openai-organization": [SCRUBBED],
        "cookie": [SCRUBBED],
        "set-cookie": [SCRUBBED, SCRUBBED],
        "content-type": ["application/json"],
    }


def test_dump_round_trip_scrubs_secrets(tmp_path: Path) -> None:
    secret_request = RecordedRequest(
        method="POST",
        uri="https://generativelanguage.googleapis.com/v1beta/interactions?key=AIza-secret&alt=x",
        headers={"authorization": ["Bearer sk-secret"], "x-goog-api-key": ["AIza-secret"]},
        body='{"input": "é"}'.encode(),
    )
    binary = RecordedResponse(
        status=201, headers={"set-cookie": ["sid=secret"], "x-id": ["1"]}, body=b"\x00\xff"
    )
    text = RecordedResponse(status=200, headers={}, body=b'{"ok": true}')
    cassette = Cassette(
        path="in-memory",
        interactions=[
            Interaction.of(secret_request, binary),
            Interaction.of(RecordedRequest("POST", OPENAI_URI), text),
        ],
        metadata={"version": 1, "note": "kept"},
    )
    path = tmp_path / "out" / "rec.yaml"
    dump_cassette(cassette, path)

    raw = path.read_text(encoding="utf-8")
    assert "secret" not in raw
    assert "!!binary" in raw and "é" in raw
    assert os.listdir(path.parent) == ["rec.yaml"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    document = yaml.safe_load(raw)
    assert document["version"] == 1 and document["note"] == "kept"
    assert document["interactions"][1]["response"]["status"] == {"code": 200, "message": "OK"}

    loaded = load_cassette(path)
    first, second = loaded.interactions
    assert first.api == ("gemini", "interactions")
    assert "key=%3Cscrubbed%3E" in first.request.uri and "alt=x" in first.request.uri
    assert first.request.headers["authorization"] == [SCRUBBED]
    assert first.request.json() == {"input": "é"}
    assert (first.response.status, first.response.body) == (201, b"\x00\xff")
    assert first.response.headers == {"set-cookie": [SCRUBBED], "x-id": ["1"]}
    assert (second.request.body, second.response.body) == (None, b'{"ok": true}')
    assert loaded.metadata == {"note": "kept", "version": 1}


def test_dump_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rec.yaml"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o600)

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    items = [interaction(OPENAI_URI, b"x")]
    with pytest.raises(OSError, match="disk full"):
        dump_cassette(items, path)
    assert path.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["rec.yaml"]
    monkeypatch.undo()
    dump_cassette(items, path)
    assert load_cassette(path).interactions[0].response.body == b"x"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # an existing file keeps its mode


# -- the shipped recordings ----------------------------------------------------------------


def test_refund_transcript_replays_to_the_expected_turns() -> None:
    cassette = load_cassette(REFUND)
    assert [i.api for i in cassette.interactions] == [("openai", "responses")] * 4
    adapter = OpenAIResponsesAdapter()
    transport = ReplayTransport(cassette)
    recorded = [i.request for i in cassette.interactions]
    turns = [adapter.parse_response(transport.send(request(n))) for n in range(4)]
    assert [t.outcome for t in turns] == [TurnOutcome.TOOL_PROPOSALS] * 3 + [TurnOutcome.FINAL_TEXT]
    assert [(c.name, json.loads(c.raw_arguments)) for t in turns for c in t.calls] == [
        ("get_order", {"order_id": "ord_1001"}),
        (
            "create_refund_draft",
            {"order_id": "ord_1001", "amount_cents": 4999, "reason": "arrived damaged"},
        ),
        ("submit_refund", {"order_id": "ord_1001", "amount_cents": 4999}),
    ]
    assert turns[1].text == "The order was delivered for $49.99; I'll draft a full refund."
    assert turns[3].text is not None and "rf_1001_1" in turns[3].text
    assert all(t.model == "gpt-4.1-2025-04-14" and t.usage.total_tokens > 0 for t in turns)
    ids = [c.call_id for t in turns for c in t.calls] + [c.item_id for t in turns for c in t.calls]
    assert len(set(ids)) == 6
    for r in recorded:
        assert r.headers["authorization"] == [SCRUBBED]
        assert r.json()["model"] == "gpt-4.1-2025-04-14"


RESULTS: list[dict[str, Any]] = [
    {
        "ok": True,
        "result": {
            "amount_cents": 4999,
            "currency": "USD",
            "customer_id": "cus_42",
            "order_id": "ord_1001",
            "status": "delivered",
        },
    },
    {
        "ok": True,
        "result": {
            "amount_cents": 4999,
            "draft_id": "drf_1001_1",
            "order_id": "ord_1001",
            "status": "draft",
        },
    },
    {
        "ok": True,
        "result": {
            "amount_cents": 4999,
            "order_id": "ord_1001",
            "refund_id": "rf_1001_1",
            "status": "submitted",
        },
    },
]


def test_refund_transcript_requests_are_what_the_adapter_builds() -> None:
    """Rebuild each request from the task, the answers and the results: byte-for-byte input."""
    cassette = load_cassette(REFUND)
    adapter = OpenAIResponsesAdapter()
    first = cassette.interactions[0].request.json()
    assert first["input"] == [
        {
            "role": "user",
            "content": "Order ord_1001 arrived damaged. Look it up, refund it in full, "
            "and tell me what you did.",
        }
    ]
    tools = [
        ToolSpec(name=t["name"], description=t["description"], parameters=t["parameters"])
        for t in first["tools"]
    ]
    assert [t.name for t in tools] == ["get_order", "create_refund_draft", "submit_refund"]
    settings = ModelSettings(model=first["model"])
    conversation = adapter.start(first["input"][0]["content"], settings)
    for n, item in enumerate(cassette.interactions):
        built = adapter.build_request(conversation, tools, settings)
        assert built.url == item.request.uri
        assert built.body == item.request.json()
        if n == 3:
            break
        turn = adapter.parse_response(HttpResponse(200, {}, item.response.body))
        (call,) = turn.calls
        result = ResultForModel(
            response_id=turn.response_id or "",
            call_id=call.call_id,
            name=call.name,
            is_error=False,
            content=RESULTS[n],
        )
        conversation = [*conversation, *turn.output_items, *adapter.result_items([result])]
    outputs = [i for i in cassette.interactions[3].request.json()["input"] if "output" in i]
    assert outputs[0]["output"] == (
        '{"ok":true,"result":{"amount_cents":4999,"currency":"USD","customer_id":"cus_42",'
        '"order_id":"ord_1001","status":"delivered"}}'
    )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_fixture_is_a_valid_openai_cassette(path: Path) -> None:
    cassette = load_cassette(path)
    assert cassette.interactions
    assert {i.api for i in cassette.interactions} == {("openai", "responses")}
    for item in cassette.interactions:
        assert item.request.headers["authorization"] == [SCRUBBED]
        assert item.request.json()["input"][0]["role"] == "user"


CALL = {
    "id": "fc_0e9d",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"country":"France"}',
    "call_id": "call_HQHd",
    "name": "get_capital",
}
EVENTS: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "resp_0e9d", "status": "in_progress"}},
    {"type": "response.output_item.added", "output_index": 0, "item": {**CALL, "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_0e9d", "delta": "{"},
    {
        "type": "response.completed",
        "response": {
            "id": "resp_0e9d",
            "object": "response",
            "status": "completed",
            "model": "gpt-4o-2024-08-06",
            "output": [CALL],
            "usage": {"input_tokens": 39, "output_tokens": 16, "total_tokens": 55},
        },
    },
]
SSE = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in EVENTS)
#: the shape pydantic-ai records streams in: parsed request body, ``string: |+`` response body
STREAMED = (
    "interactions:\n- request:\n    method: POST\n"
    "    parsed_body: {model: gpt-4o, stream: true, input: [{role: user, content: capital?}]}\n"
    f"    uri: {OPENAI_URI}\n"
    "  response:\n    body:\n      string: |+\n"
    + textwrap.indent(SSE, " " * 8)
    + "    headers:\n      content-type:\n      - text/event-stream; charset=utf-8\n"
    "    status:\n      code: 200\n      message: OK\nversion: 1\n"
)


def test_streamed_recording_replays_through_the_adapter(tmp_path: Path) -> None:
    """A pydantic-ai style SSE recording (``string: |+``) is served as-is and parsed."""
    cassette = load_cassette(write(tmp_path, STREAMED))
    assert cassette.interactions[0].request.json()["stream"] is True
    answer = ReplayTransport(cassette).send(request(1))
    assert answer.content_type.startswith("text/event-stream")
    turn = OpenAIResponsesAdapter().parse_response(answer)
    assert turn.outcome is TurnOutcome.TOOL_PROPOSALS
    (call,) = turn.calls
    assert (call.call_id, call.item_id, json.loads(call.raw_arguments)) == (
        "call_HQHd",
        "fc_0e9d",
        {"country": "France"},
    )
    assert turn.usage.total_tokens == 55
