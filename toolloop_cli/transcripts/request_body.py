"""Reading an HTTP/1.1 message body the way its headers frame it, within a cap.

``toolloop serve`` reads requests with it, and the httprr reader the messages of a trace. A
body comes with a ``content-length`` or as ``transfer-encoding: chunked`` (what httpx and
requests send for a streamed upload). Anything else, or both framings at once (the request
smuggling pattern, RFC 9112 §6.1), is refused unread: the fake provider must never spend a
recorded answer on a request whose body it did not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Refused", "read_body"]

_LENGTH = re.compile(r"[0-9]{1,20}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
#: the longest chunk-size line (size, extensions) or trailer line read
_MAX_LINE = 4096
#: how many trailer lines a chunked body may end with
_MAX_TRAILERS = 64


class Reader(Protocol):
    """What a body is read from (a request handler's ``rfile``)."""

    def read(self, size: int, /) -> bytes: ...

    def readline(self, size: int, /) -> bytes: ...


@dataclass(frozen=True)
class Refused:
    """Why a body was not read: the HTTP status to answer and one line saying why."""

    status: int
    message: str


def read_body(
    rfile: Reader, lengths: list[str], codings: list[str], cap: int, what: str = "request"
) -> bytes | Refused:
    """The body framed by ``lengths`` (every ``content-length`` value) or ``codings`` (every
    ``transfer-encoding`` value), at most ``cap`` bytes; or why it is refused. ``what`` names
    the message in the reasons."""
    if codings:
        if lengths:
            return Refused(400, f"a {what} with both content-length and transfer-encoding")
        named = [c.strip().lower() for value in codings for c in value.split(",") if c.strip()]
        if named != ["chunked"]:
            shown = ", ".join(named) or "''"
            return Refused(501, f"transfer-encoding {shown} is not read (only chunked)")
        return _chunked(rfile, cap, what)
    if len({v.strip() for v in lengths}) > 1 or not all(
        _LENGTH.fullmatch(v.strip()) for v in lengths
    ):
        return Refused(400, "content-length is not a byte count")
    length = int(lengths[0]) if lengths else 0
    if length > cap:
        return Refused(413, f"{what} body over {cap} bytes")
    body = rfile.read(length) if length > 0 else b""
    if len(body) < length:
        return Refused(400, f"the body ended after {len(body)} of {length} bytes")
    return body


def _chunked(rfile: Reader, cap: int, what: str) -> bytes | Refused:
    """A chunked body: sizes in hex, each chunk followed by CRLF, a 0 chunk, then trailers."""
    pieces: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            return Refused(400, "chunked body: a chunk size line is not hex digits and CRLF")
        size = int(match.group(1), 16)
        if size == 0:
            break
        total += size
        if total > cap:
            return Refused(413, f"{what} body over {cap} bytes")
        piece = rfile.read(size)
        if len(piece) < size or rfile.readline(3) not in (b"\r\n", b"\n"):
            return Refused(400, "chunked body: a chunk does not end where its size says")
        pieces.append(piece)
    for _ in range(_MAX_TRAILERS):
        line = rfile.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return b"".join(pieces)
        if not line.endswith(b"\n"):
            return Refused(400, "chunked body: it ends before its last empty line")
    return Refused(400, f"chunked body: more than {_MAX_TRAILERS} trailer lines")
