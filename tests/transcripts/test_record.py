"""``run --record``: a vcrpy cassette of every exchange, secrets scrubbed, crash-safe, resumable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import vcr
import yaml
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

from toolloop_cli.audit.canonical import canonical_bytes
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.transcripts import SCRUBBED, load_cassette
from toolloop_cli.transcripts.record import METADATA_KEY, RecordingTransport

HAPPY = ROOT / "transcripts" / "branches" / "openai" / "happy_path.yaml"


def run_recorded(cli: Invoke, record: Path, *extra: str) -> dict[str, Any]:
    result = cli(
        "run",
        TASK,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(REFUND_OPENAI),
        "--record",
        str(record),
        "--json",
        *extra,
    )
    assert result.exit_code == 10, result.output
    return json_out(result)


def test_record_writes_the_requests_toolloop_sent_and_its_metadata(
    cli: Invoke, tmp_path: Path
) -> None:
    record = tmp_path / "rec.yaml"
    view = run_recorded(cli, record)
    cassette = load_cassette(record)
    original = load_cassette(REFUND_OPENAI)
    assert len(cassette.interactions) == 3  # paused for approval after the third answer
    for mine, theirs in zip(cassette.interactions, original.interactions, strict=False):
        assert mine.request.json() == theirs.request.json()
        assert mine.response.body == theirs.response.body
        assert mine.request.uri == "https://api.openai.com/v1/responses"
    meta = cassette.metadata[METADATA_KEY]
    assert meta["operation_id"] == view["operation_id"]
    assert meta["state"] == "WAITING_APPROVAL"
    assert meta["tools"]["submit_refund"]["needs_approval"] is True
    assert [a["status"] for a in meta["approvals"]] == ["PENDING"]


def test_resume_appends_to_the_recording_and_it_replays_without_divergence(
    cli: Invoke, tmp_path: Path
) -> None:
    record = tmp_path / "rec.yaml"
    view = run_recorded(cli, record)
    (apr,) = [a["approval_id"] for a in view["approvals"]]
    done = cli("approve", apr, "--as", "ops-lead", "--resume", "--json")
    assert done.exit_code == 0, done.output
    cassette = load_cassette(record)
    assert len(cassette.interactions) == 4
    meta = cassette.metadata[METADATA_KEY]
    assert meta["state"] == "COMPLETED"
    assert meta["approvals"][0]["status"] == "APPROVED"
    assert meta["approvals"][0]["decided_by"] == "ops-lead"
    live = ("--registry", str(REGISTRY), "--approve-as", "ops-lead")  # an explicit decision
    replayed = cli("replay", str(record), *live, "--json")
    assert replayed.exit_code == 0, replayed.output
    out = json_out(replayed)
    assert (out["state"], out["divergences"]) == ("COMPLETED", [])
    assert [a["decided_by"] for a in out["approvals"]] == ["ops-lead"]


def test_a_killed_run_leaves_a_valid_cassette_that_resume_completes(
    tmp_path: Path, store_path: Path
) -> None:
    record = tmp_path / "rec.yaml"
    env = {**os.environ, "TOOLLOOP_FAILPOINT": "before_model_request:3"}
    args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    killed = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", *args, "--record", str(record)]
        + ["--store", str(store_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode < 0  # SIGKILL, mid-run
    assert len(load_cassette(record).interactions) == 2
    env.pop("TOOLLOOP_FAILPOINT")
    listed = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "runs", "--json", "--store", str(store_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    op_id = yaml.safe_load(listed.stdout)["operations"][0]["operation_id"]
    resumed = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "resume", op_id, "--store", str(store_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 10, resumed.stderr
    cassette = load_cassette(record)
    assert len(cassette.interactions) == 3
    assert cassette.metadata[METADATA_KEY]["state"] == "WAITING_APPROVAL"


class _Answer:
    name = "fake"

    def send(self, request: HttpRequest) -> HttpResponse:
        headers = {"content-type": "application/json", "set-cookie": "session=s3cr3t-cookie"}
        return HttpResponse(status=200, headers=headers, body=b'{"id":"resp_1"}')


def test_secret_headers_never_reach_the_cassette(tmp_path: Path) -> None:
    path = tmp_path / "rec.yaml"
    recorder = RecordingTransport(_Answer(), path)
    request = HttpRequest(
        url="https://api.openai.com/v1/responses",
        headers={
            "authorization": "Bearer sk-s3cr3t",
            "api-key": "s3cr3t-azure",
            "cookie": "session=s3cr3t-cookie",
            "content-type": "application/json",
        },
        body={"model": "m", "input": "hi"},
    )
    response = recorder.send(request)
    assert response.body == b'{"id":"resp_1"}'
    text = path.read_text()
    assert "s3cr3t" not in text
    (interaction,) = load_cassette(path).interactions
    assert interaction.request.headers["authorization"] == [SCRUBBED]
    assert interaction.request.headers["api-key"] == [SCRUBBED]
    assert interaction.request.headers["cookie"] == [SCRUBBED]
    assert interaction.response.headers["set-cookie"] == [SCRUBBED]
    assert interaction.request.body == canonical_bytes(request.body)


def test_vcrpy_plays_back_a_toolloop_recording(tmp_path: Path) -> None:
    first = load_cassette(HAPPY).interactions[0]
    with vcr.use_cassette(str(HAPPY), record_mode="none", match_on=["method", "uri"]):
        response = httpx.post(
            "https://api.openai.com/v1/responses", content=first.request.body or b""
        )
    assert response.status_code == 200
    assert response.content == first.response.body


def test_record_refuses_to_overwrite_the_transcript_it_replays(cli: Invoke) -> None:
    args = ["--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    result = cli("run", TASK, *args, "--record", str(REFUND_OPENAI))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "would overwrite the --transcript" in lines[0]
