"""What verification is handed: the rows of a store's audited tables, as plain values.

Its own module so that both sides of verification (``verify`` and ``recompute``) and the
service that reads a store share one definition without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestCheck", "Row", "StoreRows"]

#: (operation row, turn row) -> the request hash rebuilt from stored inputs, or None when
#: the request cannot be rebuilt here (e.g. another adapter revision).
RequestCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]

Row = dict[str, Any]


@dataclass
class StoreRows:
    """Every row of the audited tables, as plain dicts (``audit_log`` ordered by ``seq``)."""

    operations: list[Row] = field(default_factory=list)
    turns: list[Row] = field(default_factory=list)
    calls: list[Row] = field(default_factory=list)
    approvals: list[Row] = field(default_factory=list)
    transitions: list[Row] = field(default_factory=list)
    conversation: list[Row] = field(default_factory=list)
    blobs: dict[str, Any] = field(default_factory=dict)
    audit_log: list[Row] = field(default_factory=list)

    def table(self, name: str) -> list[Row]:
        rows: list[Row] = getattr(self, name)
        return rows
