"""Where ``report -o`` may write: never over a file a run uses, nor over a file it did not write.

The report replaces its target whole (temporary file, rename), so ``-o`` is refused, before
anything is written, when it is the store or one of its ``-wal``/``-shm``/``-journal`` files,
the registry, transcript, recording or replayed cassette of the operation (or of the
``--against`` operation), or the ``--against`` cassette; when it exists and is not a regular
file (a directory, a device, a pipe); and when it is an existing file that is not a report:
a page that starts like ``<!doctype html>`` and carries the report's own
``<meta name="generator" content="toolloop …">`` near its top. ``--force`` replaces such an
unknown file, never a protected or non-regular one. An empty file may be written.
"""

from __future__ import annotations

from pathlib import Path

from toolloop_cli.engine.records import OperationRecord
from toolloop_cli.errors import UsageError
from toolloop_cli.store import Store
from toolloop_cli.transcripts.overwrite import (
    existing_regular_file,
    head_of,
    refuse_protected,
    store_files,
)

__all__ = ["looks_like_report", "report_target"]

_FLAG = "-o"
#: how much of an existing file is read to recognise a report (its head is well inside)
_HEAD_BYTES = 8 * 1024
_DOCTYPE = b"<!doctype html>"
_GENERATOR = b'<meta name="generator" content="toolloop '


def report_target(
    store: Store,
    output: Path,
    operation_id: str,
    *,
    against: str | None = None,
    tenant: str | None = None,
    force: bool = False,
) -> Path:
    """The resolved path to write the report to, or a one-line ``UsageError``.

    The operations are read with ``tenant``, so another tenant's is "not found" here first.
    """
    target = output.resolve()
    protected = [
        *store_files(store.path),
        *_operation_files(store.get_operation(operation_id, tenant)),
    ]
    if against is not None:
        protected += _against_files(store, against, tenant)
    refuse_protected(_FLAG, output, target, protected)
    if not existing_regular_file(_FLAG, output, target, "report"):
        return target
    if not force and not looks_like_report(target):
        raise UsageError(
            f"{_FLAG} {output} exists and is not a toolloop report; refusing to replace it "
            "(--force replaces it)"
        )
    return target


def looks_like_report(path: Path) -> bool:
    """Empty, or an HTML page whose head names toolloop as its generator."""
    head = head_of(path, _HEAD_BYTES)
    if head is None:
        return False
    if not head:
        return True
    return head.lstrip().lower().startswith(_DOCTYPE) and _GENERATOR in head


def _operation_files(op: OperationRecord) -> list[tuple[str, Path | None]]:
    """The registry and the cassettes an operation reads or writes, as it stored them."""
    source = op.source.stored()
    named: list[tuple[str, object]] = [("registry", op.registry_path)]
    named += [(f"{key} cassette", source.get(key)) for key in ("transcript", "record", "replay")]
    return [
        (f"the {what} of {op.operation_id}", Path(path))
        for what, path in named
        if isinstance(path, str) and path
    ]


def _against_files(store: Store, against: str, tenant: str | None) -> list[tuple[str, Path | None]]:
    """The ``--against`` cassette, or the files of the ``--against`` operation."""
    path = Path(against)
    if path.is_file():
        return [("the --against cassette", path)]
    if against.startswith("op_"):
        return _operation_files(store.get_operation(against, tenant))
    return []
