"""Where an operation's model turns come from: a transcript, a live provider, or a replay.

``Source`` is a union discriminated on ``kind``, so code that builds an operation's transport
matches on it and the type checker sees every kind handled.

How the store keeps it is fixed by the audit log: the ``transport`` column holds the kind and
``source_json`` the other fields, exactly as stores have always held them (no ``kind`` key,
unset fields left out). Both columns are fixed at insert and every write of an operation is
audited column by column, so a different shape would read as a rewrite of every operation
ever stored. ``stored`` and ``parse_source`` are that mapping, both ways, byte for byte.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .types import JSONObject

__all__ = [
    "LiveSource",
    "ReplaySource",
    "Source",
    "TranscriptSource",
    "parse_source",
]


class _Source(BaseModel):
    # strict: a stored value is taken as it is or refused, never coerced (1 is not True)
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def stored(self) -> JSONObject:
        """The ``source_json`` object: every field but ``kind``, those not set left out."""
        dumped = self.model_dump(exclude={"kind"})
        return {key: value for key, value in dumped.items() if value is not None}


class TranscriptSource(_Source):
    """Model turns played back from a cassette (``run --transcript``)."""

    kind: Literal["transcript"] = "transcript"
    #: the cassette, resolved
    transcript: str
    #: ``--record``: the cassette every exchange is appended to
    record: str | None = None
    #: the model's price (``{"model", ...per-token rates}``) when one was known
    price: JSONObject | None = None


class LiveSource(_Source):
    """Model turns from a provider over the network; ``scripted`` is the scripted model,
    whose transport is always handed in (tests, demos, benchmarks)."""

    kind: Literal["live", "scripted"] = "live"
    #: the provider's base URL with any ``user:password@`` scrubbed
    base_url: str
    record: str | None = None
    price: JSONObject | None = None


class ReplaySource(_Source):
    """One conversation of a cassette replayed by ``toolloop replay``."""

    kind: Literal["replay"] = "replay"
    #: the cassette, resolved
    replay: str
    #: which conversation of the cassette (0-based) and its interactions' indices
    conversation: int
    interactions: list[int]
    #: ``live``: the registry's handlers run; ``recorded``: results come from the recording
    results: Literal["live", "recorded"]
    #: ``registry``: its tools and policy; ``recorded``: the tools the recording declared
    tools: Literal["registry", "recorded"]
    strict_requests: bool
    #: the fresh data folder the handlers of a ``live`` replay run in
    data_dir: str | None = None


Source = Annotated[TranscriptSource | LiveSource | ReplaySource, Field(discriminator="kind")]

_SOURCE: TypeAdapter[TranscriptSource | LiveSource | ReplaySource] = TypeAdapter(Source)


def parse_source(kind: str, stored: Any) -> TranscriptSource | LiveSource | ReplaySource:
    """The source a stored ``transport`` (the kind) and ``source_json`` object describe.

    Raises ``ValueError`` for one that toolloop does not write (the store calls it tampered).
    """
    if not isinstance(stored, dict) or "kind" in stored:
        raise ValueError(f"source_json is not the object a {kind!r} operation stores")
    try:
        source = _SOURCE.validate_python({**stored, "kind": kind})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "source"
        raise ValueError(f"source {where}: {first['msg']}") from None
    if source.stored() != stored:  # a null where toolloop leaves a field out
        raise ValueError("source_json holds a null toolloop never writes")
    for field in _PATHS:
        if "\x00" in (getattr(source, field, None) or ""):
            raise ValueError(f"source {field}: a path with a NUL byte, which no file has")
    return source


#: the fields that name files (resolved paths toolloop opens again)
_PATHS = ("transcript", "record", "replay", "data_dir")
