"""Time as the engine sees it: an injectable clock and one timestamp format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

#: the longest span added to a moment (an operation's deadline, an approval's lifetime):
#: 10 years, far inside what a timestamp can hold (year 9999), so no sum overflows
MAX_SPAN_S = 10 * 365 * 86_400


def iso(moment: datetime) -> str:
    """A sortable UTC timestamp: ``2026-12-01T10:00:00.000000Z``."""
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    if utc.year < 1000:  # isoformat pads the year; keep strftime's form for those
        return utc.strftime(_FORMAT)
    return utc.isoformat(timespec="microseconds") + "Z"


@lru_cache(maxsize=256)
def parse_iso(text: str) -> datetime:
    """The inverse of ``iso``: exactly that form, nothing ``fromisoformat`` also accepts.

    Kept for the last few texts (a datetime cannot change): a step reads its operation's
    deadline several times."""
    if len(text) == 27 and text[10] == "T" and text[19] == "." and text[26] == "Z":
        try:
            return datetime.fromisoformat(text[:26]).replace(tzinfo=UTC)
        except ValueError:
            pass
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC)  # the reference's own error


def later(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)
