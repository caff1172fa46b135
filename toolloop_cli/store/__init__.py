"""The store: operations, turns, calls, approvals, conversation items, transitions, audit log.

A SQLite file by default; a PostgreSQL database when opened with a ``postgresql://`` URL.
"""

from .db import open_store, store_exists
from .repo import Store

__all__ = ["Store", "open_store", "store_exists"]
