"""LangChain's cassettes as its test suites really write them: every header, and sometimes the
URI, overwritten with ``**REDACTED**``.

Its recorders run ``before_record_request``/``before_record_response`` hooks that write
``**REDACTED**`` over the value of every header (so ``Content-Type`` says nothing), and in some
suites over the request URI too; its first ``.yaml.gz`` serializer wrote the gzip data as
base64 text. Each test replays the shipped refund recordings laid out that way and expects
what the recording itself replays to: the same state, the same calls, no divergence.
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

from toolloop_cli.transcripts.detect import answered_api

BLANK = "**REDACTED**"
TRANSCRIPTS = ROOT / "transcripts"
STREAMED = ["openai-stream", "anthropic-stream", "gemini-stream", "gemini-generate-stream"]
PLAIN = ["openai", "anthropic", "gemini", "gemini-generate"]


def blanked(name: str, *, uri: bool = False, encoding: bool = False) -> dict[str, Any]:
    """``transcripts/refund-NAME.yaml`` in LangChain's layout, every header value blanked (and
    the URIs with ``uri``; with ``encoding``, each answer kept gzip-compressed under a blanked
    ``Content-Encoding``)."""
    recorded = yaml.safe_load((TRANSCRIPTS / f"refund-{name}.yaml").read_text())["interactions"]
    requests, responses = [], []
    for i in recorded:
        request, response = i["request"], i["response"]
        requests.append(
            {
                "method": request["method"],
                "uri": BLANK if uri else request["uri"],
                "body": (request["body"] or "").encode(),
                "headers": {k: [BLANK] for k in request.get("headers") or {"content-type": []}},
            }
        )
        headers = dict.fromkeys(response.get("headers") or {"content-type": []}, BLANK)
        body = response["body"]["string"].encode()
        if encoding:
            headers["Content-Encoding"] = BLANK
            body = gzip.compress(body)
        responses.append(
            {"status": response["status"], "headers": headers, "body": {"string": body}}
        )
    return {"requests": requests, "responses": responses}


def write(tmp_path: Path, document: dict[str, Any], *, wrapped: bool = False) -> Path:
    path = tmp_path / "test_agent_loop.yaml.gz"
    data = gzip.compress(yaml.safe_dump(document).encode())
    path.write_bytes(base64.b64encode(data) if wrapped else data)
    return path


def replayed(cli: Invoke, path: Path) -> tuple[Any, ...]:
    """The exit code, end state, divergences, turn count and calls of ``toolloop replay``."""
    result = cli("replay", str(path), "--registry", str(REGISTRY), "--json")
    out = json_out(result)
    calls = [(c["name"], c["state"], c["arguments"]) for c in out["calls"]]
    return result.exit_code, out["state"], out["divergences"], len(out["turns"]), calls


@pytest.fixture
def as_recorded(cli: Invoke) -> Any:
    """What the shipped recording itself replays to."""

    def of(name: str) -> tuple[Any, ...]:
        expected = replayed(cli, TRANSCRIPTS / f"refund-{name}.yaml")
        assert expected[2] == [] and expected[4], expected
        return expected

    return of


@pytest.mark.parametrize("name", STREAMED + PLAIN)
def test_answers_whose_content_type_was_blanked_are_read_by_their_bytes(
    cli: Invoke, tmp_path: Path, as_recorded: Any, name: str
) -> None:
    """A blanked ``Content-Type`` is no media type: an event stream is known by its framing,
    as if no header had been kept (it was read as JSON before, and failed)."""
    assert replayed(cli, write(tmp_path, blanked(name))) == as_recorded(name)


@pytest.mark.parametrize("name", ["openai", "openai-stream", "anthropic", "anthropic-stream"])
def test_a_blanked_uri_is_known_by_the_answer_it_got(
    cli: Invoke, tmp_path: Path, as_recorded: Any, name: str
) -> None:
    """``uri: '**REDACTED**'`` names no endpoint: an OpenAI Responses or Anthropic Messages
    answer (JSON or streamed) still says which API the POST went to."""
    assert replayed(cli, write(tmp_path, blanked(name, uri=True))) == as_recorded(name)


def test_a_blanked_gemini_uri_is_refused_naming_what_can_be_told(
    cli: Invoke, tmp_path: Path
) -> None:
    """Gemini names its model only in the path: with the URI blanked nothing says which model
    or API answered, so the cassette is refused in one line, exit 2."""
    path = write(tmp_path, blanked("gemini", uri=True))
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "POST **REDACTED** ×4" in lines[0]
    assert "known only by an OpenAI Responses or Anthropic Messages answer" in lines[0]


@pytest.mark.parametrize("name", ["openai", "anthropic-stream"])
def test_gzip_answers_under_a_blanked_content_encoding_are_inflated(
    cli: Invoke, tmp_path: Path, as_recorded: Any, name: str
) -> None:
    """The header names no coding, the bytes are gzip's: inflated (they were refused as
    'content-encoding **redacted** and is not text')."""
    document = blanked(name, encoding=True)
    assert document["responses"][0]["body"]["string"][:2] == b"\x1f\x8b"
    assert replayed(cli, write(tmp_path, document)) == as_recorded(name)


def test_a_cassette_written_as_base64_wrapped_gzip_replays(
    cli: Invoke, tmp_path: Path, as_recorded: Any
) -> None:
    """LangChain's first ``.yaml.gz`` serializer wrote base64 text of the gzip data."""
    path = write(tmp_path, blanked("openai-stream"), wrapped=True)
    assert path.read_bytes().startswith(b"H4sI")
    assert replayed(cli, path) == as_recorded("openai-stream")


def test_base64_wrapped_gzip_that_is_not_base64_is_refused_in_one_line(
    cli: Invoke, tmp_path: Path
) -> None:
    path = tmp_path / "broken.yaml.gz"
    path.write_bytes(b"H4sI%%%not base64")
    result = cli("replay", str(path), "--registry", str(REGISTRY))
    assert result.exit_code == 2, result.output
    assert "base64-wrapped gzip is not base64" in result.stderr
    assert "Traceback" not in result.output


RESPONSES_ANSWER = b'{"id": "resp_1", "object": "response", "output": [{"type": "message"}]}'
MESSAGES_ANSWER = b'{"id": "msg_1", "type": "message", "role": "assistant", "content": []}'


@pytest.mark.parametrize(
    ("method", "uri", "request_body", "answer", "api"),
    [
        ("POST", BLANK, b'{"input": "hi"}', RESPONSES_ANSWER, ("openai", "responses")),
        ("POST", BLANK, b'{"input": "hi"}', b"event: response.created\ndata: {}", None),
        (
            "POST",
            BLANK,
            b'{"input": "hi"}',
            b'event: response.created\ndata: {"type": "response.created"}',
            ("openai", "responses"),
        ),
        ("POST", BLANK, b'{"messages": []}', MESSAGES_ANSWER, ("anthropic", "messages")),
        (
            "POST",
            BLANK,
            b'{"messages": []}',
            b'event: message_start\ndata: {"type": "message_start"}',
            ("anthropic", "messages"),
        ),
        # the answer's mark and the request's field must agree
        ("POST", BLANK, b'{"messages": []}', RESPONSES_ANSWER, None),
        ("POST", BLANK, b'{"input": "hi", "messages": []}', RESPONSES_ANSWER, None),
        # a Chat Completions answer stays unknown, as behind a real URI
        ("POST", BLANK, b'{"messages": []}', b'{"object": "chat.completion"}', None),
        # only a URI with no path at all is told by its answer; a poll (GET) never is
        ("POST", "https://api.example.com/v1/chat", b'{"input": "hi"}', RESPONSES_ANSWER, None),
        ("GET", BLANK, None, RESPONSES_ANSWER, None),
        ("POST", BLANK, b"not json", RESPONSES_ANSWER, None),
        ("POST", BLANK, b'["input"]', RESPONSES_ANSWER, None),
    ],
)
def test_which_api_a_blanked_uri_went_to(
    method: str, uri: str, request_body: bytes | None, answer: bytes, api: Any
) -> None:
    assert answered_api(method, uri, request_body, answer) == api
