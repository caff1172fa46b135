"""Security review 2026-12-03, H3: the audit log is append-only in fact, not only in name.

An insider who can write the store changes rows, recomputes their hashes with toolloop's own
functions and appends superseding records at the tail (the review's ``forge_append.py``):
every earlier record, and so every head kept elsewhere, stays valid. ``verify`` must still
find each rewrite, because each record about a row has to follow from the one before it,
and a call's result has to be what the model was sent. Each forgery below is checked through
``toolloop verify`` and ``verify --expect-head`` (exit 20, naming operation, call, table and
field); every honest store the engine writes must still verify clean.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.audit_log import append_record, edit_write, newest_write, reseal
from support.cli import json_out
from support.clock import FakeClock
from support.harness.fake_refund_service import wait_for_handlers
from support.paths import HARNESS, REGISTRY, ROOT
from support.scripted import GUARDS, call, final, repeated_answer, reuse_script
from support.stores import approval_of, demo_store, start
from typer.testing import CliRunner

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.audit.binding import call_binding_sha256, result_sha256
from toolloop_cli.audit.canonical import canonical_text, sha256_hex
from toolloop_cli.audit.expand import read_write
from toolloop_cli.audit.hashing import chain_link, seal
from toolloop_cli.audit.stored import record_text
from toolloop_cli.cli import app
from toolloop_cli.service import approvals, operations
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import open_store

Found = set[tuple[str, str, str | None, str | None]]  # table, field, operation, call


class Forger:
    """Write access to the store file and toolloop's own hash functions; nothing else."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("BEGIN IMMEDIATE")

    def rows(self, table: str, where: str, *args: Any) -> list[dict[str, Any]]:
        found = self.conn.execute(f"SELECT * FROM {table} WHERE {where}", args).fetchall()
        return [dict(r) for r in found]

    def row(self, table: str, where: str, *args: Any) -> dict[str, Any]:
        (found,) = self.rows(table, where, *args)
        return found

    def update(self, table: str, key: dict[str, Any], **changes: Any) -> dict[str, Any]:
        where = " AND ".join(f"{c} = ?" for c in key)
        sets = ", ".join(f"{c} = ?" for c in changes)
        self.conn.execute(
            f"UPDATE {table} SET {sets} WHERE {where}", (*changes.values(), *key.values())
        )
        return self.row(table, where, *key.values())

    def update_call(self, row: dict[str, Any], **changes: Any) -> dict[str, Any]:
        """Change a call and recompute its result hash and binding, as verify would."""
        key = {c: row[c] for c in ("operation_id", "response_id", "call_id")}
        new = {**row, **changes}
        if new["model_result_json"] is not None or new["protected_audit_json"] is not None:
            op = self.row("operations", "operation_id = ?", row["operation_id"])
            digest = result_sha256(
                _load(new["model_result_json"]), _load(new["protected_audit_json"])
            )
            changes.update(
                result_sha256=digest, call_binding_sha256=call_binding_sha256(op, new, digest)
            )
        return self.update("calls", key, **changes)

    def append(self, kind: str, row: dict[str, Any]) -> None:
        """A new record at the tail, every hash and link recomputed."""
        if kind == "turn":
            row = {k: v for k, v in row.items() if k != "response_body"}
        append_record(self.conn, kind, row)

    def rewrite_record(self, seq: int, row: dict[str, Any]) -> None:
        """Replace record ``seq`` in place and recompute every link after it."""
        kind, prev = self.conn.execute(
            "SELECT kind, prev_sha256 FROM audit_log WHERE seq = ?", (seq,)
        ).fetchone()
        s = seal(seq, prev, kind, row)
        self.conn.execute(
            "UPDATE audit_log SET record = ?, record_sha256 = ?, chain_sha256 = ? WHERE seq = ?",
            (s.record, s.record_sha256, s.chain_sha256, seq),
        )
        link = s.chain_sha256
        later = self.conn.execute(
            "SELECT seq, record_sha256 FROM audit_log WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        for n, record_sha in later:
            new = chain_link(n, link, record_sha)
            self.conn.execute(
                "UPDATE audit_log SET prev_sha256 = ?, chain_sha256 = ? WHERE seq = ?",
                (link, new, n),
            )
            link = new

    def commit(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _named(op: str, row: dict[str, Any], table: str, *fields: str) -> Found:
    return {(table, f, op, row.get("call_id")) for f in fields}


# -- the forgeries ----------------------------------------------------------------------------

Forgery = Callable[[Forger, dict[str, str]], Found]


def review_forge_append(f: Forger, ops: dict[str, str]) -> Found:
    """forge_append.py: who approved, the transition log, and what the handler returned."""
    op = ops["completed"]
    (apr,) = f.rows("approvals", "operation_id = ?", op)
    apr = f.update("approvals", {"approval_id": apr["approval_id"]}, decided_by="finance")
    f.append("approval", apr)
    found = _named(op, apr, "approvals", "decided_by")
    for t in f.rows("transitions", "operation_id = ? AND reason LIKE '%ops-lead%'", op):
        t = f.update(
            "transitions", {"id": t["id"]}, reason=t["reason"].replace("ops-lead", "finance")
        )
        f.append("transition", t)
        found |= _named(op, t, "transitions", "reason")
    submit = f.row("calls", "operation_id = ? AND name = 'submit_refund'", op)
    result = json.loads(submit["model_result_json"])
    result["result"]["refund_id"] = "rf_7777_7"
    submit = f.update_call(submit, model_result_json=json.dumps(result))
    f.append("call", submit)
    return found | _named(op, submit, "calls", "model_result_json", "result_sha256")


def approval_redecided(f: Forger, ops: dict[str, str]) -> Found:
    """A denial turned into an approval (b)."""
    op = ops["denied"]
    (apr,) = f.rows("approvals", "operation_id = ?", op)
    apr = f.update("approvals", {"approval_id": apr["approval_id"]}, status="APPROVED", reason=None)
    f.append("approval", apr)
    return _named(op, apr, "approvals", "status", "reason")


def pending_approval_extended(f: Forger, ops: dict[str, str]) -> Found:
    """A waiting approval's expiry moved a year on, its requester changed (a)."""
    op = ops["paused"]
    (apr,) = f.rows("approvals", "operation_id = ?", op)
    key = {"approval_id": apr["approval_id"]}
    apr = f.update("approvals", key, expires_at="2027-12-01T10:00:00Z", requested_by="nobody")
    f.append("approval", apr)
    return _named(op, apr, "approvals", "expires_at", "requested_by")


def waiting_call_arguments(f: Forger, ops: dict[str, str]) -> Found:
    """The call an approver will be asked about now refunds 99 999 (a)."""
    op = ops["paused"]
    submit = f.row("calls", "operation_id = ? AND name = 'submit_refund'", op)
    arguments = {"order_id": "ord_1001", "amount_cents": 99999}
    digest = sha256_hex(canonical_text(arguments).encode())
    submit = f.update_call(
        submit,
        raw_arguments=json.dumps(arguments),
        arguments_json=json.dumps(arguments, sort_keys=True),
        arguments_sha256=digest,
    )
    f.append("call", submit)
    apr = f.update("approvals", {"approval_id": submit["approval_id"]}, arguments_sha256=digest)
    f.append("approval", apr)
    return _named(op, submit, "calls", "raw_arguments", "arguments_json", "arguments_sha256") | (
        _named(op, apr, "approvals", "arguments_sha256")
    )


def waiting_call_moved_back(f: Forger, ops: dict[str, str]) -> Found:
    """A call waiting for approval sent back to PROPOSED, to be validated again (d)."""
    op = ops["paused"]
    submit = f.row("calls", "operation_id = ? AND name = 'submit_refund'", op)
    submit = f.update_call(submit, state="PROPOSED")
    f.append("call", submit)
    return _named(op, submit, "calls", "state")


def expired_call_resealed(f: Forger, ops: dict[str, str]) -> Found:
    """An EXPIRED call rewritten as SUCCEEDED, with a result (c, d)."""
    op = ops["expired"]
    submit = f.row("calls", "operation_id = ? AND name = 'submit_refund'", op)
    result = json.dumps({"ok": True, "result": {"refund_id": "rf_1001_1"}})
    submit = f.update_call(submit, state="SUCCEEDED", model_result_json=result)
    f.append("call", submit)
    return _named(op, submit, "calls", "state", "model_result_json")


def operation_pins_changed(f: Forger, ops: dict[str, str]) -> Found:
    """A live operation's subject and tenant changed, its calls re-bound to match (a)."""
    op = ops["paused"]
    row = f.update("operations", {"operation_id": op}, subject="ops-lead", tenant="other")
    f.append("operation", row)
    for c in f.rows("calls", "operation_id = ? AND result_sha256 IS NOT NULL", op):
        f.append("call", f.update_call(c))
    return _named(op, row, "operations", "subject", "tenant")


def completed_operation_reopened(f: Forger, ops: dict[str, str]) -> Found:
    """A COMPLETED operation moved back to MODEL_REQUESTED (d)."""
    op = ops["completed"]
    row = f.update("operations", {"operation_id": op}, state="MODEL_REQUESTED", final_text=None)
    f.append("operation", row)
    return _named(op, row, "operations", "state", "final_text")


def turn_rewritten(f: Forger, ops: dict[str, str]) -> Found:
    """The final turn's text rewritten (turns are written once) (e)."""
    op = ops["completed"]
    (last,) = f.rows("turns", "operation_id = ? ORDER BY idx DESC LIMIT 1", op)
    row = f.update("turns", {"operation_id": op, "idx": last["idx"]}, text="Refunded 1 cent.")
    f.append("turn", row)
    return {("turns", "text", op, None)}


def final_answer_rewritten(f: Forger, ops: dict[str, str]) -> Found:
    """The final assistant item replaced: new blob, row and a second record for its key (e)."""
    op = ops["completed"]
    (last,) = f.rows("conversation", "operation_id = ? ORDER BY seq DESC LIMIT 1", op)
    item = json.loads(f.row("blobs", "sha256 = ?", last["item_sha256"])["body"])
    forged = json.dumps(item).replace('"text": "', '"text": "Refunded 1 cent. ', 1)
    assert forged != json.dumps(item)
    body = canonical_text(json.loads(forged))
    digest = sha256_hex(body.encode())
    f.conn.execute("INSERT OR IGNORE INTO blobs (sha256, body) VALUES (?, ?)", (digest, body))
    f.update("conversation", {"operation_id": op, "seq": last["seq"]}, item_sha256=digest)
    seq, index = newest_write(f.conn, "items", operation_id=op)
    (text,) = f.conn.execute("SELECT record FROM audit_log WHERE seq = ?", (seq,)).fetchone()
    record = json.loads(record_text(text))
    written = read_write(record, record["writes"][index])  # the final answer's append (whole)
    assert written is not None
    appended = written.changes
    f.append("items", {**appended, "items": [*appended["items"][:-1], digest]})
    return {("conversation", "items", op, None)}


def conversation_overwritten_elsewhere(f: Forger, ops: dict[str, str]) -> Found:
    """The same final item rewritten by an append that starts one earlier (an overlap) (e)."""
    op = ops["completed"]
    before, last = f.rows("conversation", "operation_id = ? ORDER BY seq DESC LIMIT 2", op)[::-1]
    body = canonical_text({"role": "assistant", "content": "Refunded 1 cent."})
    digest = sha256_hex(body.encode())
    f.conn.execute("INSERT OR IGNORE INTO blobs (sha256, body) VALUES (?, ?)", (digest, body))
    f.update("conversation", {"operation_id": op, "seq": last["seq"]}, item_sha256=digest)
    record = {"operation_id": op, "start": before["seq"], "items": [before["item_sha256"], digest]}
    f.append("items", record)
    return {("conversation", "start", op, None)}


def transition_appended_again(f: Forger, ops: dict[str, str]) -> Found:
    """A second record of the same transition, its time moved (e)."""
    op = ops["denied"]
    (t,) = f.rows("transitions", "operation_id = ? AND kind = 'approval'", op)
    t = f.update("transitions", {"id": t["id"]}, at="2026-11-30T00:00:00Z")
    f.append("transition", t)
    return _named(op, t, "transitions", "at")


FORGERIES: list[Forgery] = [
    review_forge_append,
    approval_redecided,
    pending_approval_extended,
    waiting_call_arguments,
    waiting_call_moved_back,
    expired_call_resealed,
    operation_pins_changed,
    completed_operation_reopened,
    turn_rewritten,
    final_answer_rewritten,
    conversation_overwritten_elsewhere,
    transition_appended_again,
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    """A completed, a denied, an expired and a paused refund; and the head kept after them."""
    path = tmp_path_factory.mktemp("demo") / "store.db"
    ops = demo_store(path, FakeClock())
    store = open_store(path)
    head = verify_store(store).head.text()
    store.close()
    return path, ops, head


def verify_cli(path: Path, *extra: str) -> tuple[int, Found]:
    result = CliRunner().invoke(app, ["verify", "--json", *extra, "--store", str(path)])
    found = {
        (m["table"], m["field"], m["operation_id"], m["call_id"])
        for m in json_out(result)["mismatches"]
    }
    return result.exit_code, found


@pytest.mark.parametrize("forge", FORGERIES, ids=[f.__name__ for f in FORGERIES])
def test_superseding_records_appended_at_the_tail_fail_verify_and_the_kept_head(
    demo: tuple[Path, dict[str, str], str], tmp_path: Path, forge: Forgery
) -> None:
    source, ops, head = demo
    path = tmp_path / "store.db"
    shutil.copy(source, path)
    forger = Forger(path)
    expected = forge(forger, ops)
    forger.commit()
    for extra in ((), ("--expect-head", head)):
        code, found = verify_cli(path, *extra)
        assert code == 20, extra
        assert expected <= found, (extra, sorted(found))
        assert ("audit_log", "chain_sha256", None, None) not in found  # the head still holds


def test_each_rewrite_names_the_record_and_the_rule_it_breaks(
    demo: tuple[Path, dict[str, str], str], tmp_path: Path
) -> None:
    source, ops, _ = demo
    path = tmp_path / "store.db"
    shutil.copy(source, path)
    forger = Forger(path)
    approval_redecided(forger, ops)
    forger.commit()
    store = open_store(path)
    (status,) = [m for m in verify_store(store).mismatches if m.field == "status"]
    store.close()
    assert (status.expected, status.found) == ("DENIED", "APPROVED")
    assert "final once DENIED" in status.key and "(record " in status.key


# -- (f): a result rewritten in place, after a head kept before it was written ----------------


def test_a_result_rewritten_in_place_is_caught_by_what_the_model_was_sent(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The chain after a kept head rewritten: the conversation still carries the result sent."""
    path = tmp_path / "store.db"
    store = open_store(path)
    op = start(store, clock)
    kept = verify_store(store).head.text()  # kept while the refund waits for approval
    approvals.approve(store, approval_of(store, op), "ops-lead", clock=clock)
    operations.resume(store, op, clock=clock)
    store.close()
    forger = Forger(path)
    submit = forger.row("calls", "operation_id = ? AND name = 'submit_refund'", op)
    result = json.loads(submit["model_result_json"])
    result["result"]["refund_id"] = "rf_7777_7"
    submit = forger.update_call(submit, model_result_json=json.dumps(result, sort_keys=True))
    seq, index = newest_write(
        forger.conn, "call", call_id=submit["call_id"], column="model_result_json"
    )
    columns = ("model_result_json", "result_sha256", "call_binding_sha256")
    edit_write(forger.conn, seq, index, **{c: submit[c] for c in columns})
    reseal(forger.conn, seq)  # its only SUCCEEDED write, re-sealed: a legal history
    forger.commit()
    code, found = verify_cli(path, "--expect-head", kept)
    assert code == 20
    assert found == {("calls", "model_result_json", op, submit["call_id"])}


# -- no false positives: every kind of store the engine writes verifies clean ------------------

BRANCHES = ROOT / "transcripts" / "branches"
SERVICE = HARNESS / "service.yaml"


@pytest.mark.timeout(600)
def test_every_honest_store_verifies_clean(tmp_path: Path, clock: FakeClock) -> None:
    """Branches of all providers (replays, approvals, expiry, reconcile), escalations continued
    by force, reused ids and repeated answers: each store verifies, and every result sent to a
    model is compared with its call."""
    runner = CliRunner()
    replays = tmp_path / "replays" / "store.db"
    for branch in sorted(BRANCHES.glob("*/*.yaml")):
        env = {"TOOLLOOP_REFUND_DELAY_MS": "600"} if "timeout" in branch.stem else None
        out = runner.invoke(
            app,
            [
                *("replay", str(branch), "--registry", str(REGISTRY), "--approve-as", "ops-lead"),
                *("--json", "--store", str(replays)),
            ],
            env=env,
        )
        assert json_out(out)["divergences"] == [], branch
    faults = tmp_path / "faults"
    faults.mkdir()
    store = open_store(faults / "store.db")
    modes = ["ok", "apply_then_drop", "drop_before_apply", "in_flight", "conflict"]
    (faults / "faults.json").write_text(json.dumps({str(n + 1): m for n, m in enumerate(modes)}))
    calls = [
        call("refund", {"order_id": "ord_1", "amount_cents": n + 1}) for n in range(len(modes))
    ]
    options = operations.RunOptions(task="t", registry=SERVICE, provider="scripted", model="m")
    first = operations.start(store, options, transport=ScriptedTransport([{"calls": calls}]))
    assert first.target.value == "ESCALATED"  # in_flight: the outcome is unknown
    wait_for_handlers(faults, len(modes))
    again = [{"id": "resp_again", "calls": [calls[0], calls[3]]}, final("done")]  # re-proposed
    operations.resume(
        store,
        first.operation.operation_id,
        force_continue=True,
        decided_by="ops-lead",
        transport=ScriptedTransport(again),
    )
    assert [c.state.value for c in store.calls(first.operation.operation_id)][-2:] == [
        "DUPLICATE",
        "DUPLICATE",
    ]
    store.close()
    demo = tmp_path / "demo" / "store.db"
    demo.parent.mkdir()
    demo_store(demo, clock)
    ids = tmp_path / "ids" / "store.db"
    ids.parent.mkdir()
    store = open_store(ids)
    for script, registry in ((reuse_script(), REGISTRY), (repeated_answer(), GUARDS)):
        options = operations.RunOptions(task="t", registry=registry, provider="scripted", model="m")
        transport = ScriptedTransport(script)
        started = operations.start(store, options, transport=transport)
        op_id = started.operation.operation_id
        if started.target.value == "WAITING_APPROVAL":  # the submit that reuses a draft's id
            approvals.approve(store, approval_of(store, op_id), "ops-lead")
            done = operations.resume(store, op_id, transport=transport)
            assert done.target.value == "COMPLETED", done.operation.reason
    store.close()
    checked = 0
    for path in (replays, faults / "store.db", demo, ids):
        store = open_store(path)
        report = verify_store(store)
        store.close()
        assert report.ok, (path, [m.line() for m in report.mismatches][:5])
        assert report.counts["results_unchecked"] == 0
        checked += report.counts["results_checked"]
    assert checked > 50
