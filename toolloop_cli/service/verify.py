"""The service behind ``toolloop verify``: read a store, hand its rows to ``audit.verify``.

Besides what ``audit.verify`` checks from rows alone, this layer rebuilds every model
request from the stored conversation items, the declared tools and the settings (through
the operation's adapter) and hashes it again, and reports registry drift: a call that is
still to run, or an approval still to be used, whose tool or policy is no longer what the
registry file says (for an approval: its pinned policy revision and, when pinned, the hash
of the policy block). It reads only; it never repairs anything, and it never imports or runs
anything a store names: registries are parsed without importing their handlers, and the CLI
opens the store read-only (``open_store(..., read_only=True)``).
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from toolloop_cli.audit.chain import ChainWalk, Head, checked
from toolloop_cli.audit.hashing import GENESIS
from toolloop_cli.audit.mismatch import Mismatch
from toolloop_cli.audit.recompute import blob_bodies
from toolloop_cli.audit.request_hash import RequestHasher
from toolloop_cli.audit.rows import StoreRows
from toolloop_cli.audit.verify import (
    Leftovers,
    Report,
    check_part,
    counted,
    head_mismatches,
    pair_leftovers,
    row_counts,
)
from toolloop_cli.engine.ports import ModelAdapter
from toolloop_cli.engine.states import TERMINAL
from toolloop_cli.engine.types import ModelSettings, ResultForModel, ToolSpec
from toolloop_cli.errors import OperationNotFound, ToolloopError
from toolloop_cli.store import Store
from toolloop_cli.store.audit_rules import HISTORY_RULES

from . import store_parts

if TYPE_CHECKING:
    from toolloop_cli.tools.registry import Policy

__all__ = ["read_rows", "registry_drift", "verify_store"]

#: Call states whose tool must still be the one they were allowed under.
_PENDING = ("WAITING_APPROVAL", "APPROVED", "EXECUTING")

_TERMINAL = frozenset(state.value for state in TERMINAL)

Row = dict[str, Any]


def verify_store(
    store: Store, operation_id: str | None = None, *, expect_head: str | None = None
) -> Report:
    """Verify the whole store (or one operation, with the whole chain); never repairs.

    The chain is walked whole, one record at a time; everything else is checked a part of
    the store at a time (``store_parts``), so memory follows the largest part, not the store.
    """
    damaged = store_parts.damage(store)
    if damaged:  # its tables and indexes disagree: no answer read from it can be believed
        found = [
            Mismatch.of(None, None, "store", "file", "integrity_check", "ok", problem)
            for problem in damaged[: store_parts.DAMAGE_SHOWN]
        ]
        return Report(found, dict.fromkeys(_COUNTS, 0), Head(0, GENESIS), expect_head)
    missing = store_parts.missing_tables(store)
    if missing:  # rows that were audited are gone with their table: nothing else can be read
        found = [
            Mismatch.of(None, None, t, "table", "table", "present", "missing") for t in missing
        ]
        return Report(found, dict.fromkeys(_COUNTS, 0), Head(0, GENESIS), expect_head)
    if operation_id is not None and not _exists(store, operation_id):
        raise OperationNotFound(
            f"no operation {operation_id or repr('')} in store {store.location}"
        )
    with _collector_paused(), store_parts.read_snapshot(store):
        chain = ChainWalk()
        records = [0]
        log = counted(_log_rows(store), operation_id, records)
        if operation_id is None:
            chain.walk_links(log)  # each record's fields are checked with its part
        else:  # every record's fields, as a check of the whole store would
            for _ in chain.each(log):
                pass
        found = list(chain.mismatches)
        counts: Counter[str] = Counter()
        leftovers = Leftovers()
        drift: list[Mismatch] = []
        parts = store_parts.parts(store, operation_id)
        known = {op for part in parts if part is not store_parts.STRAYS for op in part.params}
        for part in parts:
            rows = store_parts.read_part(store, part)
            requests = _Requests(rows)
            refs: dict[Any, set[Any]] = {}
            part_counts: dict[str, int] = {}
            found += check_part(
                rows,
                checked(
                    store_parts.part_log(store, part, chain.moved, known),
                    found if operation_id is None else [],
                ),
                rules=HISTORY_RULES,
                request_sha=requests,
                results=_Results(requests),
                counts=part_counts,
                leftovers=leftovers,
                blob_refs=refs,
            )
            found += blob_bodies(rows.blobs.items(), refs)
            counts.update(part_counts)
            counts.update(row_counts(rows))
            counts["pending_checked"] += sum(1 for c in rows.calls if c.get("state") in _PENDING)
            drift += registry_drift(rows)
        found += pair_leftovers(leftovers)
        if operation_id is None:
            found += blob_bodies(store_parts.unreferenced_blobs(store), {})
        else:
            found = [m for m in found if m.operation_id == operation_id or m.table == "audit_log"]
        found += head_mismatches(chain.head, chain.links, expect_head)
        counts.update(records=records[0], blobs=store_parts.blob_count(store))
    return Report([*found, *drift], {k: counts[k] for k in _COUNTS}, chain.head, expect_head)


#: the counts a report gives, in the order it gives them
_COUNTS = (
    "requests_rebuilt",
    "requests_unchecked",
    "results_checked",
    "results_unchecked",
    "operations",
    "turns",
    "calls",
    "approvals",
    "transitions",
    "items",
    "records",
    "blobs",
    "pending_checked",
)


def read_rows(store: Store, *, stream_log: bool = False) -> StoreRows:
    """Every row of the audited tables, as plain dicts (for ``audit.verify`` on a store
    held whole).

    ``stream_log``: the audit log is not held but read as it is walked (``StoreRows.log``),
    one row at a time from one query, so a check holds no record it is done with.
    """
    rows = StoreRows()
    for table in store_parts.TABLES:
        setattr(rows, table, list(store_parts.rows_of(store, f"SELECT * FROM {table}")))
    rows.blobs = dict(store_parts.values_of(store, "SELECT sha256, body FROM blobs"))
    if stream_log:
        rows.read_log = lambda: _log_rows(store)
    else:
        rows.audit_log = list(_log_rows(store))
    return rows


def _log_rows(store: Store) -> Iterator[Row]:
    """The audit log's rows in ``seq`` order, as the query steps through them."""
    return store_parts.log_of(store, "ORDER BY seq")


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a store is checked.

    Verification builds many long-lived objects (every row of a part, and each row's last
    record) and no cycles; each full collection walks all of them again, about a quarter of
    the check's time. Reference counting still frees everything; the collector's state is
    restored after.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _exists(store: Store, operation_id: str) -> bool:
    sql = "SELECT 1 FROM operations WHERE operation_id = ?"
    return store.conn.execute(sql, (operation_id,)).fetchone() is not None


class _Requests:
    """Rebuilds a turn's request from stored items, tools and settings; hashes it."""

    def __init__(self, rows: StoreRows) -> None:
        self.rows = rows
        self._items: dict[str, list[Any]] | None = None
        self._adapters: dict[tuple[str, str, str | None], ModelAdapter | None] = {}
        # the engine's running hash: a turn's request hashes only the items new since the
        # operation's last one (byte for byte sha256_of(body); it falls back to that itself)
        self._hasher = RequestHasher()
        self._sent: dict[str, list[Any]] = {}
        #: read once: declared tools by their hash, settings and base URLs by their text
        self._tools: dict[str, list[ToolSpec]] = {}
        self._settings: dict[str, ModelSettings] = {}
        self._base_urls: dict[object, str | None] = {}

    def __call__(self, op: Mapping[str, Any], turn: Mapping[str, Any]) -> str | None:
        tools_sha = turn.get("tools_sha256")
        adapter = self._adapter(op)
        if tools_sha is None or adapter is None or adapter.revision != op["adapter_revision"]:
            return None  # not rebuildable here: counted as unchecked, not as a mismatch
        op_id = str(op["operation_id"])
        items = self._items_until(op_id, int(turn["request_items"]))
        tools = self.tools(tools_sha, self.rows.blobs[tools_sha])
        text = op["settings_json"]
        settings = self._settings.get(text)
        if settings is None:
            settings = self._settings[text] = ModelSettings(**json.loads(text))
        return self._hasher.digest(op_id, adapter.build_request(items, tools, settings).body, items)

    def tools(self, digest: str, blob: str) -> list[ToolSpec]:
        """The tools a request declared, stored as ``blob`` under their content hash
        ``digest``: each list is read once."""
        tools = self._tools.get(digest)
        if tools is None:
            tools = self._tools[digest] = [ToolSpec(**t) for t in json.loads(blob)]
        return tools

    def _items_until(self, operation_id: str, count: int) -> list[Any]:
        """The operation's first ``count`` items, as one list grown turn by turn (a new one
        when a turn asks for fewer than the last: the running hash then starts again)."""
        sent = self._sent.get(operation_id)
        if sent is None or len(sent) > count:
            sent = self._sent[operation_id] = []
        sent.extend(self._conversation(operation_id)[len(sent) : count])
        return sent

    def _adapter(self, op: Mapping[str, Any]) -> ModelAdapter | None:
        source = op["source_json"]
        if source not in self._base_urls:
            self._base_urls[source] = _base_url(op)
        key = (str(op["provider"]), str(op["api_family"]), self._base_urls[source])
        if key not in self._adapters:
            from toolloop_cli.wiring import make_adapter

            try:
                self._adapters[key] = make_adapter(*key)
            except ToolloopError:
                self._adapters[key] = None
        return self._adapters[key]

    def _conversation(self, operation_id: str) -> list[Any]:
        if self._items is None:
            ordered = sorted(
                self.rows.conversation, key=lambda r: (str(r["operation_id"]), int(r["seq"]))
            )
            self._items = {}
            for row in ordered:
                body = self.rows.blobs[row["item_sha256"]]
                self._items.setdefault(str(row["operation_id"]), []).append(json.loads(body))
        return self._items.get(operation_id, [])


def _base_url(op: Mapping[str, Any]) -> str | None:
    """The base URL a row's ``source_json`` names; None when it names none, or when the
    column is not the object toolloop writes (that row is reported, never read further)."""
    try:
        source = json.loads(op["source_json"] or "{}")
    except (TypeError, ValueError, RecursionError):
        return None
    base = source.get("base_url") if isinstance(source, dict) else None
    return base if isinstance(base, str) else None


class _Results:
    """Rebuilds the items a turn's results were sent as; names each call sent otherwise."""

    def __init__(self, requests: _Requests) -> None:
        self.requests = requests
        self._turns = {(t["operation_id"], t["idx"]): t for t in requests.rows.turns}

    def _provider_types(self, calls: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Name -> provider-defined type, from the tools the turn's request declared."""
        if not calls:
            return {}
        turn = self._turns.get((calls[0].get("operation_id"), calls[0].get("turn_idx")))
        digest = turn.get("tools_sha256") if turn else None
        if not isinstance(digest, str):
            return {}
        blob = self.requests.rows.blobs.get(digest)
        if blob is None:
            return {}
        specs = self.requests.tools(digest, blob)
        return {s.name: s.provider_type for s in specs if s.provider_type is not None}

    def __call__(
        self, op: Mapping[str, Any], calls: Sequence[Mapping[str, Any]], items: Sequence[Any]
    ) -> list[Mismatch] | None:
        from toolloop_cli.audit.canonical import canonical_text
        from toolloop_cli.engine.sending import results_for_model
        from toolloop_cli.store.rows import CALL_NAMES, call_from_row

        adapter = self.requests._adapter(op)
        if adapter is None or adapter.revision != op["adapter_revision"]:
            return None  # not rebuildable here: counted as unchecked
        try:
            results = results_for_model(
                [call_from_row([c.get(n) for n in CALL_NAMES]) for c in calls],
                self._provider_types(calls).get,
            )
            rebuilt = [canonical_text(i) for i in adapter.result_items(results)]
            stored = [canonical_text(i) for i in items]
        except (ValueError, TypeError, ToolloopError):
            return None  # a row that cannot be read is reported by the row checks
        if rebuilt == stored:
            return []
        sent: dict[str, object]
        if len(rebuilt) == len(stored) == len(results):  # one item per result, in order
            sent = {r.call_id: stored[n] for n, r in enumerate(results) if rebuilt[n] != stored[n]}
        else:
            sent = _sent_otherwise(op, results, items)
        if not sent:  # the items differ, but in no one result (an item added, a flag changed)
            sent = {r.call_id: "the results as the conversation carries them" for r in results}
        found = [
            Mismatch.of(
                op["operation_id"],
                r.call_id,
                "calls",
                f"{op['operation_id']}/{r.response_id}/{r.call_id}",
                "model_result_json",
                sent[r.call_id],
                canonical_text(r.content),
            )
            for r in results
            if r.call_id in sent
        ]
        return found or [
            Mismatch.of(
                op["operation_id"], None, "conversation", op["operation_id"], "items", [], stored
            )
        ]


def _sent_otherwise(
    op: Mapping[str, Any], results: Sequence[ResultForModel], items: Sequence[Any]
) -> dict[str, object]:
    """Call id -> what was sent instead, read back from the provider-shaped items."""
    from toolloop_cli.replay.divergence import result_list

    body = {"input": list(items), "messages": list(items), "contents": list(items)}
    sent = {r.call_id: r.value for r in result_list((op["provider"], op["api_family"]), body)}
    unread = "the result sent in the conversation"
    return {
        r.call_id: sent.get(r.call_id, unread) for r in results if sent.get(r.call_id) != r.content
    }


def registry_drift(rows: StoreRows, operation_id: str | None = None) -> list[Mismatch]:
    """Calls still to run (or to approve) whose tool or policy the registry file changed."""
    from toolloop_cli.tools.registry import load_registry

    found: list[Mismatch] = []
    approvals = {a["approval_id"]: a for a in rows.approvals}
    for op in rows.operations:
        if not _mine(op, operation_id) or op["state"] in _TERMINAL:
            continue
        pending = [
            c
            for c in rows.calls
            if c["operation_id"] == op["operation_id"] and c["state"] in _PENDING
        ]
        if not pending:
            continue
        path = str(op["registry_path"])
        try:  # the path comes from the store under audit: parse it, never import from it
            registry = load_registry(path, import_handlers=False)
        except ToolloopError as exc:
            found.append(_drift(op, None, path, "registry_path", "a loadable registry", str(exc)))
            continue
        for call in pending:
            tool = registry.get(str(call["name"]))
            current = tool.sha256 if tool is not None else "removed"
            if current != call["tool_sha256"]:
                found.append(_drift(op, call, path, "tool_sha256", call["tool_sha256"], current))
            apr = approvals.get(call["approval_id"])
            if apr is not None:
                found += _policy_drift(op, call, apr, path, registry.policy)
    return found


def _policy_drift(op: Row, call: Row, apr: Row, path: str, policy: Policy) -> list[Mismatch]:
    """The approval's pinned policy against the file's: its revision, else its block's hash."""
    if apr["policy_revision"] != policy.revision:
        return [_drift(op, call, path, "policy_revision", apr["policy_revision"], policy.revision)]
    pinned = apr.get("policy_sha256")
    if pinned is not None and pinned != policy.policy_sha256:
        return [_drift(op, call, path, "policy_sha256", pinned, policy.policy_sha256)]
    return []


def _drift(
    op: Row, call: Row | None, path: str, field: str, expected: object, found: object
) -> Mismatch:
    call_id = None if call is None else call["call_id"]
    return Mismatch.of(op["operation_id"], call_id, "registry", path, field, expected, found)


def _mine(row: Mapping[str, Any], operation_id: str | None) -> bool:
    return operation_id is None or row.get("operation_id") == operation_id
