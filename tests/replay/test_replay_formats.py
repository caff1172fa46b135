"""Cassettes from other tools replay: vcrpy's own, parsed bodies, gzip, SSE, mixed, several."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import vcr
import yaml
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

from toolloop_cli.service import approvals, operations
from toolloop_cli.store import open_store

HAPPY = ROOT / "transcripts" / "branches" / "openai" / "happy_path.yaml"
UNKNOWN_TOOL = ROOT / "transcripts" / "branches" / "openai" / "unknown_tool.yaml"


def document(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    loaded.pop("toolloop", None)  # as another tool would have written it
    return loaded


def write(tmp_path: Path, doc: dict[str, Any], name: str = "cassette.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return path


def replay_clean(cli: Invoke, path: Path, *extra: str) -> dict[str, Any]:
    result = cli("replay", str(path), "--json", *extra)
    out = json_out(result)
    assert out["divergences"] == [], out["divergences"]
    assert result.exit_code == 0, result.output
    assert out["state"] == "COMPLETED"
    return out


class _Refunds(BaseHTTPRequestHandler):
    """A stand-in for the provider: answers each POST with the next recorded response."""

    answers: list[bytes] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = self.answers.pop(0)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def refund_server() -> Iterator[str]:
    recorded = document(REFUND_OPENAI)["interactions"]
    _Refunds.answers = [i["response"]["body"]["string"].encode() for i in recorded]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refunds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_cassette_vcrpy_recorded_replays(
    cli: Invoke, tmp_path: Path, refund_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", refund_server)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    cassette = tmp_path / "vcr.yaml"
    store = open_store(tmp_path / "live" / "store.db")
    options = operations.RunOptions(
        task=TASK, registry=REGISTRY, provider="openai", model="gpt-4.1-2025-04-14"
    )
    with vcr.use_cassette(str(cassette), record_mode="all", filter_headers=["authorization"]):
        first = operations.start(store, options)
        (apr,) = store.approvals(first.operation.operation_id)
        approvals.approve(store, apr.approval_id, "ops-lead")
        done = operations.resume(store, first.operation.operation_id)
    assert done.target.value == "COMPLETED"
    written = yaml.safe_load(cassette.read_text())
    assert len(written["interactions"]) == 4 and "toolloop" not in written
    replay_clean(cli, cassette)
    replay_clean(cli, cassette, "--registry", str(REGISTRY), "--approve-as", "ops-lead")


def test_json_bodies_stored_parsed_replay(cli: Invoke, tmp_path: Path) -> None:
    doc = document(HAPPY)
    for interaction in doc["interactions"]:
        request, response = interaction["request"], interaction["response"]
        request["body"] = json.loads(request["body"])
        response["parsed_body"] = json.loads(response.pop("body")["string"])
    replay_clean(cli, write(tmp_path, doc))


def test_gzip_encoded_bodies_are_decoded_on_load(cli: Invoke, tmp_path: Path) -> None:
    doc = document(HAPPY)
    for interaction in doc["interactions"]:
        response = interaction["response"]
        response["body"]["string"] = gzip.compress(response["body"]["string"].encode())
        response["headers"]["content-encoding"] = ["gzip"]
    path = write(tmp_path, doc)
    assert "!!binary" in path.read_text()
    replay_clean(cli, path)


def _event_stream(response: dict[str, Any]) -> str:
    started = {**response, "status": "in_progress", "output": []}
    events = [("response.created", started), ("response.completed", response)]
    return "".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'response': body})}\n\n"
        for kind, body in events
    )


def test_streamed_sse_bodies_replay(cli: Invoke, tmp_path: Path) -> None:
    doc = document(HAPPY)
    for interaction in doc["interactions"]:
        request, response = interaction["request"], interaction["response"]
        request["body"] = json.dumps({**json.loads(request["body"]), "stream": True})
        body = json.loads(response["body"]["string"])
        response["body"]["string"] = _event_stream(body)
        response["headers"]["content-type"] = ["text/event-stream; charset=utf-8"]
    out = replay_clean(cli, write(tmp_path, doc), "--strict-requests")
    assert len(out["turns"]) == 4


def test_interactions_with_other_endpoints_are_skipped_and_listed(
    cli: Invoke, tmp_path: Path
) -> None:
    doc = document(HAPPY)
    models = {
        "request": {"method": "GET", "uri": "https://api.openai.com/v1/models", "body": None},
        "response": {"status": {"code": 200, "message": "OK"}, "body": {"string": "{}"}},
    }
    telemetry = {
        "request": {"method": "POST", "uri": "https://telemetry.example/v1/t", "body": "x"},
        "response": {"status": {"code": 204, "message": "No Content"}, "body": {"string": ""}},
    }
    doc["interactions"].insert(0, models)
    doc["interactions"].insert(3, telemetry)
    out = replay_clean(cli, write(tmp_path, doc))
    assert [(s["index"], s["uri"]) for s in out["skipped"]] == [
        (0, "https://api.openai.com/v1/models"),
        (3, "https://telemetry.example/v1/t"),
    ]


def test_a_model_endpoint_request_that_is_not_a_post_is_skipped_not_answered(
    cli: Invoke, tmp_path: Path
) -> None:
    """A ``DELETE`` (or a ``GET`` that is no poll) of a model endpoint is no model request,
    whatever its body: it is listed under ``skipped``, and its answer serves no turn."""
    doc = document(HAPPY)
    second = doc["interactions"][1]
    stray = json.loads(json.dumps(second))
    stray["request"]["method"] = "DELETE"
    doc["interactions"].insert(1, stray)
    out = replay_clean(cli, write(tmp_path, doc))
    assert [(s["index"], s["method"], s["reason"]) for s in out["skipped"]] == [
        (1, "DELETE", "a DELETE request, not a model request (a POST)")
    ]
    assert len(out["turns"]) == 4


@pytest.mark.parametrize(
    ("body", "found"),
    [("[1, 2]", "a JSON array"), ("null", "a JSON null"), (None, "no body")],
)
def test_a_model_request_without_a_json_object_body_refuses_the_cassette(
    cli: Invoke, tmp_path: Path, body: str | None, found: str
) -> None:
    """Skipping it would replay another conversation than the one recorded (its answer
    would serve the next request), so the cassette is refused, naming the interaction."""
    doc = document(HAPPY)
    doc["interactions"][1]["request"]["body"] = body
    result = cli("replay", str(write(tmp_path, doc)), "--json")
    assert result.exit_code == 2
    assert json_out(result)["error"].endswith(
        f"interaction 1: the model request to https://api.openai.com/v1/responses holds"
        f" {found}, not a JSON object"
    )


def test_several_conversations_replay_as_one_operation_each(cli: Invoke, tmp_path: Path) -> None:
    doc = document(HAPPY)
    doc["interactions"] += document(UNKNOWN_TOOL)["interactions"]
    out = json_out(cli("replay", str(write(tmp_path, doc)), "--json"))
    operations_seen = out["operations"]
    assert [op["interactions"] for op in operations_seen] == [[0, 1, 2, 3], [4, 5, 6, 7, 8]]
    assert [op["state"] for op in operations_seen] == ["COMPLETED", "COMPLETED"]
    assert out["divergences"] == []
    ids = {op["operation_id"] for op in operations_seen}
    assert len(ids) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interactions: [unclosed\n", "not valid YAML"),
        ("interactions: []\nversion: 1\n", "no interaction with a known provider API URI"),
        (
            "interactions:\n- request: {method: GET, uri: 'https://example.com/v1/files'}\n"
            "  response: {status: {code: 200, message: OK}, body: {string: ''}}\n",
            "no interaction with a known provider API URI",
        ),
    ],
    ids=["not-yaml", "no-interactions", "only-unknown-endpoints"],
)
def test_an_unusable_cassette_is_one_clear_line_and_exit_2(
    cli: Invoke, tmp_path: Path, store_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = cli("replay", str(path))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert message in lines[0] and str(path) in lines[0]
    assert not store_path.exists()  # nothing written: not even a new, empty store
