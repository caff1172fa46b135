"""How an audit record's text is kept in a SQLite store: deflated, as a BLOB.

A record is canonical JSON, about half of it hex digests; zlib at level 1 keeps it in about a
third of the bytes, so records fit SQLite's pages instead of spilling into overflow pages.
The chain still hashes the record's text: ``record_sha256`` is over the text, never over the
stored bytes, so a log is verified alike whether its records are kept as text (PostgreSQL,
whose TOAST compresses large values itself; stores written before) or deflated.

A BLOB that does not inflate to UTF-8 text, or would inflate past ``MAX_RECORD_BYTES`` (a
larger record is kept as text), was not written by toolloop: ``record_text`` hands it back as
it is, and the check reports that record.
"""

from __future__ import annotations

import zlib
from typing import TypeVar

__all__ = ["MAX_RECORD_BYTES", "pack_record", "record_text"]

_Value = TypeVar("_Value")

#: the largest record text kept deflated; larger ones are kept as text
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: how every zlib stream starts (its CMF byte: deflate with a 32 KiB window)
_DEFLATED = b"x"


def pack_record(text: str) -> bytes | str:
    """What the store keeps of a record's text: deflated, unless it is past the limit."""
    data = text.encode("utf-8")
    return zlib.compress(data, 1) if len(data) <= MAX_RECORD_BYTES else text


def record_text(value: _Value) -> _Value | str:
    """A stored record as text: inflated when kept deflated, decoded when read as the bytes
    of a text (as ``service.store_parts.log_of`` reads them); anything that is not UTF-8
    text, or does not inflate to it within the limit, is returned unchanged (the check
    reports it)."""
    if not isinstance(value, bytes):
        return value
    if not value.startswith(_DEFLATED):  # a record's text starts with "{", never "x"
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(value, MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES or not inflater.eof or inflater.unused_data:
            return value
        return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError):
        return value
