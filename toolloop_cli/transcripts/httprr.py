"""httprr traces: the record/replay files of Go's ``httprr`` (langchaingo, adk-go, oscar).

A trace is bytes, not text::

    httprr trace v1\\n
    <n1> <n2>\\n<n1 bytes: the request as Go's Request.WriteProxy writes it>
                <n2 bytes: the response as Response.Write writes it>
    ...

Each record becomes a vcrpy interaction, in file order: the request line's method and
absolute URI, the header lines, and the body as the message frames it (``content-length``,
``transfer-encoding: chunked``, or, for a response with neither, everything to the end of the
record, as Go writes a body of unknown length). A record that does not parse is a ``Problem``
naming it (counted from 0).
"""

from __future__ import annotations

import io
from typing import Any

from .request_body import Refused, read_body
from .shapes import MAX_INTERACTIONS, Problem

__all__ = ["HTTPRR_MAGIC", "httprr_interactions"]

#: the first line of every trace
HTTPRR_MAGIC = b"httprr trace v1\n"


def httprr_interactions(data: bytes) -> list[dict[str, Any]]:
    """The records of a trace (``data`` starts with ``HTTPRR_MAGIC``) as vcrpy interactions."""
    interactions: list[dict[str, Any]] = []
    at = len(HTTPRR_MAGIC)
    while at < len(data):
        index = len(interactions)
        if index == MAX_INTERACTIONS:
            raise Problem(f"more than {MAX_INTERACTIONS:,} records, more than one replay reads")
        end = data.find(b"\n", at)
        counts = data[at:end].split(b" ") if end >= 0 else []
        if len(counts) != 2 or not all(c.isdigit() and len(c) <= 12 for c in counts):
            raise Problem(f"httprr record {index}: its first line is not two byte counts")
        sizes = int(counts[0]), int(counts[1])
        at = end + 1
        if at + sum(sizes) > len(data):
            raise Problem(
                f"httprr record {index}: it says {sizes[0]} + {sizes[1]} bytes, but the file "
                f"ends {len(data) - at} bytes after its first line"
            )
        request = data[at : at + sizes[0]]
        response = data[at + sizes[0] : at + sum(sizes)]
        at += sum(sizes)
        try:
            asked = _request(request)
            interactions.append({"request": asked, "response": _response(response, asked)})
        except Problem as exc:
            raise Problem(f"httprr record {index}: {exc}") from None
    return interactions


def _request(raw: bytes) -> dict[str, Any]:
    line, headers, rest = _message(raw, "request")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise Problem(f"request line {line[:80]!r} is not 'METHOD URI HTTP/x.y'")
    body = _unframed(headers, rest, "request")
    return {"method": parts[0], "uri": parts[1], "headers": headers, "body": body}


def _response(raw: bytes, request: dict[str, Any]) -> dict[str, Any]:
    line, headers, rest = _message(raw, "response")
    version, _, after = line.partition(" ")
    code, _, message = after.partition(" ")
    if not version.startswith("HTTP/") or not (len(code) == 3 and code.isdigit()):
        raise Problem(f"status line {line[:80]!r} is not 'HTTP/x.y CODE REASON'")
    status = int(code)
    # no body, whatever its content-length says: an answer to HEAD, a 1xx, 204 or 304
    bodiless = request["method"] == "HEAD" or status < 200 or status in (204, 304)
    if bodiless and rest:
        raise Problem(f"a {status} answer to {request['method']} has a body, which it cannot")
    body = rest if bodiless else _unframed(headers, rest, "response")
    return {
        "status": {"code": status, "message": message},
        "headers": headers,
        "body": {"string": body},
    }


def _message(raw: bytes, what: str) -> tuple[str, dict[str, list[str]], bytes]:
    """The start line, the headers and what follows them, of one HTTP/1.1 message."""
    lines: list[str] = []
    at = 0
    while True:  # lines end in CRLF, or in LF alone (Go reads both; scrubbers write either)
        end = raw.find(b"\n", at)
        if end < 0:
            raise Problem(f"the {what} has no empty line after its headers")
        line = raw[at:end].removesuffix(b"\r").decode("latin-1")  # header bytes as HTTP reads
        at = end + 1
        if not line:
            break
        lines.append(line)
    if not lines:
        raise Problem(f"the {what} has no start line")
    rest = raw[at:]
    headers: dict[str, list[str]] = {}
    for header in lines[1:]:
        name, colon, value = header.partition(":")
        if not colon or not name.strip() or name != name.strip():
            raise Problem(f"{what} header line {header[:80]!r} is not 'Name: value'")
        headers.setdefault(name.lower(), []).append(value.strip())
    return lines[0], headers, rest


def _unframed(headers: dict[str, list[str]], rest: bytes, what: str) -> bytes:
    """The body framed by the headers (``transfer-encoding`` dropped once it is undone), or
    all of ``rest`` when nothing frames it; a framing that does not fit the record refuses."""
    lengths, codings = headers.get("content-length", []), headers.get("transfer-encoding", [])
    if not lengths and not codings:
        return rest
    framed = io.BytesIO(rest)
    body = read_body(framed, lengths, codings, len(rest), what)
    if isinstance(body, Refused):
        if body.status == 413:
            raise Problem(f"the {what} says more body than its record holds ({len(rest)} bytes)")
        raise Problem(body.message)
    left = len(rest) - framed.tell()
    if left:  # Go writes exactly the framed body: more is a record that was edited
        raise Problem(f"the {what}'s record goes on for {left} bytes after the body it frames")
    headers.pop("transfer-encoding", None)
    return body
