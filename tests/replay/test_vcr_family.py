"""Cassettes written by VCR's other ports: Ruby's VCR (RubyLLM, ruby-openai, langchainrb
record with it), Betamax (Python ``requests``) and Go's go-vcr.

Ruby VCR keeps the interactions under ``http_interactions``, writes the method in lower case
(``method: post``), each body as ``{encoding, string}``, a body that is not UTF-8 (an event
stream with a multi-byte character split across chunks, say) with Ruby's own ``!binary`` tag
(base64, YAML's ``!!binary`` under another name) or, with its exact-bytes option, as
``base64_string``; and adds ``recorded_at`` and ``recorded_with``. Betamax writes the same as
JSON; go-vcr names the URI ``url`` and the status ``code``. Each test lays the shipped refund
recordings out that way and expects what the recording itself replays to.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

from toolloop_cli.transcripts.shapes import Problem, status_of

TRANSCRIPTS = ROOT / "transcripts"
NAMES = ["openai", "openai-stream", "anthropic", "anthropic-stream", "gemini-generate-stream"]


def ruby_vcr(name: str, body: str = "binary") -> str:
    """``transcripts/refund-NAME.yaml`` as Ruby VCR writes a cassette: each answer's bytes
    under ``!binary`` (``body="binary"``), as ``base64_string``, or as text (``"text"``)."""
    recorded = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())["interactions"]
    interactions = []
    for i in recorded:
        request, response = i["request"], i["response"]
        answer: bytes = response["body"]["string"].encode()
        kept: dict[str, Any] = {"encoding": "ASCII-8BIT"}
        if body == "binary":
            kept["string"] = answer
        elif body == "base64_string":
            kept["base64_string"] = base64.encodebytes(answer).decode()
        else:
            kept["string"] = answer.decode()
        interactions.append(
            {
                "request": {
                    "method": request["method"].lower(),
                    "uri": request["uri"],
                    "body": {"encoding": "UTF-8", "string": request["body"]},
                    "headers": {"Content-Type": ["application/json"], "User-Agent": ["Faraday"]},
                },
                "response": {
                    "status": {"code": response["status"]["code"], "message": "OK"},
                    "headers": {k.title(): v for k, v in (response.get("headers") or {}).items()},
                    "body": kept,
                },
                "recorded_at": "Thu, 12 Jun 2025 16:29:20 GMT",
            }
        )
    text = yaml.safe_dump({"http_interactions": interactions, "recorded_with": "VCR 6.3.1"})
    return "---\n" + text.replace("!!binary", "!binary")  # Ruby's tag for the same base64


def replayed(cli: Invoke, path: Path) -> tuple[Any, ...]:
    """The exit code, end state, divergences, turn count and calls of ``toolloop replay``."""
    result = cli("replay", str(path), "--registry", str(REGISTRY), "--json")
    out = json_out(result)
    calls = [(c["name"], c["state"], c["arguments"], c["result"]) for c in out["calls"]]
    return result.exit_code, out["state"], out["divergences"], len(out["turns"]), calls


@pytest.mark.parametrize("body", ["binary", "base64_string", "text"])
@pytest.mark.parametrize("name", NAMES)
def test_a_ruby_vcr_cassette_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str, body: str
) -> None:
    text = ruby_vcr(name, body)
    assert "http_interactions:" in text and "method: post" in text
    if body == "binary":
        assert "!binary |" in text and "!!binary" not in text
    path = tmp_path / "chat_function_calling_can_use_tools.yml"
    path.write_text(text)
    expected = replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")
    assert expected[2] == [] and expected[4], expected
    assert replayed(cli, path) == expected


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("{encoding: ASCII-8BIT, base64_string: '%%%'}", "body 'base64_string' is not base64"),
        ("{encoding: ASCII-8BIT, base64_string: [1]}", "body 'base64_string' is not text"),
        ("{encoding: ASCII-8BIT, base64_string: 'é'}", "body 'base64_string' is not base64"),
        ("{encoding: ASCII-8BIT, string: !binary [1]}", "!binary holds something other than"),
    ],
)
def test_a_ruby_vcr_body_that_does_not_decode_is_refused_in_one_line(
    cli: Invoke, tmp_path: Path, body: str, problem: str
) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(
        "---\nhttp_interactions:\n- request:\n    method: post\n"
        "    uri: https://api.openai.com/v1/responses\n"
        "    body: {encoding: UTF-8, string: '{}'}\n"
        f"  response:\n    status: {{code: 200, message: OK}}\n    body: {body}\n"
        "recorded_with: VCR 6.3.1\n"
    )
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and problem in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_a_betamax_json_cassette_replays_as_the_recording_does(cli: Invoke, tmp_path: Path) -> None:
    """Betamax (Python ``requests``) writes the same layout as JSON: ``encoding`` may be null."""
    document = yaml.safe_load(ruby_vcr("anthropic", "base64_string"))
    for interaction in document["http_interactions"]:
        interaction["request"]["method"] = "POST"
        interaction["response"]["body"]["encoding"] = None
    document["recorded_with"] = "betamax/0.8.1"
    path = tmp_path / "test_tool_loop.json"
    path.write_text(json.dumps(document))
    assert replayed(cli, path) == replayed(cli, TRANSCRIPTS / "refund-anthropic.yaml")


def go_vcr(name: str) -> dict[str, Any]:
    """``transcripts/refund-NAME.yaml`` as Go's go-vcr (v2 and later) writes a cassette."""
    recorded = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())["interactions"]
    interactions = []
    for n, i in enumerate(recorded):
        request, response = i["request"], i["response"]
        interactions.append(
            {
                "id": n,
                "request": {
                    "proto": "HTTP/1.1",
                    "content_length": len(request["body"]),
                    "body": request["body"],
                    "form": {},
                    "headers": {"Content-Type": ["application/json"]},
                    "url": request["uri"],
                    "method": request["method"],
                },
                "response": {
                    "proto": "HTTP/2.0",
                    "content_length": -1,
                    "body": response["body"]["string"],
                    "headers": {k.title(): v for k, v in (response.get("headers") or {}).items()},
                    "status": "200 OK",
                    "code": response["status"]["code"],
                    "duration": "1.5s",
                },
            }
        )
    return {"version": 2, "interactions": interactions}


@pytest.mark.parametrize("name", ["openai-stream", "anthropic"])
def test_a_go_vcr_cassette_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str
) -> None:
    """go-vcr names the URI ``url`` and writes ``status: 200 OK`` with the number in ``code``."""
    path = tmp_path / "TestToolLoop.yaml"
    path.write_text(yaml.safe_dump(go_vcr(name)))
    assert replayed(cli, path) == replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")


@pytest.mark.parametrize(
    ("status", "code"),
    [({"status": "200 OK"}, 200), ({"status": "404"}, 404), ({"status": 201}, 201)],
)
def test_a_status_line_without_a_code_is_read_by_its_number(status: Any, code: int) -> None:
    assert status_of(status) == code


@pytest.mark.parametrize("status", ["OK", "2000 OK", "20 OK", "200OK"])
def test_a_status_that_is_no_status_line_is_refused(status: str) -> None:
    with pytest.raises(Problem, match="no HTTP status code"):
        status_of({"status": status})


def test_a_php_vcr_cassette_replays_as_the_recording_does(cli: Invoke, tmp_path: Path) -> None:
    """php-vcr (and Elixir's ExVCR, as JSON) write the interactions as the document itself, the
    status code as a string."""
    document = go_vcr("anthropic")["interactions"]
    for interaction in document:
        response = interaction["response"]
        code = response.pop("code")
        response["status"] = {"http_version": "1.1", "code": str(code), "message": "OK"}
    path = tmp_path / "tool_loop.yml"
    path.write_text(yaml.safe_dump(document))
    assert replayed(cli, path) == replayed(cli, TRANSCRIPTS / "refund-anthropic.yaml")


def test_a_list_that_holds_no_interactions_is_still_refused(cli: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "list.yml"
    path.write_text("- request: {}\n- just text\n")
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    assert "a list, but not of interactions" in result.stderr


def exvcr(name: str) -> list[dict[str, Any]]:
    """``transcripts/refund-NAME.yaml`` as ExVCR (Finch adapter) writes JSON: the list alone,
    ``url``, ``method: post``, ``status_code``, and each answer gzipped, so not UTF-8, kept
    as ``"binary": true`` with the base64 of ``:erlang.term_to_binary(body)``."""
    recorded = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())["interactions"]
    document = []
    for i in recorded:
        request, response = i["request"], i["response"]
        packed = gzip.compress(response["body"]["string"].encode())
        term = b"\x83m" + len(packed).to_bytes(4, "big") + packed
        headers = {k: v[0] for k, v in (response.get("headers") or {}).items()}
        document.append(
            {
                "request": {
                    "url": request["uri"],
                    "method": "post",
                    "body": request["body"],
                    "headers": {"content-type": "application/json", "accept-encoding": "gzip"},
                    "options": {"receive_timeout": 120000},
                    "request_body": "",
                },
                "response": {
                    "binary": True,
                    "type": "ok",
                    "body": base64.b64encode(term).decode(),
                    "headers": {**headers, "content-encoding": "gzip"},
                    "status_code": response["status"]["code"],
                },
            }
        )
    return document


@pytest.mark.parametrize("name", ["anthropic", "gemini-generate-stream"])
def test_an_exvcr_binary_body_is_read_as_the_erlang_binary_it_holds(
    cli: Invoke, tmp_path: Path, name: str
) -> None:
    """The base64 of the Erlang term was handed to the adapter as the answer: FAILED, exit 13,
    "body is not acceptable JSON", blaming the provider."""
    path = tmp_path / "tool_loop.json"
    path.write_text(json.dumps(exvcr(name)))
    assert replayed(cli, path) == replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")


def test_an_exvcr_binary_body_that_is_no_erlang_binary_is_refused(
    cli: Invoke, tmp_path: Path
) -> None:
    document = exvcr("anthropic")
    document[1]["response"]["body"] = base64.b64encode(b"\x83h\x02a\x01a\x02").decode()
    path = tmp_path / "tool_loop.json"
    path.write_text(json.dumps(document))
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    assert "interaction 1: response binary body is not an Erlang binary term" in result.stderr
