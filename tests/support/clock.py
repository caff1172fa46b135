"""A clock tests move by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.moment = start or datetime(2026, 12, 1, 10, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)
