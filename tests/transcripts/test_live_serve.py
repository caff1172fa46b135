"""Live mode over real HTTP against ``toolloop serve``: every provider, streamed or not, faults."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.cli import Invoke, json_out
from support.paths import FIXTURES, REGISTRY, ROOT, TASK
from support.providers import KEYS, PROVIDERS, adapter_for, answers, requests, transcript
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.store import open_store
from toolloop_cli.transcripts import server
from toolloop_cli.transcripts.server import Fault, parse_fault

Served = tuple[server.ServerHandle, dict[str, str]]


@contextmanager
def serving(
    option: str, cassette: Path, *faults: str, retry_after: float = 1.0
) -> Iterator[Served]:
    """The fake provider on a free port, and the environment a live run needs to reach it."""
    provider = PROVIDERS[option][0]
    handle = server.start(
        cassette, faults=[parse_fault(f) for f in faults], retry_after=retry_after
    )
    try:
        variable = server.BASE_URL_ENV[provider][0]
        yield handle, {variable: handle.base_url(provider), KEYS[provider]: "test-key"}
    finally:
        handle.close()


def run_live(cli: Invoke, option: str, env: dict[str, str], *extra: str) -> Any:
    model = PROVIDERS[option][3]
    return cli(
        "run", TASK, "--registry", str(REGISTRY), "--provider", option, "--model", model, *extra,
        env=env,
    )  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("option", list(PROVIDERS))
def test_the_refund_completes_live_against_the_fake_provider(
    cli: Invoke, store_path: Path, option: str, stream: bool
) -> None:
    cassette = transcript(option, stream)
    with serving(option, cassette) as (served, env):
        paused = run_live(cli, option, env, "--json", *(["--stream"] if stream else []))
        assert paused.exit_code == 10, paused.output
        (apr,) = [a["approval_id"] for a in json_out(paused)["approvals"]]
        done = cli("approve", apr, "--as", "ops-lead", "--resume", "--json", env=env)
        received = [entry["body"] for entry in served.provider.received]
    view = json_out(done)
    assert (done.exit_code, view["state"]) == (0, "COMPLETED")
    assert [c["state"] for c in view["calls"]] == ["SUCCEEDED"] * 3
    assert len(ledger_refunds(store_path.parent / "payments.db")) == 1
    assert received == requests(cassette)  # byte-for-byte what the recording holds
    op = open_store(store_path).get_operation(view["operation_id"])
    provider, family, _, _ = PROVIDERS[option]
    assert (op.provider, op.api_family, op.transport) == (provider, family, "live")
    assert op.adapter_revision == adapter_for(option).revision


def test_a_streamed_run_shows_the_call_being_prepared_never_as_run(cli: Invoke) -> None:
    with serving("anthropic", transcript("anthropic", True)) as (_, env):
        result = run_live(cli, "anthropic", env, "--stream")
    assert result.exit_code == 10
    assert "model is preparing call toolu_" in result.stderr


def test_a_429_with_retry_after_is_retried_then_succeeds(cli: Invoke) -> None:
    with serving("anthropic", transcript("anthropic"), "429:1") as (served, env):
        result = run_live(cli, "anthropic", env, "--json", "--max-retries", "2")
        labels = [entry["answer"] for entry in served.provider.received]
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (10, "WAITING_APPROVAL")
    failed = view["turns"][0]
    assert failed["outcome"] == "API_FAILURE"
    assert (failed["error"]["status"], failed["error"]["retryable"]) == (429, True)
    assert failed["error"]["retry_after_s"] == 1.0
    assert labels[:2] == ["fault:429", "cassette:0"]


def test_a_persistent_529_fails_after_max_retries_with_every_attempt_shown(cli: Invoke) -> None:
    with serving("anthropic", transcript("anthropic"), "529:9") as (served, env):
        result = run_live(cli, "anthropic", env, "--json", "--max-retries", "2")
        attempts = len(served.provider.received)
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (13, "FAILED")
    assert "retries exhausted (2)" in view["reason"]
    shown = json_out(cli("show", view["operation_id"], "--json"))
    assert [(t["outcome"], t["error"]["status"]) for t in shown["turns"]] == [
        ("API_FAILURE", 529)
    ] * 3
    assert attempts == 3 and shown["calls"] == []


@pytest.mark.parametrize("option", ["openai", "anthropic", "gemini", "gemini-generate"])
def test_a_400_fails_at_once(cli: Invoke, option: str) -> None:
    with serving(option, transcript(option), "400:1") as (served, env):
        result = run_live(cli, option, env, "--json", "--max-retries", "3")
        attempts = len(served.provider.received)
    view = json_out(result)
    assert (result.exit_code, view["state"], attempts) == (13, "FAILED", 1)
    assert view["turns"][0]["error"]["retryable"] is False


@pytest.mark.parametrize(
    ("option", "events"),
    [("openai", 4), ("anthropic", 4), ("gemini", 7), ("gemini-generate", 1)],
)
def test_a_stream_cut_mid_call_by_the_server_ends_incomplete_and_runs_nothing(
    cli: Invoke, store_path: Path, option: str, events: int
) -> None:
    with serving(option, transcript(option, True), f"cut:{events}") as (_, env):
        result = run_live(cli, option, env, "--json", "--stream")
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (12, "INCOMPLETE")
    assert view["calls"] == [] and view["counters"]["tool_calls"] == 0
    assert "never executed" in view["reason"]


def test_the_anthropic_follow_up_answers_each_tool_use_before_any_text(cli: Invoke) -> None:
    cassette = FIXTURES / "anthropic" / "parallel_tool_use.yaml"
    with serving("anthropic", cassette) as (served, env):
        result = run_live(cli, "anthropic", env, "--json")
        first, follow_up = (entry["body"] for entry in served.provider.received)
    assert result.exit_code == 0
    content = json.loads(answers(cassette)[0].body)["content"]
    proposed = [b["id"] for b in content if b["type"] == "tool_use"]
    assert len(proposed) == 2
    last = follow_up["messages"][-1]
    assert last["role"] == "user"
    assert [b["type"] for b in last["content"]] == ["tool_result"] * len(proposed)
    assert [b["tool_use_id"] for b in last["content"]] == proposed
    assert follow_up["messages"][:-2] == first["messages"]


def test_a_missing_key_is_exit_2_naming_the_variable(cli: Invoke) -> None:
    result = run_live(cli, "gemini-generate", {"GEMINI_API_KEY": ""})
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "GEMINI_API_KEY" in lines[0]


def test_fault_specs_parse_or_are_refused_in_one_line() -> None:
    assert parse_fault("429") == Fault("429", 1)
    assert parse_fault("529:3") == Fault("529", 3)
    assert parse_fault("cut:0") == Fault("cut", 0)
    for bad in ("418", "cut", "429:x", "500:0", "boom"):
        with pytest.raises(Exception, match="bad fault"):
            parse_fault(bad)


def test_serve_refuses_a_bad_fault_with_exit_2() -> None:
    args = ["serve", str(transcript("openai")), "--fault", "teapot", "--port", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "bad fault 'teapot'" in result.stderr


def test_the_request_log_records_every_request_without_credentials(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    handle = server.start(transcript("openai"), log=log)
    try:
        url = handle.base_url("openai") + "/responses"
        reply = httpx.post(url, json={"model": "m"}, headers={"authorization": "Bearer sk-secret"})
    finally:
        handle.close()
    assert reply.status_code == 200
    text = log.read_text()
    assert '"model": "m"' in text and "sk-secret" not in text


@pytest.mark.parametrize("script", ["make_transcripts", "make_fixtures"])
def test_the_committed_transcripts_and_fixtures_are_what_the_scripts_generate(script: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"scripts.{script}", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
