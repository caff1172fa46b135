"""The records spans are built from, the span data the exporter needs, and the ids.

Plain values only (no OpenTelemetry, no store): ``history.py`` reads a ``History`` from the
store, ``spans.py`` turns it into ``Span`` values, ``export.py`` into the SDK's spans.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from toolloop_cli.engine.records import ApprovalRecord, CallRecord, OperationRecord, TurnRecord

__all__ = ["SCHEMA_URL", "Attributes", "Event", "History", "Link", "Span", "span_id", "trace_id"]

#: The semantic conventions release these spans follow (the last one that held GenAI).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"

AttrValue = str | bool | int | float | tuple[str, ...]
Attributes = dict[str, AttrValue]


@dataclass(frozen=True)
class Event:
    name: str
    time_ns: int
    attributes: Attributes


@dataclass(frozen=True)
class Link:
    trace_id: int
    span_id: int
    attributes: Attributes


@dataclass(frozen=True)
class Span:
    """What an exporter needs of one finished span."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: str  # INTERNAL | CLIENT
    start_ns: int
    end_ns: int
    attributes: Attributes
    status: str = "UNSET"  # UNSET | OK | ERROR
    description: str | None = None
    events: tuple[Event, ...] = ()
    links: tuple[Link, ...] = ()


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(("toolloop", *parts)).encode("utf-8")).digest()


def trace_id(operation_id: str) -> int:
    """The operation's trace id: 128 bits of SHA-256 over its id (never 0)."""
    return int.from_bytes(_digest("trace", operation_id)[:16], "big") or 1


def span_id(operation_id: str, *parts: str) -> int:
    """A span id: 64 bits of SHA-256 over the operation id and the span's own key."""
    return int.from_bytes(_digest("span", operation_id, *parts)[:8], "big") or 1


@dataclass(frozen=True)
class History:
    """One operation's records, in the store's order."""

    operation: OperationRecord
    turns: list[TurnRecord]
    calls: list[CallRecord]
    approvals: list[ApprovalRecord]
    #: the transition log: dicts with kind, call_id, source, target, reason, at
    transitions: list[dict[str, Any]]
    #: turn index -> the model named in the provider's answer (absent when it names none)
    response_models: dict[int, str] = field(default_factory=dict)
