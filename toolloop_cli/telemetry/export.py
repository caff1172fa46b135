"""Send span data through the OpenTelemetry SDK's OTLP/HTTP (protobuf) exporter.

The SDK is the optional ``otel`` extra and is imported only here, only when an export is
asked for, so ``toolloop --help`` and untraced runs never load it. The spans are finished
``ReadableSpan`` objects with the ids and store timestamps of ``spans.py``; the exporter
sends them in one request (headers, timeout, compression and certificates from the usual
``OTEL_EXPORTER_OTLP_*`` variables).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from toolloop_cli import __version__
from toolloop_cli.errors import ExportFailed, UsageError

from .model import SCHEMA_URL, Span

__all__ = ["ExportFailed", "require_sdk", "send", "traces_endpoint"]

INSTALL_HINT = "pip install 'toolloop[otel]'"
DEFAULT_ENDPOINT = "http://localhost:4318"
TRACES_PATH = "/v1/traces"
#: One request carries at most this many spans (the SDK batch processor's default) and about
#: this much attribute text (content can be large; the exporter refuses requests over 64 MiB).
BATCH_SPANS = 512
BATCH_BYTES = 4 * 1024 * 1024
_SDK_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def require_sdk() -> None:
    """Fail with one clear line when the ``otel`` extra is not installed."""
    try:
        for module in _SDK_MODULES:
            importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(
            f"OpenTelemetry export needs the otel extra ({exc}): {INSTALL_HINT}"
        ) from None


def traces_endpoint(endpoint: str | None) -> str:
    """The OTLP/HTTP traces URL: a given base URL (or full traces URL), else the environment.

    As the OTLP exporter specification says: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used
    as it is, ``OTEL_EXPORTER_OTLP_ENDPOINT`` is a base URL that gets ``/v1/traces``.
    """
    if endpoint:
        return _with_traces_path(_checked(endpoint, "--otel / --endpoint"))
    signal = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if signal:
        return _checked(signal, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return _with_traces_path(_checked(base or DEFAULT_ENDPOINT, "OTEL_EXPORTER_OTLP_ENDPOINT"))


def _checked(url: str, origin: str) -> str:
    """An OTLP/HTTP endpoint is an http(s) URL with a host; anything else is refused here."""
    try:
        parts = urlsplit(url.strip())
        host, _ = parts.hostname, parts.port  # a bracket left open, a port that is no number
    except ValueError:
        host = None
    if host is None or parts.scheme not in ("http", "https"):
        raise UsageError(f"{origin}: {url!r} is not an http:// or https:// URL")
    return url


def _with_traces_path(url: str) -> str:
    url = url.strip()
    if url.rstrip("/").endswith(TRACES_PATH):
        return url
    return url.rstrip("/") + TRACES_PATH


def send(spans: Sequence[Span], endpoint: str) -> None:
    """Export ``spans`` in one OTLP/HTTP request; raise ``ExportFailed`` if it was not taken."""
    if not spans:
        return
    require_sdk()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    readable = _readable(spans)
    sent = 0
    with _captured("opentelemetry") as problems:
        exporter = OTLPSpanExporter(endpoint=endpoint)
        try:
            if problems:  # e.g. a malformed OTEL_EXPORTER_OTLP_HEADERS: not sent without it
                raise ExportFailed(f"OpenTelemetry export to {endpoint} not sent: {problems[0]}")
            for batch in _batches(spans, readable):
                if exporter.export(batch) is not SpanExportResult.SUCCESS:
                    why = problems[-1] if problems else "the exporter reported a failure"
                    done = f" ({sent} of {len(spans)} spans were sent)" if sent else ""
                    raise ExportFailed(f"OpenTelemetry export to {endpoint} failed: {why}{done}")
                sent += len(batch)
        finally:
            exporter.shutdown()  # type: ignore[no-untyped-call]


def _batches(spans: Sequence[Span], readable: list[Any]) -> Iterator[list[Any]]:
    """Requests of at most ``BATCH_SPANS`` spans and about ``BATCH_BYTES`` of attributes."""
    batch: list[Any] = []
    size = 0
    for span, ready in zip(spans, readable, strict=True):
        weight = sum(len(str(v)) for v in span.attributes.values())
        if batch and (len(batch) >= BATCH_SPANS or size + weight > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(ready)
        size += weight
    if batch:
        yield batch


def _readable(spans: Sequence[Span]) -> list[Any]:
    from opentelemetry import trace
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    limits = SpanLimits()  # OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT and the other limits

    def bounded(attributes: dict[str, Any], count: int | None) -> Any:
        return BoundedAttributes(count, attributes, max_value_len=limits.max_span_attribute_length)

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "toolloop"}))
    scope = InstrumentationScope("toolloop", __version__, SCHEMA_URL)
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED)

    def context(trace_id: int, span_id: int) -> trace.SpanContext:
        return trace.SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags)

    kinds = {"INTERNAL": trace.SpanKind.INTERNAL, "CLIENT": trace.SpanKind.CLIENT}
    codes = {
        "UNSET": trace.StatusCode.UNSET,
        "OK": trace.StatusCode.OK,
        "ERROR": trace.StatusCode.ERROR,
    }
    out = []
    for s in spans:
        # the SDK keeps a description only with ERROR (the specification's rule)
        status = trace.Status(codes[s.status], s.description if s.status == "ERROR" else None)
        out.append(
            ReadableSpan(
                name=s.name,
                context=context(s.trace_id, s.span_id),
                parent=context(s.trace_id, s.parent_id) if s.parent_id is not None else None,
                resource=resource,
                attributes=bounded(s.attributes, limits.max_span_attributes),
                events=[
                    Event(e.name, bounded(e.attributes, limits.max_event_attributes), e.time_ns)
                    for e in s.events
                ],
                links=[
                    trace.Link(
                        context(link.trace_id, link.span_id),
                        bounded(link.attributes, limits.max_link_attributes),
                    )
                    for link in s.links
                ],
                kind=kinds[s.kind],
                status=status,
                start_time=s.start_ns,
                end_time=s.end_ns,
                instrumentation_scope=scope,
            )
        )
    return out


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(" ".join(record.getMessage().split()))


@contextmanager
def _captured(name: str) -> Iterator[list[str]]:
    """Keep the SDK's log lines (retries, errors) out of the terminal; report them as one."""
    logger = logging.getLogger(name)
    handler = _Collect()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
