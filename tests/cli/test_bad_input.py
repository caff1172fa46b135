"""Bad input gets exit 2 and one clear, specific line: never a traceback, never a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store

BROKEN_REGISTRIES = {
    "yaml_syntax": ("registry: x\ntools: [unclosed\n", ""),
    "missing_handler": (
        REGISTRY.read_text().replace(
            "toolloop_cli.examples.refunds:get_order", "toolloop_cli.examples.nowhere:get_order"
        ),
        "tools.get_order.handler",
    ),
    "unknown_risk": (
        REGISTRY.read_text().replace("risk: read", "risk: harmless", 1),
        "tools.get_order.risk",
    ),
    "invalid_schema": (
        REGISTRY.read_text().replace("type: object", "type: objekt", 1),
        "tools.get_order.parameters",
    ),
}


def _duplicate_tool(text: str) -> str:
    start = text.index("  get_order:")
    end = text.index("  create_refund_draft:")
    return text[:end] + text[start:end] + text[end:]


@pytest.mark.parametrize("case", sorted(BROKEN_REGISTRIES))
def test_registry_check_and_run_name_the_yaml_path(cli: Invoke, tmp_path: Path, case: str) -> None:
    text, yaml_path = BROKEN_REGISTRIES[case]
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    check = cli("registry", "check", str(path))
    assert check.exit_code == 2
    assert yaml_path in check.stderr
    assert "Traceback" not in check.output
    run = cli("run", TASK, "--registry", str(path), "--transcript", str(REFUND_OPENAI))
    assert run.exit_code == 2
    assert yaml_path in run.stderr
    assert "Traceback" not in run.output
    assert not (tmp_path / "store.db").exists()  # a refused run creates no store


@pytest.mark.parametrize(
    "args",
    [
        ["--registry", "nowhere.yaml", "--transcript", str(REFUND_OPENAI)],
        ["--registry", str(REGISTRY), "--transcript", "nowhere.yaml"],
        ["--registry", str(REGISTRY), "--provider", "openai"],  # no --model
        [
            "--registry",
            str(REGISTRY),
            "--transcript",
            str(REFUND_OPENAI),
            "--max-calls-per-tool",
            "nope=1",
        ],
        [
            "--registry",
            str(REGISTRY),
            "--transcript",
            str(REFUND_OPENAI),
            "--detach",
            "--model",
            "no-such-model",
            "--max-cost-usd",
            "1",
        ],  # no price known for the model
    ],
    ids=["missing registry", "missing cassette", "no model", "unknown tool limit", "no price"],
)
def test_a_run_refused_for_its_input_creates_no_store(
    cli: Invoke, store_path: Path, args: list[str]
) -> None:
    result = cli("run", TASK, *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not store_path.exists()


def test_duplicate_tool_names_are_reported(cli: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(_duplicate_tool(REGISTRY.read_text()))
    check = cli("registry", "check", str(path))
    assert check.exit_code == 2
    assert "tools.get_order" in check.stderr and "duplicate" in check.stderr


def test_every_problem_is_listed(cli: Invoke, tmp_path: Path) -> None:
    text = (
        REGISTRY.read_text()
        .replace("risk: read", "risk: harmless", 1)
        .replace("toolloop_cli.examples.refunds:submit_refund", "nowhere.at.all:submit")
    )
    path = tmp_path / "two.yaml"
    path.write_text(text)
    check = cli("registry", "check", str(path))
    assert check.exit_code == 2
    assert "tools.get_order.risk" in check.stderr
    assert "tools.submit_refund.handler" in check.stderr


def test_the_shipped_registry_checks_clean(cli: Invoke) -> None:
    check = cli("registry", "check", str(REGISTRY))
    assert check.exit_code == 0
    assert "ok" in check.stdout


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("interactions: [unclosed\n", "not valid YAML"),
        ("version: 1\n", "interactions"),
        ("interactions: []\n", "interaction"),
        (
            "interactions:\n- request: {method: POST, uri: 'https://example.com/v9/chat', "
            "body: '{}', headers: {}}\n  response: {status: {code: 200, message: OK}, "
            "headers: {}, body: {string: '{}'}}\n",
            "known provider",
        ),
    ],
)
def test_a_malformed_cassette_is_one_clear_line(
    cli: Invoke, tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(path))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "bad.yaml" in lines[0]
    assert needle.lower() in lines[0].lower()


def test_a_missing_cassette_file_is_exit_2(cli: Invoke, tmp_path: Path) -> None:
    result = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(tmp_path / "no"))
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_unknown_operation_is_exit_2(cli: Invoke, store_path: Path) -> None:
    open_store(store_path).close()  # an empty store: a missing one is "no store at …"
    result = cli("show", "op_doesnotexist")
    assert result.exit_code == 2
    assert "no operation op_doesnotexist" in result.stderr


def test_both_or_neither_source_is_a_usage_error(cli: Invoke) -> None:
    result = cli("run", TASK, "--registry", str(REGISTRY))
    assert result.exit_code == 2
    assert "--transcript" in result.stderr


def test_a_live_provider_without_its_key_names_the_variable(cli: Invoke) -> None:
    result = cli(
        "run",
        TASK,
        "--registry",
        str(REGISTRY),
        "--provider",
        "openai",
        "--model",
        "gpt-4.1",
        env={"OPENAI_API_KEY": ""},
    )
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in result.stderr


def test_json_errors_are_one_object(cli: Invoke, store_path: Path) -> None:
    import json

    open_store(store_path).close()
    result = cli("show", "op_nope", "--json")
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["error_type"] == "OperationNotFound"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("runs", "--limit", "99999999999999999999"), "--limit"),
        (("worker", "--drain", "--concurrency", "100000"), "--concurrency"),
        (("export-otel", "--endpoint", "http://[::1"), "is not an http:// or https:// URL"),
        (("export-otel", "--endpoint", "http://collector:99999"), "is not an http://"),
        (
            ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
            + ("--max-cost-usd", "inf"),
            "max_cost_usd: Input should be a finite number",
        ),
        (
            ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
            + ("--max-cost-usd", "1e309"),
            "max_cost_usd: Input should be a finite number",
        ),
    ],
    ids=["limit", "concurrency", "endpoint-bracket", "endpoint-port", "cost-inf", "cost-1e309"],
)
def test_a_flag_out_of_its_range_is_a_usage_error(
    cli: Invoke, store_path: Path, args: tuple[str, ...], said: str
) -> None:
    """Out of range, a value is refused before anything runs (no OverflowError from SQLite,
    no 100,000 threads, no ValueError from the URL parser, no budget of Infinity that
    ``--json`` would print as no JSON)."""
    open_store(store_path).close()
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [("verify",), ("runs",), ("store", "copy")])
def test_a_store_path_that_is_a_fifo_is_refused_not_waited_on(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """Opening a FIFO waits for a writer for ever; it is no store, and is refused at once."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "store.db"
    os.mkfifo(fifo)
    args = (
        [*command, str(fifo), str(tmp_path / "copy.db")]
        if command == ("store", "copy")
        else [
            *command,
            "--store",
            str(fifo),
        ]
    )
    done = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "it is not a regular file" in done.stdout


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cretpw@[::1/db",  # a bracket left open
        "postgresql://u:s3cretpw@h:99999/x",  # a port out of range
        "postgresql://u:s3cretpw@h:abc/x",  # a port that is no number
    ],
)
def test_a_store_url_that_does_not_parse_is_one_line_and_shows_no_password(url: str) -> None:
    """Was a ValueError traceback (exit 1) from the URL's redaction, and libpq's message quoted
    the whole URL, password and all."""
    result = CliRunner().invoke(app, ["runs", "--store", url], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "cannot open store postgresql://(a URL that does not parse)" in result.stderr
    assert "s3cretpw" not in result.output + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "--store", ""),
        ("verify", "--store", " "),
        ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
        + ("--store", ""),
        ("store", "copy", "", "copy.db"),
    ],
    ids=["runs", "verify-blank", "run", "store-copy"],
)
def test_an_empty_store_location_is_a_usage_error(args: tuple[str, ...]) -> None:
    """``--store ""`` is the working folder to ``pathlib`` (a ValueError traceback before):
    it names no store, and is refused before anything opens or runs."""
    result = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "the store location is empty" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("show", ""), "no operation '' in store"),
        (("verify", ""), "no operation '' in store"),
        (("approve", "", "--as", "ops-lead"), "no approval '' in store"),
    ],
    ids=["show", "verify", "approve"],
)
def test_an_empty_id_is_named_as_empty(
    cli: Invoke, store_path: Path, args: tuple[str, ...], said: str
) -> None:
    """An empty id reads as '' in the one line (it was "no operation  in store")."""
    open_store(store_path).close()
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr


@pytest.mark.parametrize("command", [("runs",), ("verify",), ("show", "op_x")])
def test_the_root_folder_as_the_store_is_refused_as_a_directory(
    command: tuple[str, ...],
) -> None:
    """``--store /``: a folder whose name is empty, for which the empty-file check built a
    ``-wal`` name and raised a ValueError traceback; it is a directory, refused in one line."""
    result = CliRunner().invoke(app, [*command, "--store", "/", "--json"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "cannot open store /: it is a directory" in result.stderr


RUN_ARGS = ("--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--tenant", ""), "tenant '' cannot be a name: it is empty"),
        (("--subject", "op\nerator"), "subject 'op\\nerator' cannot be a name: it holds \\n"),
        (("--subject", "ops-lead "), "subject 'ops-lead ' cannot be a name: it starts or ends"),
        (("--tenant", "acme\u202e"), "it holds \\u202e, a control or invisible character"),
        (("--tenant", "t" * 300), "it is longer than 256 characters"),
    ],
    ids=["empty", "newline", "padded", "bidi", "long"],
)
def test_a_tenant_or_subject_that_is_not_a_name_is_refused_before_anything_is_stored(
    cli: Invoke, store_path: Path, flags: tuple[str, ...], said: str
) -> None:
    """Stored as given, they showed as another name or as nothing in every listing."""
    result = cli("run", TASK, *RUN_ARGS, *flags)
    assert result.exit_code == 2, result.output
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not store_path.exists() or not json_out(cli("runs", "--json"))["operations"]


def test_an_empty_task_is_refused(cli: Invoke) -> None:
    result = cli("run", "  ", *RUN_ARGS)
    assert result.exit_code == 2
    assert "the task is empty" in result.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [("", "approver '' cannot be a name: it is empty"), ("ops-lead ", "starts or ends")],
)
def test_an_approver_that_is_not_a_name_is_refused_and_the_approval_stays_pending(
    cli: Invoke, store_path: Path, name: str, said: str
) -> None:
    """``--as ""`` read "error:  may not decide approvals" (a name that is not there)."""
    (approval,) = json_out(cli("run", TASK, *RUN_ARGS, "--json"))["approvals"]
    result = cli("approve", approval["approval_id"], "--as", name)
    assert result.exit_code == 2, result.output
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    (pending,) = json_out(cli("pending", "--json"))["pending"]
    assert pending["approval_id"] == approval["approval_id"]
