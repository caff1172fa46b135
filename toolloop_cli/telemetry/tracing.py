"""The library API of the OpenTelemetry export: what to export, and exporting it.

One code path for live and after-the-fact export: a command notes how many segments of an
operation had closed before it ran (``closed_segments``), runs, and exports the segments that
closed since, from what the store committed (``export``). ``export-otel`` exports every
closed segment. A long-running worker does the same per operation it steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolloop_cli.errors import UsageError
from toolloop_cli.store import Store

from .export import require_sdk, send, traces_endpoint
from .history import read_history
from .model import Span, trace_id
from .segments import place
from .spans import build_spans

__all__ = ["Exported", "Target", "closed_segments", "export", "export_target", "target"]

#: Variables that turn tracing on for run / resume / step / approve --resume / replay.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass(frozen=True)
class Target:
    """Where spans go (the full OTLP/HTTP traces URL) and whether content goes with them."""

    endpoint: str
    content: bool = False


@dataclass(frozen=True)
class Exported:
    """What one export sent of one operation."""

    operation_id: str
    trace_id: str  # 32 hex digits, as backends show it
    spans: int
    segments: int  # closed segments in the store
    running: bool  # a segment is still open: it is exported when it closes

    def as_json(self) -> dict[str, object]:
        return {
            "operation_id": self.operation_id,
            "trace_id": self.trace_id,
            "spans": self.spans,
            "segments": self.segments,
            "running": self.running,
        }


def target(
    endpoint: str | None, content: bool = False, *, environ: Mapping[str, str] | None = None
) -> Target | None:
    """The target a flag or the environment asks for; None when tracing is off.

    Checks that the ``otel`` extra is installed, so a command fails before it runs anything.
    """
    env = os.environ if environ is None else environ
    if not endpoint and not any(env.get(v, "").strip() for v in ENDPOINT_VARIABLES):
        if content:
            raise UsageError(
                "--otel-content needs an endpoint: --otel URL or OTEL_EXPORTER_OTLP_ENDPOINT"
            )
        return None
    return export_target(endpoint, content)


def export_target(endpoint: str | None, content: bool = False) -> Target:
    """The target of ``export-otel``: the flag, the environment, else the OTLP default."""
    require_sdk()
    return Target(traces_endpoint(endpoint), content)


def closed_segments(store: Store, operation_id: str) -> int:
    """How many segments of the operation have closed so far (0 for an unknown one)."""
    return len(place(store.transitions(operation_id), (), ()).segments)


def spans_of(
    store: Store, operation_id: str, since: int = 0, content: bool = False
) -> tuple[list[Span], Exported]:
    """The spans of the segments that closed from index ``since`` on."""
    history = read_history(store, operation_id)
    spans = build_spans(history, since=since, content=content)
    placement = place(history.transitions, (), ())
    report = Exported(
        operation_id=operation_id,
        trace_id=f"{trace_id(operation_id):032x}",
        spans=len(spans),
        segments=len(placement.segments),
        running=placement.open_from is not None,
    )
    return spans, report


def export(store: Store, operations: Sequence[tuple[str, int]], to: Target) -> list[Exported]:
    """Export, in one request, each ``(operation id, since)`` pair's newly closed segments."""
    spans: list[Span] = []
    reports: list[Exported] = []
    for operation_id, since in operations:
        found, report = spans_of(store, operation_id, since, to.content)
        spans.extend(found)
        reports.append(report)
    send(spans, to.endpoint)
    return reports
