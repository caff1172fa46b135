"""A PostgreSQL store never waits without bound: connecting gives up after the connect
timeout, and a lock another process holds is waited for at most ``lock_timeout``, then the
command stops with one line (the store is busy, nothing written) and exit 2. A timeout the
user set, in the URL or in libpq's environment, is kept, 0 included."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK
from support.postgres import table_names, with_params
from support.stores import behind_its_back
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store, pg_settings
from toolloop_cli.store.postgres import WRITE_LOCK_KEY

RUN = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))


def _toolloop(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of a server that takes the connection and never says a word."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as sock:
        port = sock.getsockname()[1]
        yield f"postgresql://toolloop@127.0.0.1:{port}/store"


@pytest.mark.parametrize("set_by", ["default", "url", "environment"])
def test_a_server_that_never_answers_is_given_up_on_at_the_connect_timeout(
    silent_server: str, set_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = silent_server
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    if set_by == "default":
        monkeypatch.setattr(pg_settings, "CONNECT_TIMEOUT_S", 2)
    else:
        monkeypatch.setattr(pg_settings, "CONNECT_TIMEOUT_S", 600)  # the user's value wins
        if set_by == "url":
            url = with_params(url, connect_timeout="2")
        else:
            monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")
    began = time.monotonic()
    result = _toolloop("runs", "--store", url)
    assert time.monotonic() - began < 30
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot open store"), lines
    assert "timeout" in lines[0] and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("options", "pgoptions", "expected"),
    [
        (None, None, "1min"),
        ("-c lock_timeout=0", None, "0"),
        ("--lock_timeout=250ms", None, "250ms"),
        (None, "-c lock_timeout=5s", "5s"),
        (None, "-c lock_timeout=0", "0"),
        (None, "-c deadlock_timeout=2s", "1min"),
        ("-c deadlock_timeout=2s", "-c lock_timeout=5s", "1min"),  # the URL's options win
    ],
)
def test_every_session_waits_for_a_lock_at_most_a_minute_unless_told_otherwise(
    postgres_url: str,
    options: str | None,
    pgoptions: str | None,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = postgres_url if options is None else with_params(postgres_url, options=options)
    if pgoptions is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", pgoptions)
    store = open_store(url)
    try:
        assert store.conn.execute("SHOW lock_timeout").fetchone() == (expected,)
        if "deadlock_timeout" in (options or pgoptions or ""):  # the user's other settings kept
            assert store.conn.execute("SHOW deadlock_timeout").fetchone() == ("2s",)
    finally:
        store.close()


@pytest.mark.parametrize("set_by", ["default", "url"])
def test_a_server_gone_silent_mid_session_is_given_up_on_within_a_minute(
    postgres_url: str, set_by: str
) -> None:
    """TCP keepalives (probes after 30 s of silence, every 10 s, 3 unanswered) and a 60 s
    limit on unacknowledged data are asked of libpq on every store connection, so a
    partition ends the command instead of the operating system's two hours; a value the URL
    sets is kept."""
    url = postgres_url if set_by == "default" else with_params(postgres_url, keepalives_idle="5")
    store = open_store(url)
    try:
        params = store.conn.raw.info.get_parameters()  # type: ignore[attr-defined]
    finally:
        store.close()
    idle = "30" if set_by == "default" else "5"
    assert (params["keepalives"], params["keepalives_idle"]) == ("1", idle)
    assert (params["keepalives_interval"], params["keepalives_count"]) == ("10", "3")
    assert params["tcp_user_timeout"] == "60000"


def test_a_lock_held_past_lock_timeout_is_a_busy_store_and_nothing_is_written(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(postgres_url).close()  # the store is there; another process holds its lock
    monkeypatch.setattr(pg_settings, "LOCK_TIMEOUT", "1s")
    holder = psycopg.connect(postgres_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK_KEY,))
    let_go = threading.Timer(20, holder.close)  # a store that waits for ever still ends
    let_go.start()
    try:
        result = _toolloop(*RUN, "--store", postgres_url)
    finally:
        let_go.cancel()
        holder.close()
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: store is busy: another process holds a lock on ")
    assert lines[0].endswith("nothing was written by this change, try again")
    with behind_its_back(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM operations").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM audit_log").fetchone() == (0,)
    assert "operations" in table_names(postgres_url)


def test_the_readme_states_the_waits_the_store_uses() -> None:
    """The PostgreSQL section names the connect and lock timeouts as the code sets them, and
    its quick start makes the store with a command that creates one (``runs`` never does)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## PostgreSQL and workers") :]
    section = section[: section.index("\n## ", 1)]
    assert f"gives up after {pg_settings.CONNECT_TIMEOUT_S} s" in section
    assert f"at most {pg_settings.LOCK_TIMEOUT.removesuffix('s')} s for a" in section
    assert "ENCODING 'UTF8'" in section and "not a toolloop store" in section
    quick_start = section[section.index("```sh") : section.index("```", section.index("```sh") + 5)]
    assert "toolloop runs" not in quick_start
