"""Time as the engine sees it: an injectable clock and one timestamp format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """A sortable UTC timestamp: ``2026-12-01T10:00:00.000000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    """The inverse of ``iso``."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def later(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)
