"""Recorded bodies kept compressed, decoded when a cassette is loaded.

vcrpy records ``content-encoding: gzip`` (or ``deflate``) bodies as the bytes on the wire by
default; they are inflated here, each gzip layer in turn, a piece at a time, and refused once
they pass ``MAX_BODY_BYTES``, the cap of a live answer. A body whose header names another
encoding must be the text the recorder already decoded; gzip data under a header that names
no coding (none kept, ``identity``, or a value a recorder blanked) is inflated as gzip. Every
problem is a ``Problem``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from toolloop_cli.adapters._answer import MAX_BODY_BYTES

from .shapes import Problem

__all__ = ["GZIP_MAGIC", "Oversized", "decoded", "decompress"]

#: How gzip data starts: a compressed cassette file, or a body recorded still compressed.
GZIP_MAGIC = b"\x1f\x8b"

#: the content codings toolloop undoes
_DECODED = ("gzip", "x-gzip", "deflate")
#: every content coding name HTTP registers (IANA); any other value names none, e.g. the
#: ``**REDACTED**`` LangChain's recorder writes over every header
_CODINGS = frozenset(
    {"aes128gcm", "br", "compress", "dcb", "dcz", "deflate", "exi", "gzip", "pack200-gzip"}
    | {"x-compress", "x-gzip", "zstd"}
)


def decoded(
    headers: dict[str, list[str]], body: bytes | None, where: str
) -> tuple[dict[str, list[str]], bytes | None]:
    """A gzip/deflate body (as vcrpy records it by default) decoded; the header then dropped."""
    codings = [c.strip().lower() for v in headers.get("content-encoding", []) for c in v.split(",")]
    if body is not None and body.startswith(GZIP_MAGIC) and not set(codings) & _CODINGS:
        codings = ["gzip"]  # no coding named (the header dropped or blanked): gzip by its bytes
    if body is None or not any(c in _DECODED for c in codings):
        return headers, _as_recorded(body, where, codings)
    if body.startswith(GZIP_MAGIC):
        layers = sum(1 for c in codings if c in ("gzip", "x-gzip"))
        body = _inflate(body, True, where, codings)
        for _ in range(layers - 1):  # "gzip, gzip": each layer undone in turn
            if body.startswith(GZIP_MAGIC):
                body = _inflate(body, True, where, codings)
    elif "deflate" in codings:
        body = _inflate(body, False, where, codings)
    else:  # already decoded by the recorder
        return headers, _as_recorded(body, where, codings)
    kept = {k: v for k, v in headers.items() if k not in ("content-encoding", "content-length")}
    return kept, body


def _as_recorded(body: bytes | None, where: str, codings: list[str]) -> bytes | None:
    """A body kept as recorded: when its header names an encoding toolloop does not undo
    (``br``, ``zstd``) or one it does not hold (gzip without gzip data), it must be the text
    the recorder already decoded; else the cassette, not the provider, is what is unusable."""
    encoded = [c for c in codings if c not in ("identity", "")]
    if body is None or not encoded:
        return body
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        said = ", ".join(encoded)
        if all(c in _DECODED for c in encoded):
            raise Problem(
                f"{where} body says content-encoding {said} but is neither that nor text"
            ) from None
        raise Problem(
            f"{where} body says content-encoding {said} and is not text: toolloop decodes gzip"
            " and deflate only (record with the recorder's decoding on)"
        ) from None
    return body


def _inflate(body: bytes, gzip: bool, where: str, codings: list[str]) -> bytes:
    """Decompress (every gzip member), never holding more than ``MAX_BODY_BYTES + 1`` out.

    Deflate comes zlib-wrapped (starting ``x``) or raw, as servers send both.
    """
    if gzip:
        wbits = zlib.MAX_WBITS | 16
    else:
        wbits = zlib.MAX_WBITS if body[:1] == b"x" else -zlib.MAX_WBITS
    try:
        return decompress(body, wbits, MAX_BODY_BYTES, members=gzip)
    except Oversized:
        raise Problem(
            f"{where} body ({', '.join(codings)}) decodes to more than {MAX_BODY_BYTES} bytes"
        ) from None
    except zlib.error as exc:
        raise Problem(
            f"{where} body says content-encoding {', '.join(codings)} but does not decode: {exc}"
        ) from None


class Oversized(Exception):
    """Compressed data that decompresses to more than its limit."""


def decompress(data: bytes, wbits: int, limit: int, *, members: bool) -> bytes:
    """``data`` decompressed (``Oversized`` past ``limit``); ``members``: every gzip member,
    and zero padding after them, as ``gzip.decompress`` reads them. A ``zlib.error`` when it
    does not decompress. Data that could inflate past ``limit`` is measured first, holding one
    piece at a time, so a bomb is refused without ever holding ``limit`` bytes; only data
    within the limit is inflated to keep."""
    if len(data) * _MAX_RATIO > limit:
        for _ in _inflated(data, wbits, limit, members=members):
            pass
    return b"".join(_inflated(data, wbits, limit, members=members))


#: the most deflate inflates one byte to (its longest match, 258 bytes, costs 2 bits)
_MAX_RATIO = 1032


#: how much inflated data is handed out at a time
_PIECE = 1 << 20


def _inflated(data: bytes, wbits: int, limit: int, *, members: bool) -> Iterator[bytes]:
    """``data`` inflated, a piece of at most ``_PIECE`` bytes at a time."""
    total = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits)
        pending = rest
        while pending:
            piece = inflater.decompress(pending, _PIECE)
            pending = inflater.unconsumed_tail
            if not pending:
                piece += inflater.flush()
            total += len(piece)
            if total > limit:
                raise Oversized
            yield piece
        if not inflater.eof:
            raise zlib.error("the compressed data ends early")
        rest = inflater.unused_data.lstrip(b"\x00") if members else b""
