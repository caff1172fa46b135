"""Recorded bodies kept compressed, decoded when a cassette is loaded.

vcrpy records ``content-encoding: gzip`` (or ``deflate``, ``br``, ``zstd``) bodies as the bytes
on the wire by default; they are decoded here, each gzip layer in turn, a piece at a time, and
refused once they pass ``MAX_BODY_BYTES``, the cap of a live answer (``br`` through the
``brotli`` package, ``zstd`` through ``zstandard``). A body whose header names another
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
    if body is not None and [c for c in codings if c != "identity"] in (["br"], ["zstd"]):
        if _looks_decoded(body):  # the recorder decoded it and kept the header
            return headers, body
        body = _unbrotli(body, where) if "br" in codings else _unzstd(body, where)
        return _without_coding(headers), body
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
    return _without_coding(headers), body


def _without_coding(headers: dict[str, list[str]]) -> dict[str, list[str]]:
    """The headers of a body decoded here: no coding, and no length of the coded bytes."""
    return {k: v for k, v in headers.items() if k not in ("content-encoding", "content-length")}


#: how every provider answer starts once decoded: JSON, or event-stream framing
_DECODED_STARTS = (b"{", b"[", b"event:", b"data:", b":")


def _looks_decoded(body: bytes) -> bool:
    """A body that is already the text of an answer (a recorder decoded it and kept the
    header): compressed data is neither UTF-8 JSON nor an event stream."""
    if not body.lstrip().startswith(_DECODED_STARTS):
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _unbrotli(body: bytes, where: str) -> bytes:
    """A ``br`` body decoded, a piece at a time, refused past ``MAX_BODY_BYTES``."""
    import brotli  # only cassettes with such bodies need it

    def pieces() -> Iterator[bytes]:
        decompressor, data = brotli.Decompressor(), body
        while not decompressor.is_finished():
            piece = decompressor.process(data, output_buffer_limit=_PIECE)
            data = b""
            if not piece and decompressor.can_accept_more_data():
                raise brotli.error("it ends too soon")
            yield piece

    return _capped(pieces(), where, "br", brotli.error)


def _unzstd(body: bytes, where: str) -> bytes:
    """A ``zstd`` body decoded (every frame), a piece at a time, refused past
    ``MAX_BODY_BYTES``."""
    import zstandard  # only cassettes with such bodies need it

    def pieces() -> Iterator[bytes]:
        reader = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True)
        while piece := reader.read(_PIECE):
            yield piece

    return _capped(pieces(), where, "zstd", zstandard.ZstdError)


def _capped(pieces: Iterator[bytes], where: str, coding: str, failed: type[Exception]) -> bytes:
    """The decoded ``pieces`` joined, refused once they pass ``MAX_BODY_BYTES`` (the rest is
    never decoded); ``failed``, the decoder's error, says the body does not decode."""
    kept, total = [], 0
    try:
        for piece in pieces:
            total += len(piece)
            if total > MAX_BODY_BYTES:
                raise Problem(
                    f"{where} body ({coding}) decodes to more than {MAX_BODY_BYTES} bytes"
                )
            kept.append(piece)
    except failed as exc:
        raise Problem(
            f"{where} body says content-encoding {coding} but does not decode: {exc}"
        ) from None
    return b"".join(kept)


def _as_recorded(body: bytes | None, where: str, codings: list[str]) -> bytes | None:
    """A body kept as recorded: when its header names an encoding toolloop does not undo
    (``compress``, several codings stacked) or one it does not hold (gzip without gzip data),
    it must be the text the recorder already decoded; else the cassette, not the provider, is
    what is unusable."""
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
            f"{where} body says content-encoding {said} and is not text: toolloop decodes gzip,"
            " deflate, br and zstd (record with the recorder's decoding on)"
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
