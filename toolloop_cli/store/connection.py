"""What the store needs of a database connection, whichever engine is behind it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol


class Cursor(Protocol):
    """The DB-API cursor subset the store reads results through."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection in autocommit mode: the store issues BEGIN, COMMIT and ROLLBACK itself.

    ``sqlite3.Connection`` is one; ``store.postgres.PgConnection`` is the other.
    """

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> Cursor: ...

    def close(self) -> None: ...
