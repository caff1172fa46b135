"""Go httprr traces (langchaingo, adk-go) replay as the recording they hold does: records of
raw HTTP/1.1 messages, in order, each body framed by its length, by chunks, or by the end of
the record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from foreign import recorded, refused, replays_as_recorded
from support.cli import Invoke


def _chunked(body: bytes) -> bytes:
    pieces = [body[i : i + 97] for i in range(0, len(body), 97)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _response(response: dict[str, Any], framing: str) -> bytes:
    body = response["body"]["string"].encode()
    status = response["status"]
    head = [f"HTTP/2.0 {status['code']} {status['message']}"]
    head += [f"{name}: {value}" for name, values in response["headers"].items() for value in values]
    if framing == "length":
        head.append(f"Content-Length: {len(body)}")
    elif framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        body = _chunked(body)
    else:  # Go writes a body of unknown length to the end, closing the connection
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _request(request: dict[str, Any]) -> bytes:
    body = request["body"].encode()
    host = request["uri"].split("/")[2]
    # a scrubber's header line ending in LF alone, which Go reads as it reads CRLF
    head = (
        f"{request['method']} {request['uri']} HTTP/1.1\r\nHost: {host}\r\n"
        f"User-Agent: langchaingo-httprr\nContent-Length: {len(body)}\r\n"
        "Content-Type: application/json\r\n\r\n"
    )
    return head.encode() + body


def httprr(name: str, framing: str) -> bytes:
    """``transcripts/refund-NAME.yaml`` as an httprr trace."""
    exchanges = recorded(name)
    trace = b"httprr trace v1\n"
    for interaction in exchanges:
        request = _request(interaction["request"])
        response = _response(interaction["response"], framing)
        trace += b"%d %d\n" % (len(request), len(response)) + request + response
    return trace


@pytest.mark.parametrize(
    ("name", "framing"),
    [
        ("openai", "length"),
        ("anthropic", "chunked"),
        ("anthropic-stream", "to-the-end"),
        ("gemini-generate", "length"),
        ("gemini-generate-stream", "chunked"),
    ],
)
def test_an_httprr_trace_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str, framing: str
) -> None:
    """Was "not valid YAML at line 4, column 5" for every trace."""
    path = tmp_path / "TestRefund.httprr"
    path.write_bytes(httprr(name, framing))
    replays_as_recorded(cli, path, name)


def _cut(data: bytes) -> bytes:
    return data[:-10]


def _counts(data: bytes) -> bytes:
    return data.replace(b"\n", b"\nx y\n", 1)


def _no_blank_line(data: bytes) -> bytes:
    head, first = data.split(b"\n", 2)[:2], data.split(b"\n", 2)[2]
    request_size = int(head[1].split()[0])
    request = first[:request_size].replace(b"\r\n\r\n", b"\r\n", 1).ljust(request_size, b" ")
    return b"\n".join(head) + b"\n" + request + first[request_size:]


def _status_line(data: bytes) -> bytes:
    return data.replace(b"HTTP/2.0 200 OK", b"HTTP/2.0 OK 200", 1)


def _bad_chunk(data: bytes) -> bytes:
    return data.replace(b"\r\n\r\n61\r\n", b"\r\n\r\nzz\r\n", 1)


def _trailing(data: bytes) -> bytes:
    """Bytes after the chunked body's last chunk, the record's counts made to fit them."""
    head, first = data.split(b"\n", 2)[:2], data.split(b"\n", 2)[2]
    request_size, response_size = map(int, head[1].split())
    end = request_size + response_size
    record = first[:end] + b"GARBAGE AFTER"
    counts = b"%d %d" % (request_size, response_size + 13)
    return head[0] + b"\n" + counts + b"\n" + record + first[end:]


def _length_short(data: bytes) -> bytes:
    return data.replace(b"Transfer-Encoding: chunked", b"Content-Length: 10", 1).replace(
        b"\r\n\r\n61\r\n", b"\r\n\r\n", 1
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_cut, "httprr record 3: it says 3111 + 628 bytes, but the file ends 3729 bytes after"),
        (_counts, "httprr record 0: its first line is not two byte counts"),
        (_no_blank_line, "httprr record 0: the request has no empty line after its headers"),
        (_status_line, "httprr record 0: status line 'HTTP/2.0 OK 200' is not"),
        (_bad_chunk, "httprr record 0: chunked body: a chunk size line"),
        (_trailing, "httprr record 0: the response's record goes on for 13 bytes after the body"),
        (_length_short, "httprr record 0: the response's record goes on for"),
    ],
)
def test_a_trace_that_does_not_parse_is_refused_naming_the_record(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    path = tmp_path / "broken.httprr"
    path.write_bytes(change(httprr("anthropic", "chunked")))
    refused(cli, path, problem)


def test_an_answer_to_head_has_no_body_whatever_its_length_says(
    cli: Invoke, tmp_path: Path
) -> None:
    """Go writes a HEAD answer's content-length and no body: the whole trace was refused with
    "the body ended after 0 of 1234 bytes"."""
    request = (
        b"HEAD https://api.anthropic.com/v1/models HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n"
    )
    response = b"HTTP/2.0 200 OK\r\nContent-Length: 1234\r\nContent-Type: application/json\r\n\r\n"
    head = b"%d %d\n" % (len(request), len(response)) + request + response
    trace = httprr("anthropic", "length")
    magic, records = trace.split(b"\n", 1)
    path = tmp_path / "TestWithHead.httprr"
    path.write_bytes(magic + b"\n" + head + records)
    replays_as_recorded(cli, path, "anthropic")
