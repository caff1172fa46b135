"""What verification is handed: the rows of a store's audited tables, as plain values.

Its own module so that both sides of verification (``verify`` and ``recompute``) and the
service that reads a store share one definition without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestCheck", "Row", "StoreRows"]

#: (operation row, turn row) -> the request hash rebuilt from stored inputs, or None when
#: the request cannot be rebuilt here (e.g. another adapter revision).
RequestCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]

Row = dict[str, Any]


@dataclass
class StoreRows:
    """Every row of the audited tables, as plain dicts (``audit_log`` ordered by ``seq``).

    The audit log may be read as it is walked instead of held: ``read_log`` then gives its
    rows in ``seq`` order each time it is called, and ``audit_log`` stays empty.
    """

    operations: list[Row] = field(default_factory=list)
    turns: list[Row] = field(default_factory=list)
    calls: list[Row] = field(default_factory=list)
    approvals: list[Row] = field(default_factory=list)
    transitions: list[Row] = field(default_factory=list)
    conversation: list[Row] = field(default_factory=list)
    blobs: dict[str, Any] = field(default_factory=dict)
    audit_log: list[Row] = field(default_factory=list)
    read_log: Callable[[], Iterable[Row]] | None = None

    def log(self) -> Iterable[Row]:
        """The audit log's rows in ``seq`` order, held or read."""
        return self.audit_log if self.read_log is None else self.read_log()

    def table(self, name: str) -> list[Row]:
        rows: list[Row] = getattr(self, name)
        return rows
