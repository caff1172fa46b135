"""A hostile model provider on 127.0.0.1 for the security tests, bounded in time and bytes.

Each mode is one way a provider (or a proxy in front of it) can misbehave: echo the key back,
send more than the body cap, send a compression bomb, or keep a request open forever. Every
mode stops by itself after ``seconds`` (or ``max_bytes`` sent), and the server stops when the
``with`` block ends, so a test that fails cannot leave a server or a thread behind.

The bombs are built on the fly: a deflate stream of a repeated block, flushed with
``Z_FULL_FLUSH``, compresses every block to the same bytes, so a 1 GiB gzip body costs the
server one 1 MiB block and about 1 MiB of output; nothing large is ever held here.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MiB = 1 << 20
#: the headers a key travels in, per provider; the echo modes send back whichever is present
KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


def answer(text: str = "hi") -> dict[str, Any]:
    """A complete OpenAI Responses answer with final text."""
    return {
        "id": "resp_hostile",
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_hostile",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }


def answer_stream(text: str = "hi") -> bytes:
    """The same answer as one SSE terminal event (what a Responses stream ends with)."""
    event = {"type": "response.completed", "response": answer(text)}
    return f"event: response.completed\ndata: {json.dumps(event)}\n\n".encode()


def bomb(total: int, *, wbits: int, block: int = MiB) -> Iterator[bytes]:
    """``total`` bytes of spaces, compressed (gzip for wbits 31, zlib for 15), piece by piece."""
    fill = b" " * block
    blocks = total // block
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" if wbits == 31 else b"\x78\xda"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate; the wrapper is ours
    first = header + compressor.compress(fill) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(fill) + compressor.flush(zlib.Z_FULL_FLUSH)
    yield first
    for _ in range(blocks - 1):
        yield again
    tail = compressor.flush()
    if wbits == 31:  # gzip trailer: CRC-32 and length of the whole, little-endian
        crc = 0
        for _ in range(blocks):
            crc = zlib.crc32(fill, crc)
        tail += struct.pack("<II", crc, total & 0xFFFFFFFF)
    else:  # zlib trailer: Adler-32 of the whole, big-endian
        adler = 1
        for _ in range(blocks):
            adler = zlib.adler32(fill, adler)
        tail += struct.pack(">I", adler)
    yield tail


class HostileProvider:
    """``with HostileProvider(mode) as hp:`` serves ``mode`` on ``hp.url`` until the block ends."""

    def __init__(self, mode: str, *, seconds: float = 60.0, max_bytes: int = 400 * MiB) -> None:
        self.mode = mode
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.stopping = threading.Event()
        self.received: list[dict[str, str]] = []
        self.sent = 0  # body bytes written, over all requests
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.hostile = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HostileProvider:
        self._thread.start()
        threading.Timer(self.seconds + 5, self.stopping.set).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def hostile(self) -> HostileProvider:
        return self.server.hostile  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(min(length, 4 * MiB))
        self.hostile.received.append({k.lower(): v for k, v in self.headers.items()})
        started = time.monotonic()
        try:
            getattr(self, "mode_" + self.hostile.mode)(started)
        except OSError:  # the client went away: the point of most modes
            pass
        self.close_connection = True

    # -- helpers ------------------------------------------------------------------------------

    def _key_value(self) -> str:
        for name in KEY_HEADERS:
            if self.headers.get(name):
                return str(self.headers[name])
        return ""

    def _head(self, status: int, ctype: str, length: int | None, **extra: str) -> None:
        self.send_response(status)
        self.send_header("connection", "close")  # one request per connection, as do_POST ends
        self.send_header("content-type", ctype)
        if length is not None:
            self.send_header("content-length", str(length))
        for name, value in extra.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.hostile.sent += len(data)

    def _open(self, started: float) -> bool:
        """Whether this request may go on writing (time and bytes left, server not stopping)."""
        hostile = self.hostile
        return (
            not hostile.stopping.is_set()
            and time.monotonic() - started < hostile.seconds
            and hostile.sent < hostile.max_bytes
        )

    def _json(self, status: int, value: object, **extra: str) -> None:
        body = json.dumps(value).encode()
        self._head(status, "application/json", len(body), **extra)
        self._write(body)

    # -- modes --------------------------------------------------------------------------------

    def mode_ok(self, started: float) -> None:
        self._json(200, answer())

    def mode_ok_gzip(self, started: float) -> None:
        body = zlib.compress(json.dumps(answer("gzipped")).encode(), wbits=31)
        self._head(200, "application/json", len(body), content_encoding="gzip")
        self._write(body)

    def mode_ok_stream_gzip(self, started: float) -> None:
        body = zlib.compress(answer_stream("streamed gzip").decode().encode(), wbits=31)
        self._head(200, "text/event-stream", len(body), content_encoding="gzip")
        self._write(body)

    def mode_echo_in_header_line(self, started: float) -> None:
        """A broken proxy: a response header line that quotes the key (httpx's error shows it)."""
        line = f"X-Echo {self._key_value()}\r\n".encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\n" + line + b"\r\n")

    def mode_echo_401(self, started: float) -> None:
        """An error body (and a header) that quote the key header whole, as some proxies do."""
        message = f"Incorrect API key provided: {self._key_value()}"
        error = {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}
        self._json(401, {"error": error}, x_echo=self._key_value())

    def mode_echo_stream(self, started: float) -> None:
        """A 200 stream whose final text quotes the key header."""
        value = self._key_value()
        body = answer_stream(f"your header was {value}")
        self._head(200, "text/event-stream", len(body))
        self._write(body)

    def mode_huge(self, started: float) -> None:
        """A 200 MiB answer (spaces, then nothing), announced by its content-length."""
        total = 200 * MiB
        self._head(200, "application/json", total)
        block = b" " * MiB
        for _ in range(total // MiB):
            if not self._open(started):
                return
            self._write(block)

    def _bomb(self, started: float, encoding: str, wbits: int, ctype: str) -> None:
        pieces = list(bomb(1024 * MiB, wbits=wbits))  # ~1 MiB of output in all
        self._head(200, ctype, sum(map(len, pieces)), content_encoding=encoding)
        for piece in pieces:
            if not self._open(started):
                return
            self._write(piece)

    def mode_gzip_bomb(self, started: float) -> None:
        self._bomb(started, "gzip", 31, "application/json")

    def mode_gzip_bomb_stream(self, started: float) -> None:
        self._bomb(started, "gzip", 31, "text/event-stream")

    def mode_deflate_bomb(self, started: float) -> None:
        self._bomb(started, "deflate", 15, "application/json")

    def mode_brotli(self, started: float) -> None:
        """A body in an encoding toolloop never asks for (these bytes are not even brotli)."""
        body = b"\x8b" + b"\x00" * 4096
        self._head(200, "application/json", len(body), content_encoding="br")
        self._write(body)

    def mode_sse_forever(self, started: float) -> None:
        """A stream that starts, then sends 64 KiB comments as fast as it can, never ending."""
        self._head(200, "text/event-stream", None)
        self._write(b'event: response.created\ndata: {"type":"response.created"}\n\n')
        comment = b": " + b"x" * (64 * 1024) + b"\n\n"
        while self._open(started):
            self._write(comment)

    def mode_sse_slow(self, started: float) -> None:
        """A stream kept alive by one comment a second, whose terminal event never comes."""
        self._head(200, "text/event-stream", None)
        self._write(b'event: response.created\ndata: {"type":"response.created"}\n\n')
        self.wfile.flush()
        while self._open(started):
            self._write(b": keep-alive\n\n")
            self.wfile.flush()
            time.sleep(1)

    def mode_slow_body(self, started: float) -> None:
        """A whole JSON answer that drips one byte a second."""
        body = json.dumps(answer()).encode()
        self._head(200, "application/json", len(body))
        for i in range(len(body)):
            if not self._open(started):
                return
            self._write(body[i : i + 1])
            self.wfile.flush()
            time.sleep(1)

    def mode_silent(self, started: float) -> None:
        """Headers, then nothing at all until the time is up."""
        self._head(200, "application/json", 100)
        self.wfile.flush()
        while self._open(started):
            time.sleep(0.2)
