"""What a command that replaces a file whole must never replace.

``run --record`` and ``report -o`` write a temporary file and rename it over their target, so
a mistyped target would swap the store (and every operation and the audit log with it), one
of its ``-wal``/``-shm``/``-journal`` files, a registry or a cassette for new content, and
would turn a device, a pipe or a socket into a regular file. Each command lists the files it
protects; these helpers refuse such a target, before anything is written, with one line
naming the flag and what it would hit. Paths are compared after resolving symlinks and
``..``, and as inodes, so a hard link is caught too.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from toolloop_cli.errors import UsageError

__all__ = [
    "SIDE_FILES",
    "Protected",
    "existing_regular_file",
    "refuse_protected",
    "replace_whole",
    "store_files",
]

#: the files SQLite keeps beside a database
SIDE_FILES = ("-wal", "-shm", "-journal")

#: (what it is, for the message; its path, or None when there is none)
Protected = Iterable[tuple[str, Path | None]]


def store_files(store: Path | None) -> list[tuple[str, Path | None]]:
    """The store file and its side files (nothing for a PostgreSQL store, ``None``)."""
    if store is None:
        return []
    return [
        ("the store", store),
        *((f"the store's {suffix} file", Path(f"{store}{suffix}")) for suffix in SIDE_FILES),
    ]


def refuse_protected(flag: str, given: Path, target: Path, protected: Protected) -> None:
    """A ``UsageError`` when ``target`` is one of the ``protected`` files."""
    for what, path in protected:
        if path is not None and same_file(target, path):
            raise UsageError(f"{flag} {given} would overwrite {what} ({path})")


def existing_regular_file(flag: str, given: Path, target: Path, kind: str) -> bool:
    """Whether ``target`` exists; one that is there but is not a regular file is refused
    (renaming over a directory fails late, over a device or a pipe it replaces the node)."""
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UsageError(f"{flag} {given}: cannot inspect it: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{flag} {given} is a directory, not a {kind} file")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{flag} {given} is not a regular file")
    return True


def same_file(target: Path, path: Path) -> bool:
    """The same file: equal resolved paths, or (both existing) the same inode."""
    if target == path.resolve():
        return True
    try:
        return os.path.samefile(target, path)
    except OSError:
        return False


def head_of(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of an existing file (None when it cannot be read): enough to
    tell whether it is what a command wrote there before."""
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def replace_whole(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (temporary file beside it, fsync,
    rename); a failure is a one-line ``UsageError`` naming ``what`` and leaves no file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
