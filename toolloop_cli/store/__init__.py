"""The local SQLite store: operations, turns, calls, approvals, conversation items, transitions."""

from .db import open_store
from .repo import Store

__all__ = ["Store", "open_store"]
