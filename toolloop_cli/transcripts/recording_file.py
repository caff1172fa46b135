"""From a recording's file to one document: which container it is, read within bounds.

A recording may be gzip-compressed (LangChain's ``.yaml.gz``; its first serializer wrote the
gzip data as base64 text), a Go httprr trace (raw HTTP, ``httprr.py``), JSON (read as strict
JSON, so its values stay exact), a YAML document, or a YAML stream of documents (httpmock).
Each is read under the byte cap the caller gives, decompressed a piece at a time, and every
problem is one ``TranscriptError`` naming the file. Which recorder laid the document out is
``layouts.py``'s question.
"""

from __future__ import annotations

import binascii
import json
import zlib
from pathlib import Path
from typing import Any

import yaml

from toolloop_cli.errors import TranscriptError
from toolloop_cli.strict_json import DuplicateKeyError, TooDeepError, strict_loads
from toolloop_cli.tools import strict_yaml

from .encoded import GZIP_MAGIC, Oversized, decompress
from .httpmock import is_httpmock
from .httprr import HTTPRR_MAGIC, httprr_interactions
from .layouts import stream_exchanges
from .shapes import CassetteLoader, Problem, TextScalarsLoader, unbase64

__all__ = ["read_document"]


def read_document(name: str, max_bytes: int) -> Any:
    """The recording at ``name`` as one document (a trace or a stream of documents comes back
    as ``{"interactions": [...]}``); any problem is one ``TranscriptError`` naming the file."""
    try:
        data = strict_yaml.read_capped_bytes(Path(name), max_bytes)
        if data.startswith(_GZIP_BASE64):
            data = _unwrapped(data, name)
        if data.startswith(GZIP_MAGIC):
            data = _gunzipped(data, name, max_bytes)
        if data.startswith(HTTPRR_MAGIC):
            return {"interactions": _httprr(data, name)}
        if data.startswith(HTTPRR_MAGIC.replace(b"\n", b"\r\n")):
            raise TranscriptError(
                f"transcript {name}: an httprr trace whose lines end in CRLF (a checkout that"
                " rewrote line ends?): its byte counts no longer fit, so it cannot be read"
            )
        text = data.decode("utf-8").removeprefix("\ufeff")  # a BOM says nothing of the content
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or over the size limit
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TranscriptError(f"transcript {name}: cannot read: {reason}") from exc
    json_document = _as_json(name, text)
    if json_document is not None:
        return json_document
    try:
        # a key recorded twice with one value means one thing (vcrpy reads the last of any)
        document, problems = strict_yaml.load(text, CassetteLoader, same_value_repeats=True)
    except yaml.composer.ComposerError as exc:
        if "another document" not in str(exc.problem):
            raise _not_yaml(name, exc) from exc
        return _documents(name, text)
    except yaml.YAMLError as exc:
        raise _not_yaml(name, exc) from exc
    if problems:
        where, problem = problems[0]
        raise TranscriptError(f"transcript {name}: {where or '<document>'}: {problem}")
    if is_httpmock([document]):  # its values as the text they are: read again
        document = strict_yaml.load(text, TextScalarsLoader, same_value_repeats=True)[0]
    return document


def _not_yaml(name: str, exc: yaml.YAMLError) -> TranscriptError:
    return TranscriptError(f"transcript {name}: not valid YAML{strict_yaml.describe(exc)}")


def _documents(name: str, text: str) -> dict[str, Any]:
    """A YAML stream of several documents: an httpmock recording, one exchange each."""
    try:
        documents, problems = strict_yaml.load_all(text, TextScalarsLoader, same_value_repeats=True)
    except yaml.YAMLError as exc:
        raise _not_yaml(name, exc) from exc
    if problems:
        where, problem = problems[0]
        raise TranscriptError(f"transcript {name}: document {where}: {problem}")
    try:
        return {"interactions": stream_exchanges(documents)}
    except Problem as exc:
        raise TranscriptError(f"transcript {name}: {exc}") from None


def _as_json(name: str, text: str) -> dict[str, Any] | list[Any] | None:
    """A cassette written as JSON (a HAR file, vcrpy's JSON serializer, a nock list), read as
    JSON: YAML reads most JSON, but not a character outside the BMP escaped as a surrogate
    pair (``\\ud83d\\ude00``, what ``json.dumps`` writes for an emoji), and it would read
    ``1e-7`` as text. None when the text is no JSON (YAML then reads it, or says what is
    wrong), repeats a key (YAML reads a key written twice with one value) or nests deeper
    than strict JSON goes (YAML's own limit applies). JSON that is well-formed but holds what
    has no exact value (NaN, a number out of range, a 5,000-digit integer, a lone surrogate)
    is refused: YAML would read those tokens as text."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = strict_loads(text)
    except (json.JSONDecodeError, DuplicateKeyError, TooDeepError):
        return None
    except RecursionError:
        raise TranscriptError(
            f"transcript {name}: JSON nested deeper than {strict_yaml.MAX_DEPTH} levels"
        ) from None
    except ValueError as exc:
        reason = str(exc).split(";")[0]
        raise TranscriptError(
            f"transcript {name}: JSON that cannot be read exactly: {reason}"
        ) from None
    return value if isinstance(value, dict | list) else None


#: how gzip data starts once written as base64 (``1f 8b 08``): LangChain's first ``.yaml.gz``
#: serializer wrote the compressed cassette as base64 text
_GZIP_BASE64 = b"H4sI"


def _unwrapped(data: bytes, name: str) -> bytes:
    """A base64-wrapped gzip cassette file, unwrapped (every character must be base64)."""
    try:
        return unbase64(data)
    except binascii.Error as exc:
        raise TranscriptError(
            f"transcript {name}: base64-wrapped gzip is not base64: {exc}"
        ) from None


def _httprr(data: bytes, name: str) -> list[dict[str, Any]]:
    """A Go httprr trace's records as interactions."""
    try:
        return httprr_interactions(data)
    except Problem as exc:
        raise TranscriptError(f"transcript {name}: {exc}") from None


def _gunzipped(data: bytes, name: str, max_bytes: int) -> bytes:
    """A gzip-compressed cassette file, decompressed, never past ``max_bytes``."""
    try:
        return decompress(data, zlib.MAX_WBITS | 16, max_bytes, members=True)
    except Oversized:
        raise TranscriptError(
            f"transcript {name}: decompresses to more than {max_bytes} bytes"
        ) from None
    except zlib.error as exc:
        raise TranscriptError(f"transcript {name}: gzip data does not decompress: {exc}") from None
