"""``toolloop serve`` attacked from its own loopback port (security review L5, L4): credentials in
the path are not logged, request bodies are capped and kept only up to a bound, idle and
half-open connections are closed, and a bad ``content-length`` is a 400 answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.paths import REFUND_OPENAI

from toolloop_cli.transcripts import server

GEMINI = REFUND_OPENAI.parent / "refund-gemini-generate.yaml"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "serve.log"


@pytest.fixture
def served(log: Path) -> Iterator[server.ServerHandle]:
    handle = server.start(GEMINI, log=log)
    try:
        yield handle
    finally:
        handle.close()


def raw(handle: server.ServerHandle, head: bytes, timeout_s: float = 5.0) -> bytes:
    """Send ``head`` (request line and headers, perhaps a body) and read until the server closes."""
    with socket.create_connection(("127.0.0.1", handle.port), timeout=timeout_s) as conn:
        conn.sendall(head)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def status_and_json(reply: bytes) -> tuple[int, object]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_a_key_in_the_query_is_scrubbed_from_the_log_and_the_record(
    served: server.ServerHandle, log: Path
) -> None:
    url = f"{served.url}/v1beta/models/m:generateContent?key=AIzaREALKEY123&alt=json"
    httpx.post(url, json={"contents": []}, timeout=10)
    text = log.read_text()
    assert "AIzaREALKEY123" not in text
    assert "AIzaREALKEY123" not in json.dumps(served.provider.received)
    assert "alt=json" in text and "key=%3Cscrubbed%3E" in text


def test_a_body_over_the_cap_is_answered_413_without_being_read(
    served: server.ServerHandle,
) -> None:
    size = 16 * 1024 * 1024 + 1  # server.MAX_REQUEST_BYTES + 1
    head = (
        f"POST /v1beta/models/m:generateContent HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    ).encode()
    # 1 byte of the promised 16 MiB: a server waiting for the rest makes ``raw`` time out
    status, body = status_and_json(raw(served, head + b"{"))
    assert status == 413
    assert "over 16777216 bytes" in json.dumps(body)
    assert served.provider.received[-1]["body"] is None


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "12, 13"])
def test_a_bad_content_length_is_a_400_json_answer_without_a_traceback(
    served: server.ServerHandle, capfd: pytest.CaptureFixture[str], length: str
) -> None:
    head = (
        f"POST /v1beta/models/m:generateContent HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {length}\r\n\r\n{{}}"
    ).encode()
    status, body = status_and_json(raw(served, head))
    assert status == 400
    assert "content-length" in json.dumps(body)
    assert "Traceback" not in capfd.readouterr().err


def test_what_is_kept_and_logged_of_bodies_is_bounded(
    served: server.ServerHandle, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "MAX_RETAINED_BYTES", 3 << 20, raising=False)
    logged = 64 * 1024  # server.MAX_LOGGED_BYTES
    body = b'{"contents": "' + b"x" * (2 << 20) + b'"}'  # 2 MiB: kept once, then an excerpt
    for _ in range(3):
        reply = httpx.post(
            f"{served.url}/v1beta/models/m:generateContent",
            content=body,
            headers={"content-type": "application/json"},
            timeout=10,
        )
        assert reply.status_code in (200, 400)
    first, second, third = served.provider.received
    assert first["body"] == {"contents": "x" * (2 << 20)}
    for entry in (second, third):
        assert "body" not in entry
        assert entry["body_bytes"] == len(body)
        assert len(entry["body_excerpt"]) == logged
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    assert all(len(line) < 2 * logged for line in lines)
    assert all(json.loads(line)["body_bytes"] == len(body) for line in lines)


def test_idle_and_half_open_connections_are_closed(capfd: pytest.CaptureFixture[str]) -> None:
    before = threading.active_count()
    with server.start(GEMINI, idle_timeout_s=0.5) as handle:
        idle = [socket.create_connection(("127.0.0.1", handle.port)) for _ in range(20)]
        half = socket.create_connection(("127.0.0.1", handle.port))
        half.sendall(b"POST /v1beta/m:generateContent HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        for conn in [*idle, half]:
            conn.settimeout(10)
            assert conn.recv(65536) == b""  # the server closed it (a recv timeout would raise)
            conn.close()
        deadline = time.monotonic() + 5
        while threading.active_count() > before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= before + 1  # only the server's own thread is left
        reply = httpx.post(f"{handle.url}/v1beta/models/m:generateContent", json={}, timeout=10)
        assert reply.status_code == 200
    assert "Traceback" not in capfd.readouterr().err


GENERATE = "/v1beta/models/m:generateContent"


def test_a_chunked_body_is_read_and_answered_with_the_next_recorded_answer(
    served: server.ServerHandle,
) -> None:
    def pieces() -> Iterator[bytes]:
        yield b'{"contents": [{"role": "user", '
        yield b'"parts": [{"text": "refund"}]}]}'

    reply = httpx.post(f"{served.url}{GENERATE}", content=pieces(), timeout=10)
    assert reply.status_code == 200
    entry = served.provider.received[-1]
    assert entry["headers"]["transfer-encoding"] == "chunked"
    assert entry["body"] == {"contents": [{"role": "user", "parts": [{"text": "refund"}]}]}
    assert entry["answer"] == "cassette:0"


@pytest.mark.parametrize(
    ("framing", "body", "status", "said"),
    [
        ("Transfer-Encoding: chunked", b"zz\r\n{}\r\n0\r\n\r\n", 400, "chunk size line"),
        (
            "Transfer-Encoding: chunked",
            b"1\r\n{}\r\n0\r\n\r\n",
            400,
            "does not end where its size says",
        ),
        ("Transfer-Encoding: chunked\r\nContent-Length: 2", b"{}", 400, "both content-length"),
        ("Transfer-Encoding: gzip", b"{}", 501, "transfer-encoding gzip is not read"),
    ],
)
def test_a_body_framed_wrongly_is_refused_without_spending_a_recorded_answer(
    served: server.ServerHandle, framing: str, body: bytes, status: int, said: str
) -> None:
    head = f"POST {GENERATE} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode()
    got, answer = status_and_json(raw(served, head + body))
    assert (got, said in json.dumps(answer)) == (status, True)
    assert served.provider.received[-1]["answer"] == f"error:{status}"
    assert served.provider.received[-1]["body"] is None
    following = httpx.post(f"{served.url}{GENERATE}", json={}, timeout=10)
    assert following.status_code == 200
    assert served.provider.received[-1]["answer"] == "cassette:0"  # the first is still next


def test_a_chunked_body_over_the_cap_is_answered_413(
    served: server.ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "MAX_REQUEST_BYTES", 1000)
    chunk = b"3e8\r\n" + b"x" * 1000 + b"\r\n"
    head = f"POST {GENERATE} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    status, answer = status_and_json(raw(served, head + chunk + chunk))
    assert status == 413
    assert "over 1000 bytes" in json.dumps(answer)


def test_a_body_shorter_than_its_content_length_is_refused_when_the_client_stops_sending(
    served: server.ServerHandle,
) -> None:
    head = f"POST {GENERATE} HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{{}}".encode()
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as conn:
        conn.sendall(head)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    status, answer = status_and_json(data)
    assert status == 400
    assert "ended after 2 of 10 bytes" in json.dumps(answer)
    assert served.provider.received[-1]["answer"] == "error:400"
