"""The store: operations, turns, calls, approvals, conversation items, transitions, audit log.

A SQLite file by default; a PostgreSQL database when opened with a ``postgresql://`` URL.
Its names load on first use, so importing a small module of the package (``durability``, as
the CLI's root options do) does not import the store, pydantic and sqlite-utils with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .db import open_store, store_exists, store_file
    from .repo import Store

__all__ = ["Store", "open_store", "store_exists", "store_file"]

_HOMES = {"Store": "repo", "open_store": "db", "store_exists": "db", "store_file": "db"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
