"""Where ``run --record`` may write: never over a file the run uses, nor over a non-cassette.

A recording replaces its target atomically, so a mistyped ``--record .toolloop/store.db``
would swap the store, and every operation and the audit log with it, for a YAML file. The
target is refused, before anything is written, when it is (after resolving symlinks and
``..``, or as a hard link) the store or one of its ``-wal``/``-shm``/``-journal`` files, the
registry, the price file or the transcript being replayed; and when it exists and does not
start like a cassette (vcrpy's, pytest-recording's, pydantic-ai's and toolloop's all have a
top-level ``interactions:`` key in their first lines). An empty file may be written.
"""

from __future__ import annotations

import re
from pathlib import Path

from toolloop_cli.errors import UsageError

from .overwrite import existing_regular_file, head_of, refuse_protected, store_files

__all__ = ["record_target"]

#: how much of an existing file is read to recognise a cassette
_HEAD_BYTES = 64 * 1024
_INTERACTIONS = re.compile(rb'^(?:\{\s*)?"?interactions"?\s*:', re.MULTILINE)


def record_target(
    record: Path,
    *,
    store: Path | None,
    registry: Path | None = None,
    prices: Path | None = None,
    transcript: Path | None = None,
) -> Path:
    """The resolved ``--record`` path, or a one-line ``UsageError`` saying what it would hit."""
    target = record.resolve()
    protected = [
        ("the --transcript it replays", transcript),
        *store_files(store),
        ("the --registry", registry),
        ("the --prices file", prices),
    ]
    refuse_protected("--record", record, target, protected)
    if not existing_regular_file("--record", record, target, "cassette"):
        return target
    if not _looks_like_cassette(target):
        raise UsageError(
            f"--record {record} exists and is not a cassette (no top-level 'interactions:'); "
            "refusing to overwrite it"
        )
    return target


def _looks_like_cassette(path: Path) -> bool:
    """Empty, or UTF-8 text with a top-level ``interactions`` key near the start."""
    head = head_of(path, _HEAD_BYTES)
    if head is None:
        return False
    if not head:
        return True
    if b"\x00" in head:  # SQLite and other binary files
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end of the head
            return False
    return _INTERACTIONS.search(head) is not None
