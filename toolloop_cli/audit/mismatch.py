"""One finding of ``verify``: which operation, call, table, row and field, expected vs found."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .canonical import sha256_hex

__all__ = ["Mismatch"]

#: Values longer than this are shown shortened (their full form stays in the store).
_WIDTH = 200


@dataclass(frozen=True)
class Mismatch:
    """A stored value that does not recompute. ``expected`` is what the trusted input gives
    (the audit record, or a hash recomputed from stored inputs); ``found`` is what is stored.
    """

    operation_id: str | None
    call_id: str | None
    table: str
    key: str
    field: str
    expected: Any
    found: Any

    @classmethod
    def of(
        cls,
        operation_id: str | None,
        call_id: str | None,
        table: str,
        key: str,
        field: str,
        expected: object,
        found: object,
    ) -> Mismatch:
        return cls(
            _name(operation_id), _name(call_id), table, key, field, _shown(expected), _shown(found)
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for a person."""
        where = self.operation_id or "-"
        if self.call_id:
            where += f" call {self.call_id}"
        return (
            f"{where}: {self.table}[{self.key}].{self.field}: "
            f"expected {self.expected!r}, found {self.found!r}"
        )


def _name(value: object) -> str | None:
    """An id as reported: a tampered id column may hold anything (bytes, a number), shown as
    its repr so that every report stays text."""
    return value if value is None or isinstance(value, str) else _shown(repr(value))


def _shown(value: object) -> Any:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes {sha256_hex(value)}>"
    if isinstance(value, str) and len(value) > _WIDTH:
        return value[: _WIDTH - 1] + "…"
    if value is None or isinstance(value, str | int | bool | float):
        return value
    text = repr(value)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"
