"""How an audit record's text is kept in a SQLite store: deflated, as a BLOB.

A record is canonical JSON, about half of it hex digests, the rest mostly the same column
names and states record after record. It is deflated (zlib, level 3) against a preset
dictionary of those names (``audit/record_dictionary.py``): a 3-call turn's records keep about
a fifth of their bytes (a third without the dictionary), so records fit SQLite's pages
instead of spilling into overflow pages. The chain still hashes the record's text:
``record_sha256`` is over the text, never over the stored bytes, so a log is verified alike
whether its records are kept as text (PostgreSQL, whose TOAST compresses large values itself;
stores written before), deflated without a dictionary (stores written before) or with one.

A BLOB that does not inflate to UTF-8 text, names a dictionary toolloop does not know, or
would inflate past ``MAX_RECORD_BYTES`` (a larger record is kept as text), was not written by
toolloop: ``record_text`` hands it back as it is, and the check reports that record.
"""

from __future__ import annotations

import zlib
from typing import TypeVar

from toolloop_cli.audit.record_dictionary import DICTIONARIES, RECORD_DICTIONARY

__all__ = ["MAX_RECORD_BYTES", "pack_record", "record_text"]

_Value = TypeVar("_Value")

#: the largest record text kept deflated; larger ones are kept as text
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: how every zlib stream starts (its CMF byte: deflate with a 32 KiB window)
_DEFLATED = b"x"
#: the FLG bit saying a dictionary's Adler-32 follows the two header bytes (RFC 1950 §2.2)
_FDICT = 0x20
#: zlib's level: with the dictionary, about a tenth more work than level 1 without it, and a
#: third smaller (level 6 saves 7% more bytes for four times the extra work)
_LEVEL = 3


def pack_record(text: str) -> bytes | str:
    """What the store keeps of a record's text: deflated against the record dictionary,
    unless it is past the limit."""
    data = text.encode("utf-8")
    if len(data) > MAX_RECORD_BYTES:
        return text
    deflater = zlib.compressobj(
        _LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY, RECORD_DICTIONARY
    )
    return deflater.compress(data) + deflater.flush()


def record_text(value: _Value) -> _Value | str:
    """A stored record as text: inflated when kept deflated (with the dictionary its header
    names, or none), decoded when read as the bytes of a text (as
    ``service.store_parts.log_of`` reads them); anything that is not UTF-8 text, names an
    unknown dictionary, or does not inflate to it within the limit, is returned unchanged
    (the check reports it)."""
    if not isinstance(value, bytes):
        return value
    if not value.startswith(_DEFLATED):  # a record's text starts with "{", never "x"
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if len(value) > 1 and value[1] & _FDICT:
        dictionary = DICTIONARIES.get(int.from_bytes(value[2:6], "big"))
        if dictionary is None or len(value) < 6:
            return value
        inflater = zlib.decompressobj(zlib.MAX_WBITS, dictionary)
    else:
        inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(value, MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES or not inflater.eof or inflater.unused_data:
            return value
        return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError):
        return value
