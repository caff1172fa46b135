"""Approvals under contention, clocks and tenants.

- N processes decide one approval at the same instant: exactly one decision is written,
  every other process gets ``AlreadyDecided`` (exit 2, one line) and its refusal is logged.
- Expiry follows ``now < expires_at``, and is checked again on resume, not only at decision.
- Tenants, approvers and separation of duties: every unauthorised decision is refused,
  audited and has no effect.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import shutil
import tempfile
import traceback
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from support.clock import FakeClock
from support.harness.ops import audit_records, many_waiting_refunds, refused_records, waiting_refund
from support.harness.scenario import MOMENT, FixedClock
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.engine.states import OpState
from toolloop_cli.errors import AlreadyDecided, ApprovalError, OperationNotFound
from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.service import approvals, operations
from toolloop_cli.store import Store, open_store

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"
WORKERS, TRIALS = (32, 2000) if SOAK else (16, 200)
TTL = timedelta(seconds=3600)
MS = timedelta(milliseconds=1)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """tmpfs when there is one: each example copies a store and commits a few times."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="toolloop-expiry-", dir=shm if shm.is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# -- 2. concurrent decisions --------------------------------------------------------------------


def _decide(
    store_path: Path | str,
    approval_ids: list[str],
    worker: int,
    barrier: Any,
    out: Any,
) -> None:  # pragma: no cover - runs in a forked worker
    """Decide every approval in turn, all workers released together by the barrier."""
    try:
        store = open_store(store_path)
        runner = CliRunner()
        subject = ("ops-lead", "finance")[worker % 2]
        for trial, apr in enumerate(approval_ids):
            deny = trial % 2 == 1 and worker % 2 == 1  # odd trials: approve against deny
            barrier.wait(timeout=60)
            if trial % 10 == 0:  # through the command line: exit code and stderr lines
                args = ["approve", apr, "--as", subject, "--store", str(store_path)]
                result = runner.invoke(app, [*args, *(["--deny"] if deny else [])])
                lines = [x for x in result.stderr.splitlines() if x.strip()]
                out.put((trial, worker, f"exit {result.exit_code}", lines))
                continue
            try:
                approvals.approve(store, apr, subject, deny=deny)
                out.put((trial, worker, "ok", []))
            except AlreadyDecided as exc:
                out.put((trial, worker, "already", [str(exc)]))
            except Exception as exc:
                out.put((trial, worker, f"escape {type(exc).__name__}", [str(exc)]))
    except BaseException:
        out.put((-1, worker, "crash", [traceback.format_exc()]))
        raise


#: the PostgreSQL run: fewer trials (each decision is a round trip per statement)
PG_WORKERS, PG_TRIALS = (16, 400) if SOAK else (8, 100)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_decisions_on_one_approval_write_exactly_one(
    scratch: Path, backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = Path(tempfile.mkdtemp(dir=scratch))
    workers_n, trials = (WORKERS, TRIALS) if backend == "sqlite" else (PG_WORKERS, PG_TRIALS)
    store_path: Path | str = tmp_path / "store.db"
    if backend == "postgresql":
        store_path = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(tmp_path))  # the refunds ledger's folder
    store = open_store(store_path)
    op_id, approval_ids = many_waiting_refunds(store, trials)
    store.close()
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(workers_n), ctx.Queue()
    workers = [
        ctx.Process(target=_decide, args=(store_path, approval_ids, w, barrier, out))
        for w in range(workers_n)
    ]
    for w in workers:
        w.start()
    results = [out.get(timeout=300) for _ in range(workers_n * trials)]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    by_trial: dict[int, list[tuple[str, list[str]]]] = {}
    for trial, _, outcome, lines in results:
        by_trial.setdefault(trial, []).append((outcome, lines))
    assert -1 not in by_trial, by_trial.get(-1)
    store = open_store(store_path)
    # read each log once (per-trial scans are quadratic at the soak's 2 000 trials)
    refused = Counter(r["call_id"] for r in refused_records(store, op_id))
    decided_calls = Counter(
        t["call_id"] for t in store.transitions(op_id) if t["kind"] == "approval"
    )
    decided_records = Counter(
        r["row"]["approval_id"]
        for r in audit_records(store, "approval", "")
        if _status(r) != "PENDING"
    )
    for trial, outcomes in by_trial.items():
        kinds = sorted(o for o, _ in outcomes)
        if trial % 10 == 0:
            assert kinds == ["exit 0"] + ["exit 2"] * (workers_n - 1), outcomes
            losers = [lines for o, lines in outcomes if o == "exit 2"]
            assert all(len(lines) == 1 and "already" in lines[0] for lines in losers)
        else:
            assert kinds == ["already"] * (workers_n - 1) + ["ok"], (trial, kinds)
        apr = store.get_approval(approval_ids[trial])
        assert apr.status in ("APPROVED", "DENIED") and apr.decided_by
        assert decided_calls[apr.call_id] == 1
        assert refused[apr.call_id] == workers_n - 1
        assert decided_records[apr.approval_id] == 1
    assert ledger_refunds(tmp_path / "payments.db") == []


def _status(record: dict[str, Any]) -> object:
    row = record.get("row", record)
    return row.get("status") if isinstance(row, dict) else None


def test_control_a_decision_without_the_pending_check_is_written_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contention test can fail: drop the compare-and-set and a second decision lands."""
    store = open_store(tmp_path / "store.db")
    _, (apr, *_) = many_waiting_refunds(store, 1)
    approvals.approve(store, apr, "ops-lead")

    def blind(approval_id: str, status: str, by: str | None, at: str, reason: str | None) -> None:
        store.conn.execute(
            "UPDATE approvals SET status = ?, decided_by = ? WHERE approval_id = ?",
            (status, by, approval_id),
        )

    monkeypatch.setattr(store, "decide_approval", blind)
    monkeypatch.setattr(approvals, "_check_decision", lambda *a: None)
    approvals.approve(store, apr, "finance", deny=True)
    assert store.get_approval(apr).status == "DENIED"  # the first decision was overwritten


# -- 3. expiry -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def waiting_template(scratch: Path) -> Path:
    """A store (and ledger) whose refund waits for approval, requested at MOMENT."""
    folder = scratch / "template"
    store = open_store(folder / "store.db")
    waiting_refund(store, clock=FakeClock(MOMENT))
    store.close()
    return folder


def _copy(template: Path, into: Path) -> tuple[Path, str, str]:
    shutil.copytree(template, into)
    store = open_store(into / "store.db")
    (op,) = store.list_operations()
    (apr,) = store.approvals(op.operation_id)
    store.close()
    return into / "store.db", op.operation_id, apr.approval_id


def _decide_then_resume(
    template: Path, into: Path, decide_at: timedelta, resume_at: timedelta
) -> tuple[bool, str, int]:
    """(decision accepted, submit call state, refunds) for a decision and a resume at offsets."""
    store_path, op_id, apr = _copy(template, into)
    store = open_store(store_path)
    try:
        clock = FakeClock(MOMENT + decide_at)
        try:
            approvals.approve(store, apr, "ops-lead", clock=clock)
            accepted = True
        except ApprovalError as exc:
            assert "expired at" in str(exc)
            accepted = False
        clock.moment = MOMENT + resume_at
        operations.resume(store, op_id, clock=clock)
        submit = next(c for c in store.calls(op_id) if c.name == "submit_refund")
        return accepted, submit.state.value, len(ledger_refunds(into / "payments.db"))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("decide_at", "resume_at", "accepted", "state", "refunds"),
    [
        (TTL - MS, TTL - MS, True, "SUCCEEDED", 1),  # decided and run at ttl-1ms
        (TTL, TTL, False, "EXPIRED", 0),  # at ttl the window is closed: now < expires_at
        (TTL + MS, TTL + MS, False, "EXPIRED", 0),
        (TTL - MS, TTL, True, "EXPIRED", 0),  # approved in time, resumed too late: re-checked
        (timedelta(0), TTL + timedelta(minutes=1), True, "EXPIRED", 0),
        # past the operation's deadline (1 day) as well: stopped, the decision kept
        (timedelta(0), timedelta(days=2), True, "NOT_EXECUTED", 0),
        (-timedelta(hours=1), -timedelta(hours=1), True, "SUCCEEDED", 1),  # clock stepped back
    ],
)
def test_the_expiry_boundary_is_now_before_expires_at_at_decision_and_at_resume(
    waiting_template: Path,
    tmp_path: Path,
    decide_at: timedelta,
    resume_at: timedelta,
    accepted: bool,
    state: str,
    refunds: int,
) -> None:
    got = _decide_then_resume(waiting_template, tmp_path / "case", decide_at, resume_at)
    assert got == (accepted, state, refunds)


def test_an_expired_approval_stays_expired_when_the_clock_steps_back(
    waiting_template: Path, tmp_path: Path
) -> None:
    store_path, op_id, apr = _copy(waiting_template, tmp_path / "case")
    store = open_store(store_path)
    late = FakeClock(MOMENT + TTL + MS)
    operations.resume(store, op_id, clock=late)
    assert store.get_approval(apr).status == "EXPIRED"
    with pytest.raises(AlreadyDecided):
        approvals.approve(store, apr, "ops-lead", clock=FakeClock(MOMENT - timedelta(hours=1)))
    assert ledger_refunds(tmp_path / "case" / "payments.db") == []


_OFFSET = st.integers(min_value=-5_000, max_value=5_000).map(lambda ms: TTL + ms * MS)


@settings(
    max_examples=5000 if SOAK else 500,
    deadline=None,
    derandomize=not SOAK,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(decide_at=_OFFSET, resume_delay_ms=st.integers(min_value=0, max_value=10_000))
def test_a_refund_runs_iff_decided_and_resumed_before_expiry(
    waiting_template: Path, scratch: Path, decide_at: timedelta, resume_delay_ms: int
) -> None:
    resume_at = decide_at + resume_delay_ms * MS
    into = scratch / secrets.token_hex(4)
    accepted, state, refunds = _decide_then_resume(waiting_template, into, decide_at, resume_at)
    shutil.rmtree(into)
    assert accepted == (decide_at < TTL)
    runs = accepted and resume_at < TTL
    assert (state, refunds) == (("SUCCEEDED", 1) if runs else ("EXPIRED", 0))


# -- 4. tenants, approvers, separation of duties --------------------------------------------------

TENANTS = ("acme", "globex", "initech")
#: finance requested the runs (an approver, but not of its own calls); root is no approver
SUBJECTS = ("finance", "ops-lead", "root")


def _matrix(store_path: Path, repeat: int) -> list[str]:
    """Decide each tenant's approval from every tenant x subject; the allowed cell last."""
    problems = []
    store = open_store(store_path)
    for round_ in range(repeat):
        waiting = {t: waiting_refund(store, tenant=t, subject="finance") for t in TENANTS}
        for owner, (op_id, apr) in waiting.items():
            cells = [(t, s) for t in TENANTS for s in SUBJECTS]
            cells.sort(key=lambda cell: cell == (owner, "ops-lead"))
            for caller, subject in cells:
                allowed = (caller, subject) == (owner, "ops-lead")
                before = len(refused_records(store, op_id))
                try:
                    approvals.approve(store, apr, subject, tenant=caller, clock=FixedClock())
                    outcome = "decided"
                except (ApprovalError, OperationNotFound) as exc:
                    outcome = type(exc).__name__
                cell = f"round {round_} {owner}'s approval by {subject}@{caller}"
                if allowed != (outcome == "decided"):
                    problems.append(f"{cell}: {outcome}")
                audited = len(refused_records(store, op_id)) - before
                if audited != (0 if allowed else 1):
                    problems.append(f"{cell}: {audited} refusal records")
            if ledger_refunds(store_path.parent / "payments.db"):
                problems.append(f"{owner}: a refund before any resume")
    store.close()
    return problems


def test_only_a_listed_approver_of_the_same_tenant_who_is_not_the_requester_decides(
    tmp_path: Path,
) -> None:
    assert _matrix(tmp_path / "store.db", 30 if SOAK else 3) == []


def test_another_tenants_ids_are_unknown_to_every_command(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    store = open_store(store_path)
    op_id, apr = waiting_refund(store, tenant="acme")
    store.close()
    runner = CliRunner()
    guessed = "apr_" + secrets.token_hex(16)
    for args in (
        ["approve", apr, "--as", "ops-lead"],
        ["approve", guessed, "--as", "ops-lead"],
        ["resume", op_id],
        ["step", op_id],
        ["show", op_id],
    ):
        result = runner.invoke(
            app, [*args, "--store", str(store_path)], env={"TOOLLOOP_TENANT": "globex"}
        )
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert result.exit_code == 2, args
        assert len(lines) == 1 and "no " in lines[0] and "globex" not in lines[0], lines
    store = open_store(store_path)
    assert store.get_approval(apr).status == "PENDING"
    assert store.get_operation(op_id).state is OpState.WAITING_APPROVAL
    assert len(store.turns(op_id)) == 3  # nothing was sent to the model
    assert [r["reason"] for r in refused_records(store, op_id)] == [
        "ops-lead (tenant globex): approval belongs to another tenant"
    ]
    assert ledger_refunds(tmp_path / "payments.db") == []


def test_control_without_tenant_scoping_the_matrix_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Store.get_approval

    def unscoped(self: Any, approval_id: str, tenant: str | None = None) -> Any:
        return real(self, approval_id, None)

    monkeypatch.setattr(Store, "get_approval", unscoped)
    problems = _matrix(tmp_path / "store.db", 1)
    assert any("decided" in p for p in problems)
