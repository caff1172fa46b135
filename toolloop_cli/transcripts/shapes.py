"""The shapes recorders write a request or response in, read into status, headers and bytes.

Recordings come from several tools and several versions of each:

- a body as a plain string, as ``{string: <str or !!binary>}`` (Ruby VCR's
  ``{encoding, string}``, with its ``!binary`` tag, or ``{encoding, base64_string}``), as
  ``{type: json, content: ...}`` (pydantic-ai's newer cassettes), as null, or stored already
  parsed (``parsed_body`` beside or instead of ``body``, as pydantic-ai writes them, or a
  mapping ``body``);
- vcrpy's older httpx shape: ``{status_code, http_version, headers: {name: value}, content:
  <text>}`` for a response (vcrpy still plays those back);
- a status as an int or ``{code, message}`` (go-vcr: ``code`` beside ``status: 200 OK``, and
  the request URI under ``url``);
- header values as a list or one string, as YAML scalars (``2020-10-01`` reads as a date,
  ``236`` as an int) or as bytes (``!!binary``, as vcrpy's boto3 stub keeps them); header names
  in any case (kept lower-case), or as aiohttp's case-insensitive strings, which vcrpy's
  aiohttp stub writes with a Python tag (``CassetteLoader``).

Anything else is a ``Problem`` naming what is wrong; ``load_cassette`` adds the file and the
interaction.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import yaml

from toolloop_cli.tools import strict_yaml

__all__ = [
    "MAX_INTERACTIONS",
    "CassetteLoader",
    "TextScalarsLoader",
    "Exchange",
    "Problem",
    "body_of",
    "headers_of",
    "json_bytes",
    "status_of",
    "unbase64",
]

#: ``{type, content}`` bodies (pydantic-ai's newer cassettes) with these types.
_TYPED = frozenset({"json", "text"})

#: the tags PyYAML's full dumper gives multidict's ``istr`` (aiohttp's header names), one per
#: module it has lived in
_ISTR_TAGS = tuple(
    f"tag:yaml.org,2002:python/object/apply:{module}.istr"
    for module in ("multidict._multidict", "multidict._multidict_py", "multidict")
)


#: the most exchanges one recording may hold: each costs some kilobytes once read, so a file
#: of millions of tiny records (under the byte cap) would take gigabytes and minutes
MAX_INTERACTIONS = 50_000


class Problem(ValueError):
    """One problem inside an interaction; becomes a ``TranscriptError`` with the file name."""


@dataclass(frozen=True)
class Exchange:
    """One request and its answer as another recorder keeps them, on their way to vcrpy's
    interaction shape (``interaction``), which ``cassette`` then reads like any other."""

    method: str
    uri: str
    request_headers: dict[str, list[str]]
    request_body: str | bytes | None
    status: Any
    response_headers: dict[str, list[str]]
    response_body: str | bytes | None

    def interaction(self) -> dict[str, Any]:
        return {
            "request": {
                "method": self.method,
                "uri": self.uri,
                "headers": self.request_headers,
                "body": self.request_body,
            },
            "response": {
                "status": self.status,
                "headers": self.response_headers,
                "body": {"string": self.response_body},
            },
        }


class CassetteLoader(strict_yaml.Loader):
    """The strict safe loader, plus aiohttp's header-name strings read as the text they hold.

    Only that one class, and only in the form the dumper writes it (the call ``istr(text)``:
    a sequence of one string): no other Python tag is constructed, nothing is imported.
    """


def _istr(loader: CassetteLoader, node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode) and len(node.value) == 1:
        (arg,) = node.value
        if isinstance(arg, yaml.ScalarNode) and arg.tag == "tag:yaml.org,2002:str":
            return str(arg.value)
    raise yaml.constructor.ConstructorError(
        None, None, f"{node.tag} holds something other than one string", node.start_mark
    )


for _tag in _ISTR_TAGS:
    CassetteLoader.add_constructor(_tag, _istr)


class TextScalarsLoader(CassetteLoader):
    """Every plain scalar but ``null`` as the text it is: httpmock writes header and query
    values unquoted (``2025-03-11T16:38:02Z``, ``off``, ``1.10``), which YAML would turn into
    a date, a bool and a float, and back into other text."""


for _tag in ("bool", "int", "float", "timestamp"):
    TextScalarsLoader.add_constructor(
        f"tag:yaml.org,2002:{_tag}", TextScalarsLoader.construct_scalar
    )


def _ruby_binary(loader: CassetteLoader, node: yaml.Node) -> bytes:
    """Ruby's ``!binary`` (what Ruby VCR writes a body that is not UTF-8 as): base64, the
    same as YAML's ``!!binary``."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "!binary holds something other than base64 text", node.start_mark
        )
    return bytes(loader.construct_yaml_binary(node))


CassetteLoader.add_constructor("!binary", _ruby_binary)


def status_of(response: dict[str, Any]) -> int:
    """The HTTP status: ``status`` (an int or ``{code, message}``), else vcrpy's older
    ``status_code``; go-vcr writes ``code: 200`` beside ``status: 200 OK``."""
    node = response["status"] if "status" in response else response.get("status_code")
    if isinstance(node, str) and "code" in response:
        node = response["code"]
    code = node.get("code") if isinstance(node, dict) else node
    line = code.strip() if isinstance(code, str) else ""
    if line[:3].isdigit() and line[3:4] in ("", " "):
        code = int(line[:3])  # "200", or a status line's "200 OK"
    if not isinstance(code, int) or isinstance(code, bool):
        raise Problem("response has no HTTP status code (an int or {code, message})")
    if not 100 <= code <= 599:
        raise Problem(f"response status {code} is not an HTTP status code (100-599)")
    return code


def headers_of(node: Any, where: str) -> dict[str, list[str]]:
    """Headers as lower-case names, each with its list of text values."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise Problem(f"{where} 'headers' is not a mapping")
    headers: dict[str, list[str]] = {}
    for name, value in node.items():
        values = value if isinstance(value, list) else [] if value is None else [value]
        try:
            headers.setdefault(str(name).lower(), []).extend(_scalar(v) for v in values)
        except TypeError:
            raise Problem(f"{where} header {name!r} has a non-scalar value") from None
    return headers


def _scalar(value: Any) -> str:
    """A YAML scalar as header text; bytes as UTF-8, else as HTTP's Latin-1."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | dt.date):
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")
    raise TypeError(type(value).__name__)


def body_of(node: dict[str, Any], where: str) -> bytes | None:
    """Body bytes from ``body`` (any variant), else vcrpy's older httpx ``content`` text, else
    ``parsed_body``."""
    body = node.get("body")
    if body is None:
        content = node.get("content")
        if isinstance(content, str):
            return content.encode("utf-8")
        if content is not None:
            raise Problem(f"{where} 'content' is not text")
        return json_bytes(node["parsed_body"], where) if "parsed_body" in node else None
    if node.get("binary") is True and isinstance(body, str):
        return _exvcr_binary(body, where)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes):
        return body
    if isinstance(body, dict) and "base64_string" in body and "string" not in body:
        return _base64(body["base64_string"], where)
    if isinstance(body, dict) and "string" in body:
        text = body["string"]
        if text is None or isinstance(text, bytes):
            return text
        if isinstance(text, str):
            return text.encode("utf-8")
        raise Problem(f"{where} body 'string' is not text or !!binary")
    if isinstance(body, dict) and set(body) == {"type", "content"} and body["type"] in _TYPED:
        content = body["content"]
        return content.encode("utf-8") if isinstance(content, str) else json_bytes(content, where)
    if isinstance(body, dict | list):
        return json_bytes(body, where)
    raise Problem(f"{where} 'body' is not a string, a mapping or null")


#: how Erlang's external term format writes a binary: version 131, BINARY_EXT, 4-byte length
_ERLANG_BINARY = b"\x83m"


def _exvcr_binary(text: str, where: str) -> bytes:
    """ExVCR's body that is not UTF-8 (``"binary": true``): the base64 of the body as
    ``:erlang.term_to_binary`` writes a binary (``83 6d``, a big-endian length, the bytes)."""
    try:
        term = unbase64(text)
    except binascii.Error as exc:
        raise Problem(f"{where} binary body is not base64: {exc}") from None
    size = int.from_bytes(term[2:6], "big")
    if not term.startswith(_ERLANG_BINARY) or len(term) != 6 + size:
        raise Problem(
            f"{where} binary body is not an Erlang binary term (83 6d, a length, the bytes)"
        )
    return term[6:]


def _base64(text: Any, where: str) -> bytes:
    """Ruby VCR's ``base64_string`` (its exact-bytes option): the body, base64-encoded."""
    if not isinstance(text, str):
        raise Problem(f"{where} body 'base64_string' is not text")
    try:
        return unbase64(text)
    except binascii.Error as exc:
        raise Problem(f"{where} body 'base64_string' is not base64: {exc}") from None


def unbase64(text: str | bytes) -> bytes:
    """Base64 as recorders wrap it (line breaks anywhere); any other character, non-ASCII
    included, is a ``binascii.Error``."""
    if isinstance(text, str):
        try:
            text = text.encode("ascii")
        except UnicodeEncodeError:
            raise binascii.Error("not ASCII") from None
    return base64.b64decode(b"".join(text.split()), validate=True)


def json_bytes(value: Any, where: str) -> bytes:
    """A body a recorder kept parsed, written back as compact JSON (a date YAML read as one
    becomes its ISO text)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    except (TypeError, ValueError) as exc:
        raise Problem(f"{where} parsed body is not JSON: {exc}") from None
    return text.encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
