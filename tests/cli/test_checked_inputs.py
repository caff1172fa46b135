"""Values that cannot mean anything are bad input (exit 2), found before they do harm:
a head that is not one, a per-tool limit on a tool the registry lacks, a log that cannot be
written."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.errors import UsageError
from toolloop_cli.transcripts import server

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "head",
    ["garbage", "", "sha256:", "sha256:" + "a" * 63, "x:" + DIGEST, " " + DIGEST, DIGEST + "\n"],
)
def test_a_malformed_expected_head_is_bad_input(cli: Invoke, head: str) -> None:
    assert cli(*RUN).exit_code == 10
    result = cli("verify", "--expect-head", head, "--json")
    assert result.exit_code == 2
    assert "is not a head" in json_out(result)["error"]


@pytest.mark.parametrize(
    "head", [DIGEST, "7:" + DIGEST, "7:" + DIGEST.upper().replace("SHA", "sha")]
)
def test_a_well_formed_head_the_chain_never_reached_is_still_a_mismatch(
    cli: Invoke, head: str
) -> None:
    assert cli(*RUN).exit_code == 10
    result = cli("verify", "--expect-head", head, "--json")
    assert result.exit_code == 20
    assert json_out(result)["expected_head"] == head.lower()  # as verify --head writes it


def test_a_per_tool_limit_on_an_unknown_tool_is_refused(cli: Invoke) -> None:
    result = cli(*RUN, "--max-calls-per-tool", "nosuch=3", "--json")
    assert result.exit_code == 2
    error = json_out(result)["error"]
    assert "nosuch" in error and "not a tool of registry refunds" in error


def test_a_per_tool_limit_on_a_known_tool_is_kept(cli: Invoke) -> None:
    result = cli(*RUN, "--max-calls-per-tool", "get_order=3", "--json")
    assert result.exit_code == 10
    assert cli("show", json_out(result)["operation_id"], "--json").exit_code == 0


@pytest.mark.parametrize(
    ("where", "needle"),
    [("folder", "is a directory"), ("missing/serve.log", "no folder")],
)
def test_serving_refuses_a_log_it_could_never_write(
    tmp_path: Path, where: str, needle: str
) -> None:
    (tmp_path / "folder").mkdir()
    with pytest.raises(UsageError, match=needle):
        server.start(REFUND_OPENAI, log=tmp_path / where)


def _post(url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(f"{url}/v1/responses", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_a_log_write_that_fails_while_serving_is_a_500_and_one_line(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    told: list[str] = []
    with server.start(REFUND_OPENAI, log=log, on_log_error=told.append) as handle:
        log.unlink()
        log.mkdir()  # the log can no longer be appended to
        status, body = _post(handle.url)
        assert status == 500
        assert "cannot write the log" in json.loads(body)["error"]["message"]
        assert len(told) == 1 and "cannot write the log" in told[0]
        log.rmdir()
        status, _ = _post(handle.url)
        assert status == 200
    answers = [entry["answer"] for entry in handle.provider.received]
    assert answers == ["error:500:log", "cassette:0"]  # the answer waited for the next request
    assert [json.loads(line)["answer"] for line in log.read_text().splitlines()] == ["cassette:0"]
