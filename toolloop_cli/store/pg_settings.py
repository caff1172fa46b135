"""What every connection to a PostgreSQL store is opened with: bounded waits, UTF-8.

All of it travels in the connection's startup packet (libpq's ``options`` and
``client_encoding``), so no statement is spent on it:

- ``connect_timeout`` ``CONNECT_TIMEOUT_S``, unless the URL has ``connect_timeout`` or
  ``PGCONNECT_TIMEOUT`` is set: a server that does not answer is given up on;
- ``lock_timeout`` ``LOCK_TIMEOUT``, unless the URL's ``options`` or ``PGOPTIONS`` set one
  (any value, ``0`` included, is kept): a lock another process holds is waited for that
  long, then the statement fails and is reported as a busy store, nothing written;
- TCP keepalives (``KEEPALIVES``, each unless the URL sets it): a server that vanishes
  mid-session (a partition, a host gone) is given up on within about a minute, not after
  the operating system's two hours of silence;
- ``client_encoding`` ``UTF8`` whatever the environment says, and a database whose server
  encoding is not UTF8 is refused (``check_encoding``, from what the server reports at
  connect): toolloop's text is Unicode and its hashes are over UTF-8 bytes;
- ``synchronous_commit`` off under barriers durability (a barrier commit turns it on for
  itself), ``default_transaction_read_only`` on for a store opened read-only.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from toolloop_cli.errors import StoreError

if TYPE_CHECKING:
    import psycopg

#: seconds a connection attempt waits for the server (libpq's ``connect_timeout``)
CONNECT_TIMEOUT_S = 15
#: how long a statement waits for a lock another process holds (PostgreSQL's syntax)
LOCK_TIMEOUT = "60s"
#: libpq's TCP keepalive and unacknowledged-data limits (ignored on a Unix socket): probes
#: after 30 s of silence, every 10 s, 3 unanswered end the connection; data the server has
#: not acknowledged for 60 s ends it too
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
#: the only encoding a store's database and sessions may have
ENCODING = "UTF8"

_LOCK_TIMEOUT_SET = re.compile(r"(?:-c\s*|--)lock[_-]timeout\s*=", re.IGNORECASE)


def connect_kwargs(
    url: str, *, synchronous_commit: bool = True, read_only: bool = False
) -> dict[str, Any]:
    """The keyword arguments ``psycopg.connect`` (or a pool) takes for the store at ``url``,
    besides the URL itself."""
    params = _params(url)
    kwargs: dict[str, Any] = {"client_encoding": ENCODING}
    if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    kwargs.update((k, v) for k, v in _keepalives().items() if k not in params)
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


def _keepalives() -> dict[str, int]:
    """``KEEPALIVES`` as the libpq in use takes them (``tcp_user_timeout`` is libpq 12's:
    an older one refuses to connect with an option it does not know)."""
    from psycopg import pq

    if pq.version() >= 120000:
        return KEEPALIVES
    return {k: v for k, v in KEEPALIVES.items() if k != "tcp_user_timeout"}


def _params(url: str) -> dict[str, Any]:
    """The URL's connection parameters; none when it does not parse (connecting says why)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(url))
    except (psycopg.Error, ValueError):
        return {}


def check_encoding(raw: psycopg.Connection[Any], shown: str) -> None:
    """A ``StoreError`` (the connection closed) when the database is not UTF8 or the
    session does not speak UTF8: read from what the server reported at connect."""
    server = raw.info.parameter_status("server_encoding")
    client = raw.info.parameter_status("client_encoding")
    if server == ENCODING and client == ENCODING:
        return
    raw.close()
    if server != ENCODING:
        raise StoreError(
            f"store {shown}: the database's encoding is {server or 'unknown'}, not UTF8; "
            "toolloop stores text as UTF-8, so it uses only a database created with "
            "ENCODING 'UTF8' (nothing was written)"
        )
    raise StoreError(
        f"store {shown}: the server would not speak UTF8 on this connection (client "
        f"encoding {client or 'unknown'}); nothing was written"
    )
