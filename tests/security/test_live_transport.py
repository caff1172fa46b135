"""The live transport under a hostile provider: keys, byte caps, compression bombs, deadlines.

Each test is a reproduction from the security review of 2026-12-03 (M1, I5, L8, M7, M8, L1,
M10, I1). Runs that could exhaust memory or hang on a regression run the CLI as a child process
(``python -m toolloop_cli``), whose peak RSS is read from ``os.wait4`` when it ends and whose
address space is limited to 4 GiB so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hostile_provider import HostileProvider, MiB
from support.cli import Invoke, json_out
from support.measured import Measured, run_measured
from support.paths import REGISTRY, TASK

from toolloop_cli.adapters.openai_responses import MAX_BODY_BYTES
from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.errors import StoreError
from toolloop_cli.service import operations
from toolloop_cli.store import open_store

#: peak RSS a run under hostile input may reach (the acceptance bound of the fixes)
RSS_LIMIT_KIB = 256 * 1024
#: the address space a child may map: far above a fixed run, far below the machine
_CHILD_AS_BYTES = 4 << 30
#: --provider → (key variable, base-URL variable, URL suffix, a model name)
LIVE = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1", "gpt-4.1"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "", "claude-sonnet-4-5-20250929"),
    "gemini-generate": ("GEMINI_API_KEY", "GEMINI_BASE_URL", "", "gemini-2.5-flash"),
}
SECRET = "sk-SECRETKEY-0123456789abcdef"


def live_env(
    hp: HostileProvider | None, option: str = "openai", key: str = SECRET
) -> dict[str, str]:
    key_var, base_var, suffix, _ = LIVE[option]
    env = {key_var: key}
    if hp is not None:
        env[base_var] = hp.url + suffix
    return env


def live_args(option: str = "openai", *extra: str) -> list[str]:
    model = LIVE[option][3]
    return ["run", TASK, "--registry", str(REGISTRY), "--provider", option, "--model", model,
            *extra]  # fmt: skip


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` (store, its WAL, recordings) whose bytes contain ``needle``."""
    raw = needle.encode()
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and raw in p.read_bytes())


def operation_count(store: Path) -> int:
    if not store.exists():
        return 0
    with sqlite3.connect(store) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if "operations" not in tables:
            return 0
        return int(conn.execute("SELECT count(*) FROM operations").fetchone()[0])


# -- the child process ------------------------------------------------------------------------


class Child(Measured):
    """A finished child whose one line of ``--json`` output can be read."""

    def view(self) -> dict[str, Any]:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, self.stdout[-2000:] + self.stderr[-2000:]
        parsed: dict[str, Any] = json.loads(lines[0])
        return parsed


def run_child(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 60) -> Child:
    """``python -m toolloop_cli ARGS`` in ``cwd``; its exit, output, own peak RSS and wall time."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "TOOLLOOP_"))
    }
    done = run_measured(
        args, cwd, env={**base, **env}, timeout_s=timeout_s, address_space_bytes=_CHILD_AS_BYTES
    )
    return Child(**vars(done))


def assert_bounded(child: Child) -> None:
    assert not child.killed, f"still running after {child.seconds:.0f} s"
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    assert child.max_rss_kib < RSS_LIMIT_KIB, f"peak RSS {child.max_rss_kib} KiB"


# -- M1 / L8: the key itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "key", "what"),
    [
        ("openai", SECRET + "\r", r"a control character (\r)"),
        ("openai", SECRET + "\n", r"a control character (\n)"),
        ("anthropic", SECRET[:8] + "\t" + SECRET[8:], r"a control character (\t)"),
        ("gemini-generate", SECRET[:8] + "\x7f" + SECRET[8:], r"a control character (\x7f)"),
        ("openai", SECRET[:8] + " " + SECRET[8:], "whitespace (a space)"),
        ("openai", SECRET + "-ünicode", "a non-ASCII character"),
    ],
)
def test_a_malformed_key_is_refused_at_start_naming_its_variable_and_nothing_else(
    cli: Invoke, store_path: Path, tmp_path: Path, option: str, key: str, what: str
) -> None:
    record = tmp_path / "rec.yaml"
    with HostileProvider("ok", seconds=20) as hp:
        env = live_env(hp, option, key)
        result = cli(*live_args(option, "--record", str(record), "--json"), env=env)
        received = list(hp.received)
    variable = LIVE[option][0]
    lines = stderr_lines(result.stderr)
    assert result.exit_code == 2, result.output
    assert lines == [f"error: {variable} contains {what}; fix the variable"]
    assert json_out(result)["error"] == lines[0].removeprefix("error: ")
    assert "SECRETKEY" not in result.stdout + result.stderr
    assert received == []  # the key was never sent
    assert operation_count(store_path) == 0 and not record.exists()


@pytest.mark.parametrize("option", list(LIVE))
def test_a_transport_error_that_quotes_the_key_reaches_no_file_or_output_unredacted(
    cli: Invoke, store_path: Path, tmp_path: Path, option: str
) -> None:
    """A broken proxy answers with a header line that quotes the key; httpx's error text shows
    the line, and that text becomes the turn error and the operation reason."""
    record = tmp_path / "rec.yaml"
    with HostileProvider("echo_in_header_line", seconds=20) as hp:
        env = live_env(hp, option)
        args = live_args(option, "--max-retries", "0", "--record", str(record), "--json")
        result = cli(*args, env=env)
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (13, "FAILED")
    assert "RemoteProtocolError" in view["reason"] and "[REDACTED]" in view["reason"]
    assert view["turns"][0]["error"]["message"] in view["reason"]
    assert SECRET not in result.stdout + result.stderr
    assert record.exists() and files_holding(tmp_path, SECRET) == []
    assert files_holding(tmp_path, SECRET[3:12]) == []  # not even a part of it


@pytest.mark.parametrize("option", list(LIVE))
def test_a_provider_error_that_echoes_the_key_is_stored_redacted(
    cli: Invoke, store_path: Path, tmp_path: Path, option: str
) -> None:
    """I5: a 401 whose message quotes the whole key header (some proxies do)."""
    record = tmp_path / "rec.yaml"
    with HostileProvider("echo_401", seconds=20) as hp:
        env = live_env(hp, option)
        result = cli(*live_args(option, "--record", str(record), "--json"), env=env)
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (13, "FAILED")
    assert view["turns"][0]["error"]["status"] == 401
    assert SECRET not in result.stdout + result.stderr
    assert record.exists() and files_holding(tmp_path, SECRET) == []


def test_an_answer_that_echoes_the_key_is_stored_redacted(
    cli: Invoke, store_path: Path, tmp_path: Path
) -> None:
    """The same over a 200 stream: the key never reaches the adapter, so no stored text has it."""
    record = tmp_path / "rec.yaml"
    with HostileProvider("echo_stream", seconds=20) as hp:
        args = live_args("openai", "--stream", "--record", str(record), "--json")
        result = cli(*args, env=live_env(hp))
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (0, "COMPLETED")
    assert view["final_text"] == "your header was [REDACTED]"
    assert record.exists() and files_holding(tmp_path, SECRET) == []


def test_a_key_split_across_chunks_is_redacted_and_nothing_else_waits() -> None:
    """The redaction the transport applies to every answer, at every split of the key."""
    from toolloop_cli.adapters._wire import Secrets

    secrets = Secrets(SECRET, f"Bearer {SECRET}")
    body = f'data: {{"text": "echo {SECRET} and Bearer {SECRET}"}}\n\n'.encode()
    expected = b'data: {"text": "echo [REDACTED] and [REDACTED]"}\n\n'
    for split in range(len(body) + 1):
        pieces = list(secrets.redact([body[:split], body[split:]]))
        assert b"".join(pieces) == expected, split
    # a chunk whose end cannot begin a secret is handed on whole, at once
    assert next(secrets.redact(iter([b"event: x\n\n", b"never read"]))) == b"event: x\n\n"


# -- M7: --record with --stream ---------------------------------------------------------------


def test_record_with_stream_stops_an_endless_stream_at_the_cap_as_a_run_without_record(
    tmp_path: Path,
) -> None:
    ends = []
    for recorded in (False, True):
        folder = tmp_path / ("rec" if recorded else "plain")
        folder.mkdir()
        record = ["--record", str(folder / "rec.yaml")] if recorded else []
        with HostileProvider("sse_forever", seconds=40) as hp:
            args = live_args("openai", "--stream", "--json", "--store", "store.db", *record)
            child = run_child(args, live_env(hp), folder)
            sent = hp.sent
        assert_bounded(child)
        view = child.view()
        # what was read past the cap (so the reason's size and digest) depends on the chunking
        ends.append((child.code, view["state"], view["reason"].partition(": refused")[0]))
        assert sent < 64 * MiB  # nothing drained the stream past the cap
    assert ends[0] == ends[1]
    assert ends[0][:2] == (13, "FAILED")
    assert ends[0][2] == f"openai: answer larger than {MAX_BODY_BYTES} bytes"
    recording = tmp_path / "rec" / "rec.yaml"
    assert 0 < recording.stat().st_size < 3 * MAX_BODY_BYTES
    assert b"interactions" in recording.read_bytes()[:4096]


# -- M8 / L1: compression bombs and answers over the cap --------------------------------------


@pytest.mark.parametrize(
    ("mode", "stream"),
    [("gzip_bomb", False), ("deflate_bomb", False), ("gzip_bomb_stream", True)],
)
def test_a_compression_bomb_from_a_live_provider_is_refused_at_the_cap(
    tmp_path: Path, mode: str, stream: bool
) -> None:
    with HostileProvider(mode, seconds=40) as hp:
        args = live_args("openai", "--json", "--max-retries", "0", "--store", "store.db")
        child = run_child([*args, *(["--stream"] if stream else [])], live_env(hp), tmp_path)
    assert_bounded(child)
    view = child.view()
    assert (child.code, view["state"]) == (13, "FAILED")
    assert f"answer larger than {MAX_BODY_BYTES} bytes" in view["reason"]
    assert (tmp_path / "store.db").stat().st_size < 2 * MAX_BODY_BYTES


def test_an_answer_over_the_cap_is_refused_without_being_read_or_stored_whole(
    tmp_path: Path,
) -> None:
    with HostileProvider("huge", seconds=40) as hp:
        args = live_args("openai", "--json", "--max-retries", "0", "--store", "store.db")
        child = run_child(args, live_env(hp), tmp_path)
        sent = hp.sent
    assert_bounded(child)
    view = child.view()
    assert (child.code, view["state"]) == (13, "FAILED")
    reason = view["reason"]
    assert f"answer larger than {MAX_BODY_BYTES} bytes" in reason
    assert "sha256 " in reason and "the first" in reason
    assert sent < 64 * MiB  # the 200 MiB answer was not read to its end
    store = tmp_path / "store.db"
    assert store.stat().st_size < 2 * MAX_BODY_BYTES
    with sqlite3.connect(store) as conn:
        (kept,) = conn.execute("SELECT length(response_body) FROM turns").fetchone()
    assert 0 < kept <= MAX_BODY_BYTES


class _OneBody:
    """A transport with one answer already in memory (as a recording would hand it over)."""

    name = "memory"

    def __init__(self, body: bytes) -> None:
        self.body = body

    def send(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, {"content-type": "application/json"}, body=self.body)


def test_a_body_over_the_cap_from_any_transport_is_stored_as_a_bounded_prefix(
    store_path: Path,
) -> None:
    import hashlib

    body = b" " * (MAX_BODY_BYTES + MiB)
    options = operations.RunOptions(
        task=TASK, registry=REGISTRY, provider="openai", model="gpt-4.1"
    )
    store = open_store(store_path)
    result = operations.start(store, options, transport=_OneBody(body))
    op = result.operation
    assert op.state.value == "FAILED"
    assert f"after reading {len(body)} bytes (sha256 {hashlib.sha256(body).hexdigest()})" in str(
        op.reason
    )
    (turn,) = store.turns(op.operation_id)
    with sqlite3.connect(store_path) as conn:
        (kept,) = conn.execute("SELECT length(response_body) FROM turns").fetchone()
    assert kept == MAX_BODY_BYTES
    assert turn.response_sha256 == "sha256:" + hashlib.sha256(body[:MAX_BODY_BYTES]).hexdigest()


def test_the_store_refuses_a_turn_body_over_the_cap_with_a_clear_error(
    cli: Invoke, store_path: Path
) -> None:
    with HostileProvider("ok", seconds=20) as hp:
        done = cli(*live_args("openai", "--json"), env=live_env(hp))
    assert done.exit_code == 0
    store = open_store(store_path)
    op_id = json_out(done)["operation_id"]
    (turn,) = store.turns(op_id)
    extra = turn.model_copy(update={"idx": 1})
    with pytest.raises(StoreError, match=f"over the {MAX_BODY_BYTES}-byte cap"):
        with store.transaction():
            store.insert_turn(extra, 1, b" " * (MAX_BODY_BYTES + 1))
    assert len(store.turns(op_id)) == 1


def test_an_encoding_toolloop_never_asks_for_is_refused_not_decoded(
    cli: Invoke, store_path: Path
) -> None:
    with HostileProvider("brotli", seconds=20) as hp:
        result = cli(*live_args("openai", "--json", "--max-retries", "0"), env=live_env(hp))
        asked = hp.received[0].get("accept-encoding")
    view = json_out(result)
    assert asked == "gzip, deflate"
    assert (result.exit_code, view["state"]) == (13, "FAILED")
    assert "content-encoding 'br'" in view["reason"]


def test_a_gzip_encoded_event_stream_is_decoded(cli: Invoke, store_path: Path) -> None:
    with HostileProvider("ok_stream_gzip", seconds=20) as hp:
        result = cli(*live_args("openai", "--stream", "--json"), env=live_env(hp))
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (0, "COMPLETED")
    assert view["final_text"] == "streamed gzip"


def test_a_gzip_encoded_answer_is_still_decoded(cli: Invoke, store_path: Path) -> None:
    """Not a reproduction: the transport now decodes bodies itself, and must still do so."""
    with HostileProvider("ok_gzip", seconds=20) as hp:
        result = cli(*live_args("openai", "--json"), env=live_env(hp))
    view = json_out(result)
    assert (result.exit_code, view["state"]) == (0, "COMPLETED")
    assert view["final_text"] == "gzipped"


# -- M10: the deadline and the per-request limit ----------------------------------------------


@pytest.mark.parametrize(
    ("mode", "stream"),
    [("sse_slow", True), ("slow_body", False), ("silent", False)],
    ids=["keep-alive-stream", "dripping-body", "silent-after-headers"],
)
def test_the_deadline_cuts_a_model_request_in_flight(
    tmp_path: Path, mode: str, stream: bool
) -> None:
    deadline = 3.0
    with HostileProvider(mode, seconds=45) as hp:
        args = live_args("openai", "--json", "--deadline-s", str(deadline), "--store", "store.db")
        child = run_child([*args, *(["--stream"] if stream else [])], live_env(hp), tmp_path, 30)
        requests = len(hp.received)
    assert_bounded(child)
    view = child.view()
    assert (child.code, view["state"]) == (15, "BUDGET_EXHAUSTED")
    assert view["reason"].startswith(f"budget deadline_s: limit {deadline:g} s reached")
    assert "model request" in view["reason"]
    assert requests == 1  # a request cut by the deadline is not retried
    assert child.seconds < deadline + 10  # ended by itself, long before the server would


@pytest.mark.parametrize(
    ("mode", "stream", "state", "requests", "said"),
    [
        ("slow_body", False, "FAILED", 2, "retries exhausted (1): openai request took longer"),
        ("sse_slow", True, "INCOMPLETE", 1, "timed out mid-stream (openai request took longer"),
    ],
    ids=["dripping-body-is-retried", "keep-alive-stream-is-cut"],
)
def test_a_request_longer_than_the_per_request_limit_ends_as_a_timeout(
    tmp_path: Path, mode: str, stream: bool, state: str, requests: int, said: str
) -> None:
    """Without a deadline near, ``TOOLLOOP_REQUEST_TIMEOUT_S`` bounds each request: a whole
    answer that takes too long is a retryable timeout, a stream that does is a cut stream."""
    with HostileProvider(mode, seconds=45) as hp:
        args = live_args("openai", "--json", "--max-retries", "1", "--store", "store.db")
        env = {**live_env(hp), "TOOLLOOP_REQUEST_TIMEOUT_S": "2"}
        child = run_child([*args, *(["--stream"] if stream else [])], env, tmp_path, 30)
        sent = len(hp.received)
    assert_bounded(child)
    view = child.view()
    assert view["state"] == state
    assert said in view["reason"]
    assert "than the 2 s per-request limit (TOOLLOOP_REQUEST_TIMEOUT_S)" in view["reason"]
    assert sent == requests


def test_a_bad_per_request_limit_is_refused_in_one_line(cli: Invoke, store_path: Path) -> None:
    with HostileProvider("ok", seconds=20) as hp:
        env = {**live_env(hp), "TOOLLOOP_REQUEST_TIMEOUT_S": "soon"}
        result = cli(*live_args("openai"), env=env)
        received = list(hp.received)
    assert result.exit_code == 2
    assert stderr_lines(result.stderr) == [
        "error: TOOLLOOP_REQUEST_TIMEOUT_S must be a positive number of seconds, not 'soon'"
    ]
    assert received == [] and operation_count(store_path) == 0


# -- I1: plaintext HTTP -----------------------------------------------------------------------


def test_plaintext_http_to_a_host_that_is_not_loopback_is_refused_unless_allowed(
    cli: Invoke, store_path: Path
) -> None:
    remote = {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "http://example.invalid/v1"}
    refused = cli(*live_args("openai", "--max-retries", "0"), env=remote)
    assert refused.exit_code == 2
    assert stderr_lines(refused.stderr) == [
        "error: OPENAI_BASE_URL is plaintext http:// to example.invalid, which is not loopback: "
        "the key would travel unencrypted; use https://, or set TOOLLOOP_ALLOW_INSECURE_HTTP=1"
    ]
    assert operation_count(store_path) == 0

    allowed = cli(
        *live_args("openai", "--max-retries", "0", "--json"),
        env={**remote, "TOOLLOOP_ALLOW_INSECURE_HTTP": "1"},
    )
    view = json_out(allowed)
    assert (allowed.exit_code, view["state"]) == (13, "FAILED")
    assert "ConnectError" in view["reason"]  # it was let through, and found no such host

    with HostileProvider("ok", seconds=20) as hp:
        local = {
            "OPENAI_API_KEY": SECRET,
            "OPENAI_BASE_URL": hp.url.replace("127.0.0.1", "localhost") + "/v1",
        }
        assert cli(*live_args("openai"), env=local).exit_code == 0
