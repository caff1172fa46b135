"""Stored values toolloop cannot read, told apart: which row, which column, what it holds.

A row that does not convert into its record (a value toolloop never writes: an unknown state,
broken JSON, a timestamp in another form, a number where text belongs) is a ``TamperedStore``
naming it, never a traceback; so is text SQLite cannot decode. The conversions themselves stay
in ``rows.py``; this runs only once one has failed.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import ValidationError

from toolloop_cli.engine.sources import Source
from toolloop_cli.errors import StoreError, TamperedStore

#: what a value toolloop never writes raises on its way into a record: a JSON, enum, timestamp
#: or pydantic error (each a ``ValueError``), a ``TypeError`` (a number or a null where text
#: or an object belongs), or a ``RecursionError`` (JSON nested deeper than the decoder goes;
#: raised cleanly by it, before anything was built)
BAD_VALUE = (ValueError, TypeError, RecursionError)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON, and toolloop never writes it")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # ``1e400``: JSON text Python reads as infinity
        raise ValueError(f"{text[:40]} is out of range, and toolloop never writes it")
    return value


#: one decoder for every read (``json.loads`` with an option builds a new one each call)
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def loads(text: Any) -> Any:
    """A stored JSON column, as toolloop writes it: no ``NaN`` or ``Infinity``, spelled out or
    as a number too large for a float (Python's decoder takes them; JSON has no such values,
    and ``--json`` could not print them)."""
    if isinstance(text, str):
        return _DECODER.decode(text)
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def json_object(text: Any, nullable: bool = False) -> None:
    """A column whose JSON is unpacked into a model (``Model(**value)``) must hold an object;
    ``nullable``: or be empty, read as no object at all."""
    if nullable and not text:
        return
    if not isinstance(loads(text), dict):
        raise ValueError("not a JSON object")


@dataclass(frozen=True)
class Table:
    """What a message about one of a table's rows needs: its columns, how a row is named
    (``row_name`` over its key columns), and the decoding steps taken outside pydantic
    (enums, JSON, timestamps), tried one by one to tell the column a failure came from."""

    name: str
    columns: tuple[str, ...]
    row_name: str
    decoders: Mapping[str, Callable[[Any], object]]


#: the transports a source is stored under: each ``kind`` of the models in ``engine.sources``
TRANSPORTS = frozenset(
    kind
    for model in get_args(get_args(Source)[0])
    for kind in get_args(model.model_fields["kind"].annotation)
)
#: a nested model validated on its own, and the JSON column it is read from
_MODEL_COLUMNS = {
    "Guards": "guards_json",
    "Counters": "counters_json",
    "Usage": "usage_json",
    "ApiError": "error_json",
}
#: a record field whose column is not named ``field`` or ``field_json``
_FIELD_COLUMNS = {"divergence_check": "divergence_json"}


def tampered_row(table: Table, row: Sequence[Any], exc: Exception) -> TamperedStore:
    """The error for a row that does not convert: which row, which column, what it holds."""
    column, why = _culprit(table, row, exc)
    return tampered(table, row, column, why)


def _culprit(table: Table, row: Sequence[Any], exc: Exception) -> tuple[str | None, str]:
    """The column ``exc`` came from (None when it cannot be told) and why it failed."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        column = _MODEL_COLUMNS.get(exc.title) or _FIELD_COLUMNS.get(field, field)
        if column not in table.columns:
            column = f"{field}_json"
        if column in table.columns:
            return column, _short(first["msg"], 120)
    for column, decode in table.decoders.items():
        try:
            decode(row[table.columns.index(column)])
        except BAD_VALUE as found:
            return column, reason_of(found)
    return None, reason_of(exc)


def tampered(table: Table, row: Sequence[Any], column: str | None, why: str) -> TamperedStore:
    """One message for every stored value toolloop cannot read: the row, the column and what
    it holds (when they can be told), why it failed, and where to look next."""
    names = {c: _key(v) for c, v in zip(table.columns, row, strict=False)}
    if column is None:
        what = f"a value in {table.name} cannot be read ({why})"
    else:
        held = _shown(row[table.columns.index(column)])
        what = f"{table.name}.{column} holds {held}, which toolloop never writes ({why})"
    return TamperedStore(
        f"tampered store: {table.row_name.format_map(names)}: {what};"
        " run `toolloop verify` for the full report"
    )


def reason_of(exc: BaseException) -> str:
    """Why a value failed, in one short line."""
    text = str(exc).strip()
    return _short(text.splitlines()[0] if text else type(exc).__name__, 120)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(value: Any) -> str:
    """A stored value as the message shows it: NULL, or its repr (escaped, cut short)."""
    return "NULL" if value is None else _short(repr(value), 60)


def _key(value: Any) -> str:
    """An id as written when it is a plain one; anything else as ``_shown`` does."""
    if isinstance(value, str) and value.isprintable() and len(value) <= 80:
        return value
    return _shown(value)


_NOT_UTF8 = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


def unreadable(table: str, location: str, exc: sqlite3.Error) -> StoreError:
    """A failed read of ``table``: text SQLite cannot decode (bytes that are not UTF-8, which
    toolloop never writes) is a ``TamperedStore`` naming the column; anything else a
    ``StoreError``. The undecodable text itself is left out: it may hold terminal controls."""
    found = _NOT_UTF8.search(str(exc))
    if found is not None:
        return TamperedStore(
            f"tampered store: {table}.{found.group(1)} holds text that is not UTF-8, which"
            f" toolloop never writes (store {location})"
        )
    return StoreError(f"cannot read store {location} ({table}): {exc}")
