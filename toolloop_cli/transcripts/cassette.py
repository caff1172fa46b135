"""Cassettes: the YAML recordings vcrpy and pytest-recording write, read and written here.

Shape (``version: 1``)::

    interactions:
    - request:  {method, uri, headers: {name: [value]}, body: <str> | null}
      response: {status: {code, message}, headers: {name: [value]}, body: {string: <str>}}

A file is read into one document by ``recording_file.py`` (gzip, httprr traces, JSON, YAML,
YAML streams); the layouts of other recorders (Ruby's VCR, php-vcr, LangChain, HAR,
test-proxy session records, nock, httpmock) are told apart by ``layouts.py``, and the body,
status and header shapes they write are read by ``shapes.py``. Bodies are kept as bytes:
what was on the wire.

Every problem is a ``TranscriptError`` with one line naming the file, never a traceback. A
cassette is untrusted input: files over ``MAX_CASSETTE_BYTES`` are refused unread (and so is
one that decompresses to more), YAML aliases and keys repeated with another value are refused
(``strict_yaml``), and a compressed body is inflated a piece at a time, refused once it passes
``MAX_BODY_BYTES``, the cap of a live answer (``encoded.py``).
``dump_cassette`` writes the vcrpy shape atomically and always scrubs secret headers, and
credentials in URIs (``user:password@`` and ``?key=``-style parameters).
"""

from __future__ import annotations

import http
import json
import os
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import yaml

from toolloop_cli.errors import NestedTooDeep, TranscriptError
from toolloop_cli.strict_json import MAX_DEPTH, deeper_than

from .detect import answered_api, detect_api
from .encoded import GZIP_MAGIC, decoded
from .layouts import recorded_exchanges
from .recording_file import read_document
from .shapes import (
    MAX_INTERACTIONS,
    Problem,
    body_of,
    headers_of,
    status_of,
)

__all__ = [
    "GZIP_MAGIC",
    "MAX_CASSETTE_BYTES",
    "SCRUBBED",
    "SECRET_HEADERS",
    "Cassette",
    "Interaction",
    "NestedTooDeep",
    "RecordedRequest",
    "RecordedResponse",
    "dump_cassette",
    "load_cassette",
    "scrub_headers",
    "scrub_uri",
]

SCRUBBED = "<scrubbed>"
#: Header names (lower-case) whose values never reach a recording.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "openai-organization",
        "openai-project",
        "cookie",
        "set-cookie",
        "proxy-authorization",
    }
)
#: Query parameters (lower-case) that carry credentials: Gemini's ``?key=``, OAuth's
#: ``access_token``, and the names proxies commonly use.
SECRET_QUERY = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})
#: The largest cassette file read (checked before parsing); a recording of 10,000 turns is
#: tens of MiB, and parsing costs a few times the file in memory.
MAX_CASSETTE_BYTES = 256 * 1024 * 1024

_DumperBase: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_DumperBase):  # type: ignore[misc]
    """Never writes an anchor or alias, since ``load_cassette`` refuses them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass(frozen=True)
class RecordedRequest:
    """A request as recorded; ``body`` is ``None`` when none was sent."""

    method: str
    uri: str
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes | None = None

    def json(self) -> Any:
        """The body as JSON (``None`` without a body); a non-JSON body is a ``TranscriptError``,
        one nested deeper than toolloop reads any provider JSON a ``NestedTooDeep``."""
        if self.body is None:
            return None
        try:
            value = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            where = scrub_uri(self.uri)
            raise TranscriptError(f"recorded request to {where} has no JSON body") from exc
        except RecursionError:  # deeper than the decoder goes: deeper than MAX_DEPTH too
            raise self._too_deep() from None
        if deeper_than(value):
            raise self._too_deep()
        return value

    def _too_deep(self) -> NestedTooDeep:
        where = scrub_uri(self.uri)
        return NestedTooDeep(
            f"recorded request to {where} nests JSON deeper than {MAX_DEPTH} levels"
        )


@dataclass(frozen=True)
class RecordedResponse:
    """A response as recorded."""

    status: int
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class Interaction:
    """One request and its answer; ``api`` is ``(provider, api_family)`` (``Interaction.of``)."""

    request: RecordedRequest
    response: RecordedResponse
    api: tuple[str, str] | None

    @classmethod
    def of(cls, request: RecordedRequest, response: RecordedResponse) -> Interaction:
        """An interaction whose ``api`` is detected from the request URI (or, when a recorder
        blanked the URI, from the request and its answer: ``detect.answered_api``)."""
        api = detect_api(request.uri) or answered_api(
            request.method, request.uri, request.body, response.body
        )
        return cls(request, response, api)


@dataclass
class Cassette:
    """A loaded recording: its interactions in order, and its other top-level keys."""

    path: str
    interactions: list[Interaction]
    metadata: dict[str, Any] = field(default_factory=dict)


def load_cassette(path: str | os.PathLike[str]) -> Cassette:
    """Read a cassette file; any problem is one ``TranscriptError`` line naming the file."""
    name = os.fspath(path)
    return _cassette(name, read_document(name, MAX_CASSETTE_BYTES))


def _cassette(name: str, document: Any) -> Cassette:
    try:
        raw, metadata = recorded_exchanges(document)
    except Problem as exc:
        raise TranscriptError(f"transcript {name}: {exc}") from None
    if len(raw) > MAX_INTERACTIONS:
        raise TranscriptError(
            f"transcript {name}: {len(raw):,} interactions, more than the {MAX_INTERACTIONS:,}"
            " one replay reads"
        )
    interactions: list[Interaction] = []
    for index, node in enumerate(raw):
        try:
            interactions.append(_interaction(node))
        except Problem as exc:
            raise TranscriptError(f"transcript {name}: interaction {index}: {exc}") from None
    if not any(item.api is not None for item in interactions):
        raise TranscriptError(
            f"transcript {name}: no interaction with a known provider API URI"
            f"{_endpoints_seen(interactions)}; toolloop reads POST requests to OpenAI "
            "/v1/responses, Anthropic /v1/messages, Gemini :generateContent, "
            ":streamGenerateContent and /interactions"
            f"{_blanked_note(interactions)}"
        )
    return Cassette(path=name, interactions=interactions, metadata=metadata)


def _blanked_note(interactions: list[Interaction]) -> str:
    """What toolloop can still tell when a recorder wrote a placeholder over the URIs."""
    if not any("/" not in item.request.uri for item in interactions):
        return ""
    return (
        "; a URI with no path (a recorder blanked it) is known only by an OpenAI Responses or"
        " Anthropic Messages answer to a POST"
    )


def _endpoints_seen(interactions: list[Interaction], most: int = 3) -> str:
    """`` (it holds: POST /v1/chat/completions ×2, …)``: the paths, never hosts or queries
    (they may carry credentials), most frequent first."""
    if not interactions:
        return " (it holds no interaction)"

    def endpoint(item: Interaction) -> str:
        path = urlsplit(item.request.uri).path or "/"
        # a long path keeps its end, where the method (``:rawPredict``) says what it is
        return f"{item.request.method} {path if len(path) <= 80 else path[:40] + '…' + path[-39:]}"

    ranked = Counter(map(endpoint, interactions)).most_common()
    shown = [f"{key} ×{count}" if count > 1 else key for key, count in ranked[:most]]
    more = f", and {len(ranked) - most} other(s)" if len(ranked) > most else ""
    return f" (it holds: {', '.join(shown)}{more})"


def _interaction(node: Any) -> Interaction:
    if not isinstance(node, dict):
        raise Problem("not a mapping")
    request, response = node.get("request"), node.get("response")
    if not isinstance(request, dict):
        raise Problem("no 'request' mapping")
    if not isinstance(response, dict):
        raise Problem("no 'response' mapping")
    uri = request.get("uri", request.get("url"))  # ``url``: Go's go-vcr
    if not isinstance(uri, str) or not uri:
        raise Problem("request has no 'uri'")
    method = request.get("method", "POST")
    if not isinstance(method, str):
        raise Problem("request 'method' is not a string")
    request_headers, request_body = decoded(
        headers_of(request.get("headers"), "request"), body_of(request, "request"), "request"
    )
    recorded_request = RecordedRequest(
        method=method.upper(), uri=uri, headers=request_headers, body=request_body
    )
    response_headers, response_body = decoded(
        headers_of(response.get("headers"), "response"), body_of(response, "response"), "response"
    )
    recorded_response = RecordedResponse(
        status=status_of(response), headers=response_headers, body=response_body or b""
    )
    return Interaction.of(recorded_request, recorded_response)


def scrub_headers(headers: Mapping[str, list[str] | str]) -> dict[str, list[str]]:
    """Lower-cased headers with every secret value replaced by ``<scrubbed>``."""
    scrubbed: dict[str, list[str]] = {}
    for name, value in headers.items():
        key = name.lower()
        values = [value] if isinstance(value, str) else list(value)
        scrubbed[key] = [SCRUBBED] * len(values) if key in SECRET_HEADERS else values
    return scrubbed


def scrub_uri(uri: str) -> str:
    """The URI with credentials replaced by ``<scrubbed>``: ``user:password@`` and
    credential query parameters (``?key=``, ``access_token=``, see ``SECRET_QUERY``)."""
    parts = urlsplit(uri)
    if "@" in parts.netloc:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{quote(SCRUBBED, safe='')}@{host}")
    pairs = parse_qsl(parts.query, keep_blank_values=True) if parts.query else []
    if any(k.lower() in SECRET_QUERY for k, _ in pairs):
        query = urlencode([(k, SCRUBBED if k.lower() in SECRET_QUERY else v) for k, v in pairs])
        parts = parts._replace(query=query)
    scrubbed = urlunsplit(parts)
    return uri if scrubbed == urlunsplit(urlsplit(uri)) else scrubbed


def dump_cassette(cassette: Cassette | Iterable[Interaction], path: str | os.PathLike[str]) -> None:
    """Write interactions in the vcrpy shape, secrets scrubbed, atomically (tmp + rename)."""
    if isinstance(cassette, Cassette):
        interactions, metadata = cassette.interactions, dict(cassette.metadata)
    else:
        interactions, metadata = list(cassette), {}
    document = {
        **metadata,
        "interactions": [_dump_interaction(item) for item in interactions],
        "version": 1,
    }
    text = yaml.dump(document, Dumper=_Dumper, sort_keys=True, allow_unicode=True, width=1 << 30)
    target = Path(os.fspath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    # 0o666 less the umask, as for any new file (the kernel applies the umask); a file being
    # replaced keeps its own mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if target.exists():
                os.fchmod(handle.fileno(), target.stat().st_mode & 0o777)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _dump_interaction(item: Interaction) -> dict[str, Any]:
    request, response = item.request, item.response
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    return {
        "request": {
            "body": None if request.body is None else _text_or_bytes(request.body),
            "headers": scrub_headers(request.headers),
            "method": request.method,
            "uri": scrub_uri(request.uri),
        },
        "response": {
            "body": {"string": _text_or_bytes(response.body)},
            "headers": scrub_headers(response.headers),
            "status": {"code": response.status, "message": phrase},
        },
    }


def _text_or_bytes(body: bytes) -> str | bytes:
    """Text when the body is UTF-8 (readable in the file), else bytes (written as !!binary)."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body
