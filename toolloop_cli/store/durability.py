"""How often the store fsyncs: at every commit, or only at the commits a guarantee rests on."""

from __future__ import annotations

import os
from enum import StrEnum

from toolloop_cli.errors import StoreError

#: The environment variable that chooses the durability of a store opened for writing.
DURABILITY_ENV = "TOOLLOOP_DURABILITY"


class Durability(StrEnum):
    """When a commit is fsynced.

    ``barriers`` (the default): WAL with ``synchronous=NORMAL``, so every commit survives a
    killed process, and the WAL is fsynced at the commits a guarantee rests on (a side
    effect's intent, a human decision, a pause for a person, a terminal state): a power loss
    can lose only what was committed since the last barrier, which is redone on resume (a
    model request re-sent, a read re-run). ``full``: every commit fsynced
    (``synchronous=FULL``).
    """

    BARRIERS = "barriers"
    FULL = "full"


def durability_from(value: str | None) -> Durability:
    """The durability named by ``value`` (None: ``TOOLLOOP_DURABILITY``, else barriers)."""
    chosen = value if value is not None else os.environ.get(DURABILITY_ENV) or "barriers"
    try:
        return Durability(chosen.strip().lower())
    except ValueError:
        names = ", ".join(d.value for d in Durability)
        raise StoreError(
            f"unknown durability {chosen!r} ({DURABILITY_ENV} or --durability): use one of {names}"
        ) from None
