"""Recording: a ``Transport`` wrapper that writes every exchange to a vcrpy-format cassette.

The cassette is rewritten atomically (temporary file, fsync, rename) after each exchange, so a
process killed at any point leaves the previous complete cassette, never a torn one. Secrets
are scrubbed by ``dump_cassette``. toolloop's own facts about the run (operation, registry,
tools, approvals, call states) go under one extra top-level key, ``toolloop``, which vcrpy and
pytest-recording ignore; ``metadata`` is asked for them at every write.

A streamed answer is recorded as the adapter reads it (``_Tee``), never drained ahead of it:
the adapter stops at its byte cap, and the recording holds what it read (at most
``MAX_BODY_BYTES``), so an endless stream costs the same with ``--record`` as without.

A request that got no answer (a connection error, an answer cut by a transport error or by the
deadline) is not recorded: a cassette has no way to say "no answer", and a replay of it would
invent one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from toolloop_cli.audit.canonical import canonical_bytes, sha256_hex
from toolloop_cli.engine.ports import Toolbox, Transport
from toolloop_cli.engine.records import ApprovalRecord, CallRecord, OperationRecord, TurnRecord
from toolloop_cli.engine.types import MAX_BODY_BYTES, HttpRequest, HttpResponse, ToolInfo

from .cassette import (
    GZIP_MAGIC,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    dump_cassette,
    load_cassette as _load,
)

__all__ = ["METADATA_KEY", "RecordingTransport", "answered_requests", "operation_metadata"]

#: The top-level cassette key that holds toolloop's metadata.
METADATA_KEY = "toolloop"
#: ``response_sha256`` of a turn that got no answer (the engine hashes an empty body)
_NO_ANSWER = sha256_hex(b"")


class RecordingTransport:
    """Sends through ``inner`` and appends each exchange to the cassette at ``path``."""

    def __init__(
        self,
        inner: Transport,
        path: str | os.PathLike[str],
        *,
        metadata: Callable[[], dict[str, Any]] | None = None,
        keep: int = 0,
    ) -> None:
        """``keep``: how many interactions of an existing cassette to keep (0 starts afresh)."""
        self.inner = inner
        self.name = inner.name
        self.path = Path(os.fspath(path))
        self._metadata = metadata
        self.interactions: list[Interaction] = []
        self._other: dict[str, Any] = {}
        if keep > 0 and self.path.exists():
            existing = _load(self.path)
            self.interactions = existing.interactions[:keep]
            self._other = {k: v for k, v in existing.metadata.items() if k != METADATA_KEY}

    def send(self, request: HttpRequest) -> HttpResponse:
        """The inner transport's answer; on disk once the adapter is done reading it."""
        response = self.inner.send(request)
        if response.chunks is None:
            self._record(request, response, response.body)
            return HttpResponse(response.status, dict(response.headers), body=response.body)
        tee = _Tee(response.chunks, lambda body: self._record(request, response, body))
        return HttpResponse(response.status, dict(response.headers), chunks=tee)

    def _record(self, request: HttpRequest, response: HttpResponse, body: bytes) -> None:
        headers = dict(response.headers)
        if "content-encoding" in headers and not body.startswith(GZIP_MAGIC):
            # the body we hold is already decoded: the header would no longer be true
            headers.pop("content-encoding")
            headers.pop("content-length", None)
        recorded = Interaction.of(
            RecordedRequest(
                method=request.method,
                uri=request.url,
                headers={name.lower(): [value] for name, value in request.headers.items()},
                body=canonical_bytes(request.body),
            ),
            RecordedResponse(
                status=response.status,
                headers={name.lower(): [value] for name, value in headers.items()},
                body=body,
            ),
        )
        self.interactions.append(recorded)
        self.flush()

    def flush(self) -> None:
        """Write the cassette now, with fresh metadata (also after the run ends)."""
        metadata = dict(self._other)
        if self._metadata is not None:
            metadata[METADATA_KEY] = self._metadata()
        dump_cassette(Cassette(str(self.path), list(self.interactions), metadata), self.path)


class _Tee:
    """Hands the chunks on as they are read, keeping a copy (at most ``MAX_BODY_BYTES``).

    ``done`` gets the copy once: when the chunks run out, or when the reader closes them
    (it stopped by itself: a terminal event, its byte cap). An error from the inner chunks
    (a dropped connection, the deadline) means no answer, and nothing is recorded.
    """

    def __init__(self, chunks: Iterator[bytes], done: Callable[[bytes], None]) -> None:
        self._chunks = chunks
        self._done: Callable[[bytes], None] | None = done
        self._kept: list[bytes] = []
        self._room = MAX_BODY_BYTES

    def __iter__(self) -> _Tee:
        return self

    def __next__(self) -> bytes:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._finish()
            raise
        except BaseException:
            self._done = None
            raise
        if self._room > 0:
            self._kept.append(chunk[: self._room])
            self._room -= len(self._kept[-1])
        return chunk

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if callable(close):
            close()
        self._finish()

    def _finish(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            body, self._kept = b"".join(self._kept), []
            done(body)


def answered_requests(turns: Sequence[TurnRecord]) -> int:
    """How many committed turns got an answer, so many exchanges a cassette of them holds."""
    return sum(1 for turn in turns if turn.response_sha256 != _NO_ANSWER)


def operation_metadata(
    op: OperationRecord,
    calls: Sequence[CallRecord],
    approvals: Sequence[ApprovalRecord],
    toolbox: Toolbox,
) -> dict[str, Any]:
    """What toolloop writes under ``toolloop:``: enough for a replay to walk the same path.

    A call is named by its turn, response id and call id (a provider may reuse call ids in
    every turn), and so is the call of each approval.
    """
    turn_of = {(c.response_id, c.call_id): c.turn_idx for c in calls}
    return {
        "format": 1,
        "operation_id": op.operation_id,
        "task": op.task,
        "tenant": op.tenant,
        "subject": op.subject,
        "provider": op.provider,
        "api_family": op.api_family,
        "model": op.model,
        "created_at": op.created_at,
        "state": op.state.value,
        "reason": op.reason,
        "registry": {
            "name": op.registry_name,
            "revision": op.registry_revision,
            "sha256": op.registry_sha256,
            "policy_revision": op.policy_revision,
        },
        "approval_ttl_s": toolbox.approval_ttl_s,
        "guards": op.guards.model_dump(mode="json"),
        "settings": op.settings,
        "tools": {spec.name: _tool_meta(toolbox.lookup(spec.name)) for spec in toolbox.specs()},
        "calls": [
            {
                "turn": c.turn_idx,
                "response_id": c.response_id,
                "call_id": c.call_id,
                "name": c.name,
                "state": c.state.value,
            }
            for c in calls
        ],
        "approvals": [
            {
                "turn": turn_of.get((a.response_id, a.call_id)),
                "response_id": a.response_id,
                "call_id": a.call_id,
                "tool": a.tool,
                "status": a.status.value,
                "requested_at": a.requested_at,
                "expires_at": a.expires_at,
                "decided_by": a.decided_by,
                "decided_at": a.decided_at,
                "reason": a.reason,
            }
            for a in approvals
        ],
    }


def _tool_meta(tool: ToolInfo | None) -> dict[str, Any]:
    if tool is None:
        return {}
    return {
        "schema_version": tool.schema_version,
        "side_effecting": tool.side_effecting,
        "needs_approval": tool.needs_approval,
        "key_fields": list(tool.key_fields) if tool.key_fields is not None else None,
        "has_reconcile": tool.has_reconcile,
        "max_argument_bytes": tool.max_argument_bytes,
        "sequential": tool.sequential,
    }
