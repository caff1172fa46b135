"""Transcripts: vcrpy-format cassettes, provider detection from URIs, and replay."""

from __future__ import annotations

from .cassette import (
    SCRUBBED,
    SECRET_HEADERS,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
    load_cassette,
    scrub_headers,
    scrub_uri,
)
from .detect import detect_api
from .transport import ReplayTransport, cassette_api

__all__ = [
    "SCRUBBED",
    "SECRET_HEADERS",
    "Cassette",
    "Interaction",
    "RecordedRequest",
    "RecordedResponse",
    "ReplayTransport",
    "cassette_api",
    "detect_api",
    "dump_cassette",
    "load_cassette",
    "scrub_headers",
    "scrub_uri",
]
