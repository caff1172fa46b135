"""What every connection to a PostgreSQL store is opened with: bounded waits.

All of it travels in the connection's startup packet (libpq's ``options``), so no statement
is spent on it:

- ``connect_timeout`` ``CONNECT_TIMEOUT_S``, unless the URL has ``connect_timeout`` or
  ``PGCONNECT_TIMEOUT`` is set: a server that does not answer is given up on;
- ``lock_timeout`` ``LOCK_TIMEOUT``, unless the URL's ``options`` or ``PGOPTIONS`` set one
  (any value, ``0`` included, is kept): a lock another process holds is waited for that
  long, then the statement fails and is reported as a busy store, nothing written;
- ``synchronous_commit`` off under barriers durability (a barrier commit turns it on for
  itself), ``default_transaction_read_only`` on for a store opened read-only.
"""

from __future__ import annotations

import os
import re
from typing import Any

#: seconds a connection attempt waits for the server (libpq's ``connect_timeout``)
CONNECT_TIMEOUT_S = 15
#: how long a statement waits for a lock another process holds (PostgreSQL's syntax)
LOCK_TIMEOUT = "60s"

_LOCK_TIMEOUT_SET = re.compile(r"(?:-c\s*|--)lock[_-]timeout\s*=", re.IGNORECASE)


def connect_kwargs(
    url: str, *, synchronous_commit: bool = True, read_only: bool = False
) -> dict[str, Any]:
    """The keyword arguments ``psycopg.connect`` (or a pool) takes for the store at ``url``,
    besides the URL itself."""
    params = _params(url)
    kwargs: dict[str, Any] = {}
    if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    user = params.get("options")
    if user is None:
        user = os.environ.get("PGOPTIONS", "")
    options = [str(user)] if user else []
    if not _LOCK_TIMEOUT_SET.search(str(user)):
        options.append(f"-c lock_timeout={LOCK_TIMEOUT}")
    if not synchronous_commit:
        options.append("-c synchronous_commit=off")
    if read_only:
        options.append("-c default_transaction_read_only=on")
    kwargs["options"] = " ".join(options)
    return kwargs


def _params(url: str) -> dict[str, Any]:
    """The URL's connection parameters; none when it does not parse (connecting says why)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(url))
    except (psycopg.Error, ValueError):
        return {}
