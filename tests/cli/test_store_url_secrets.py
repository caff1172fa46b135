"""A PostgreSQL store URL's secrets are never echoed: the password in its user part and the
``?password=`` and ``?sslpassword=`` query parameters are shown as ``***`` in errors, in
what ``run``, ``show``, ``runs`` and ``store copy`` print (hint lines included) and in their
JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from support.postgres import Server, with_params
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store.postgres import redacted

SECRETS = ("s3cretpw", "k3ypass")
RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))


def _toolloop(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def _shows_no_secret(result: Any) -> None:
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://u@db.example/s?password=s3cretpw&sslmode=require",
            "postgresql://u@db.example/s?password=***&sslmode=require",
        ),
        (
            "postgres://u@h:5433/s?sslmode=verify-full&sslpassword=k3ypass&application_name=a",
            "postgres://u@h:5433/s?sslmode=verify-full&sslpassword=***&application_name=a",
        ),
        (
            "postgresql://u:s3cretpw@[::1]:5432/s?p%61ssword=k3ypass",
            "postgresql://u:***@[::1]:5432/s?p%61ssword=***",
        ),
        ("postgresql:///s?host=/run/pg&user=u", "postgresql:///s?host=/run/pg&user=u"),
    ],
)
def test_each_secret_of_a_url_is_redacted_and_nothing_else(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_a_url_that_cannot_be_connected_to_shows_no_query_password() -> None:
    url = "postgresql://u@127.0.0.1:1/s?password=s3cretpw&sslpassword=k3ypass&sslmode=disable"
    for args in (("runs",), ("runs", "--json"), ("verify",)):
        result = _toolloop(*args, "--store", url)
        assert result.exit_code == 2, result.output
        _shows_no_secret(result)
        assert "password=***" in result.stderr and "sslpassword=***" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_what_the_commands_print_about_a_store_shows_no_query_password(
    postgres_server: Server, postgres_url: str, tmp_path: Path
) -> None:
    url = with_params(postgres_url, password=SECRETS[0], sslpassword=SECRETS[1])
    started = _toolloop(*RUN, "--store", url)
    assert started.exit_code == 10, started.output  # waiting: the hints name the store
    assert "--store 'postgresql://" in started.stdout and "password=***" in started.stdout
    _shows_no_secret(started)
    as_json = _toolloop(*RUN, "--store", url, "--json")
    _shows_no_secret(as_json)
    op_id = json_out(as_json)["operation_id"]
    for args in (("show", op_id), ("show", op_id, "--json"), ("runs",), ("runs", "--json")):
        result = _toolloop(*args, "--store", url)
        assert result.exit_code in (0, 10), result.output
        _shows_no_secret(result)
    missing = _toolloop("show", "op_missing", "--store", url)
    assert missing.exit_code == 2
    _shows_no_secret(missing)
    source = tmp_path / "source.db"
    assert _toolloop(*RUN, "--store", str(source)).exit_code == 10
    target = with_params(postgres_server.fresh_database(), password=SECRETS[0])
    copied = _toolloop("store", "copy", str(source), target)
    assert copied.exit_code == 0, copied.output
    assert "→ postgresql://" in copied.stdout and "password=***" in copied.stdout
    _shows_no_secret(copied)
