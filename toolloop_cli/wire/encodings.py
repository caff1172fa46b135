"""Bodies that arrive with a ``content-encoding``: the encodings toolloop asks for, decoded
a bounded piece at a time.

``decoded`` undoes a ``content-encoding`` incrementally: each piece it yields is at most
``PIECE_BYTES`` long and the next is made only when asked for, so a compression bomb costs
what the reader consumes (it stops at its byte cap), never the bomb's decoded size. The live
provider transport and HTTP tools read their answers through it. ``source`` names who
answered in the error texts.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

from toolloop_cli.errors import MalformedProviderPayload

__all__ = ["ACCEPT_ENCODING", "PIECE_BYTES", "accepted", "decoded"]

#: The encodings toolloop asks for and decodes; any other one is refused, never decoded.
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: The most decoded bytes made from compressed input at a time.
PIECE_BYTES = 64 * 1024


def accepted(encoding: str, source: str) -> str:
    """The one encoding to undo ('' for none); anything toolloop did not ask for is refused."""
    names = [n.strip().lower() for n in encoding.split(",") if n.strip()]
    names = [n for n in names if n != "identity"]
    if not names:
        return ""
    if len(names) == 1 and names[0] in _WBITS:
        return names[0]
    raise MalformedProviderPayload(
        f"{source}: answer has content-encoding {encoding.strip()!r}, which toolloop does not "
        f"accept (it asks for {ACCEPT_ENCODING})",
        provider=source,
    )


def decoded(raw: Iterable[bytes], encoding: str, source: str) -> Iterator[bytes]:
    """The decoded body of ``raw`` (``encoding`` from ``accepted``), a bounded piece at a time."""
    if not encoding:
        yield from raw
        return
    inflater = zlib.decompressobj(_WBITS[encoding])
    first = True
    for chunk in raw:
        if not chunk:
            continue
        data = chunk
        while True:
            try:
                piece = inflater.decompress(data, PIECE_BYTES)
            except zlib.error as exc:
                if first and encoding == "deflate":  # some servers send deflate unwrapped
                    inflater, first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise _undecodable(encoding, source, str(exc)) from exc
            first = False
            data = inflater.unconsumed_tail
            if piece:
                yield piece
            if inflater.eof:
                return  # what follows the compressed stream is not part of the body
            if not data and len(piece) < PIECE_BYTES:
                break  # this chunk is used up, and nothing is left pending
    if not first:  # an empty body is empty in any encoding
        raise _undecodable(encoding, source, "the compressed body ended early")


def _undecodable(encoding: str, source: str, why: str) -> MalformedProviderPayload:
    return MalformedProviderPayload(
        f"{source}: cannot decode the {encoding} answer: {why}", provider=source
    )
