"""Values that would overflow a timestamp or cannot be sent to are refused before anything runs.

A deadline or an approval lifetime is added to the current time; past year 9999 that sum
raised ``OverflowError`` (a traceback, or an operation stuck after its first tools ran). A
provider base URL that is not an http(s) URL with a host raised ``ValueError`` from the URL
parser, or made an operation that could only fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.engine.clock import MAX_SPAN_S, later, parse_iso
from toolloop_cli.engine.records import Guards

runner = CliRunner()


@pytest.mark.parametrize("deadline", ["1e12", "1e308", "inf", "nan", str(MAX_SPAN_S + 1)])
def test_a_deadline_past_ten_years_is_a_usage_error_and_starts_nothing(
    tmp_path: Path, deadline: str
) -> None:
    store = tmp_path / "store.db"
    args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    result = runner.invoke(app, [*args, "--deadline-s", deadline, "--store", str(store), "--json"])
    assert result.exit_code == 2, result.output
    assert json_out(result)["error_type"] == "UsageError"
    assert "Traceback" not in result.output


def test_the_longest_span_allowed_still_makes_a_timestamp() -> None:
    Guards(deadline_s=MAX_SPAN_S)
    assert later(parse_iso("9989-01-01T00:00:00.000000Z"), MAX_SPAN_S).year == 9998


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1", "is not a valid URL"),
        ("https://api.example:99999", "is not a valid URL"),
        ("notaurl", "must be an http:// or https:// URL with a host"),
        ("ftp://files.example/v1", "must be an http:// or https:// URL with a host"),
        ("https:///v1", "must be an http:// or https:// URL with a host"),
    ],
)
def test_a_malformed_base_url_is_a_usage_error_that_does_not_echo_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, says: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-1234567890")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    args = ["run", TASK, "--registry", str(REGISTRY), "--provider", "openai", "--model", "m"]
    result = runner.invoke(app, [*args, "--store", str(tmp_path / "store.db"), "--json"])
    assert result.exit_code == 2, result.output
    error = json_out(result)
    assert error["error_type"] == "UsageError" and says in error["error"]
    assert error["error"].startswith("OPENAI_BASE_URL ") and url not in error["error"]
