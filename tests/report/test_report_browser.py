"""``toolloop report`` opened in a real Chromium: every section of the shipped branches.

Each report is a file opened from ``file://``; each test reads the text a person sees,
expands calls as a person would, and checks that the page logged no error, opened no dialog
and asked for nothing but its own file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext
from report_helpers import (
    BRANCHES,
    chromium_context,
    completed_run,
    diverging_registry,
    escalated_run,
    json_of,
    open_report,
    replay,
    screenshot,
    toolloop,
    write_report,
)

from toolloop_cli.store import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    yield from chromium_context(tmp_path_factory)


def test_a_completed_run_shows_header_budgets_timeline_calls_approvals_and_verify(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = completed_run(store)
    shown = json_of(toolloop(store, "show", op_id, "--json"))
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))

    header = watched.text("#operation")
    for fact in (
        "COMPLETED",
        op_id,
        "openai · responses",
        "gpt-4.1-2025-04-14",
        "default",
        "operator",
        "refunds@2026-12-01.1 · policy pol-3",
        shown["registry"]["sha256"],
        shown["final_text"],
        shown["task"],
    ):
        assert fact in header, fact

    budgets = watched.text("#budgets")
    assert "model turns max_turns\t4\t20" in budgets
    assert "tool calls max_tool_calls\t3\t50" in budgets
    tokens = shown["counters"]["input_tokens"]
    assert f"input tokens max_input_tokens\t{tokens:,}\tno limit" in budgets

    timeline = watched.text("#timeline")
    turns = open_store(store).turns(op_id)
    assert [t.idx for t in turns] == [0, 1, 2, 3]
    for turn in turns:
        assert f"turn {turn.idx}" in timeline
        assert turn.request_sha256 in timeline and turn.response_sha256 in timeline
        assert str(turn.response_id) in timeline
    assert "latency —" not in timeline  # every turn's latency is known from the state log
    assert timeline.count(" ms") == 4
    assert "tokens in 204 · out 14 · total 218" in timeline

    calls = watched.page.locator("details.call")
    assert calls.count() == 3
    submit = calls.nth(2)
    assert submit.get_attribute("open") is None
    assert not submit.locator(".call-body").is_visible()
    submit.locator("summary").click()  # a person expands the call
    assert submit.get_attribute("open") is not None
    body = submit.inner_text()
    submit_call = shown["calls"][2]
    assert '{\n  "amount_cents": 4999,\n  "order_id": "ord_1001"\n}' in body  # pretty JSON
    assert submit_call["idempotency_key"] in body
    history = submit.locator("table.history").inner_text()
    assert [line.split("\t")[2] for line in history.splitlines()[1:]] == [
        "PROPOSED",
        "WAITING_APPROVAL",
        "APPROVED",
        "EXECUTING",
        "SUCCEEDED",
    ]
    assert "approved by ops-lead" in history
    model_result = submit.locator("pre.model-result").inner_text()
    assert '"refund_id": "rf_1001_1"' in model_result
    assert '"status": "ok"' in submit.locator("pre.protected-audit").inner_text()

    approvals = watched.text("#approvals")
    (approval,) = shown["approvals"]
    for fact in (approval["approval_id"], "APPROVED", "ops-lead", "pol-3", approval["expires_at"]):
        assert fact in approvals, fact
    assert "✓ every hash of this operation recomputes" in watched.text("#verify")
    assert watched.page.locator("#divergences").count() == 0  # not a replay
    assert watched.page.locator("#diff").count() == 0
    screenshot(watched, "report-completed.png", tmp_path)
    watched.assert_quiet()


def test_the_script_expands_collapses_and_filters_the_calls(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "duplicate_then_no_progress.yaml")
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    page = watched.page
    calls = page.locator("details.call")
    total = calls.count()
    page.click("#expand-all")
    assert all(calls.nth(i).get_attribute("open") is not None for i in range(total))
    page.click("#collapse-all")
    assert all(calls.nth(i).get_attribute("open") is None for i in range(total))
    options = page.locator("#call-filter option").all_inner_texts()
    assert options == ["all", "DUPLICATE", "NOT_EXECUTED", "SUCCEEDED"]
    page.select_option("#call-filter", "DUPLICATE")
    visible = [calls.nth(i).is_visible() for i in range(total)]
    assert visible.count(True) == 1
    assert page.inner_text("#calls-shown") == f"1 of {total} call(s) shown"
    page.click("#timeline a[href='#call-1']")  # a timeline link opens the call it names
    assert calls.nth(0).is_visible() and calls.nth(0).get_attribute("open") is not None
    watched.assert_quiet()


def test_an_incomplete_run_names_the_truncated_turn_and_has_no_submit(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "max_tokens_mid_call.yaml")
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    assert "INCOMPLETE" in watched.text("h1")
    assert "the answer hit max_output_tokens; no call will run" in watched.text("#op-reason")
    last = watched.page.locator("li.turn").last.inner_text()
    assert "TRUNCATED" in last and "finish max_output_tokens" in last
    names = watched.page.locator("details.call .tool").all_inner_texts()
    assert names == ["get_order", "create_refund_draft"]
    assert "✓ no divergence" in watched.text("#divergences")
    watched.assert_quiet()


def test_no_progress_shows_the_duplicate_and_the_stop(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "duplicate_then_no_progress.yaml")
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    assert "NO_PROGRESS" in watched.text("h1")
    shown = json_of(toolloop(store, "show", op_id, "--json"))
    assert shown["reason"] in watched.text("#op-reason")
    duplicate = watched.page.locator("details.call[data-state=DUPLICATE]")
    duplicate.locator("summary").click()
    result = duplicate.locator("pre.model-result").inner_text()
    first_submit = next(c for c in shown["calls"] if c["name"] == "submit_refund")
    assert first_submit["call_id"] in result  # the earlier result, duplicate_of its call
    watched.assert_quiet()


def test_an_escalated_run_shows_the_unknown_outcome_and_its_audit_projection(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = escalated_run(store, tmp_path)
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    assert "ESCALATED" in watched.text("h1")
    assert "outcome unknown" in watched.text("#op-reason")
    unknown = watched.page.locator("details.call[data-state=UNKNOWN_OUTCOME]")
    assert unknown.locator(".tool").inner_text() == "submit_refund"
    unknown.locator("summary").click()
    audit = unknown.locator("pre.protected-audit").inner_text()
    assert "timed out after 200 ms" in audit
    assert "no result yet" in unknown.inner_text()  # nothing went to the model
    assert "APPROVED" in watched.text("#approvals") and "ops-lead" in watched.text("#approvals")
    watched.assert_quiet()


def test_an_expired_approval_and_its_fresh_one_are_both_listed(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "approval_expired.yaml")
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    rows = watched.page.locator("#approvals tbody tr").all_inner_texts()
    assert len(rows) == 2
    assert "EXPIRED" in rows[0] and "ops-lead" not in rows[0]
    assert "APPROVED" in rows[1] and "ops-lead" in rows[1]
    expired = watched.page.locator("details.call[data-state=EXPIRED]")
    expired.locator("summary").click()
    assert '"code": "approval_expired"' in expired.locator("pre.model-result").inner_text()
    assert "EXPIRED" in expired.locator("table.history").inner_text()
    watched.assert_quiet()


def test_a_diverging_replay_lists_each_divergence_even_without_its_cassette(
    browser: BrowserContext, tmp_path: Path
) -> None:
    """The tools changed (another registry) and the recording says the order had shipped."""
    store = tmp_path / "store.db"
    cassette = tmp_path / "happy_path.yaml"
    recorded = (BRANCHES / "happy_path.yaml").read_text()
    cassette.write_text(recorded.replace('status\\":\\"delivered', 'status\\":\\"shipped'))
    op_id = replay(store, cassette, "--registry", str(diverging_registry(tmp_path)))
    cassette.unlink()  # the divergences are kept in the store, not recomputed from the file
    shown = json_of(toolloop(store, "show", op_id, "--json"))
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    section = watched.text("#divergences")
    assert "✗ 2 divergence(s) from the recording" in section
    assert "4 request(s) compared" in section
    tools, result = watched.page.locator("#divergences tbody tr").all_inner_texts()
    assert tools.startswith("tools\tturn 0\n$.tools.get_order.description")
    was, now = (cell.strip() for cell in tools.split("\t")[2:])
    assert was.startswith('"Look up an order by its id')
    assert now.startswith('"Find an order by its id')
    order_call = shown["calls"][0]["call_id"]
    assert result.startswith(f"result\tturn 1\ncall {order_call}\n$.result.status")
    assert [cell.strip() for cell in result.split("\t")[2:]] == ['"shipped"', '"delivered"']
    screenshot(watched, "report-divergence.png", tmp_path, selector="#divergences")
    watched.assert_quiet()


def test_against_another_run_shows_their_differences(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    happy = replay(store, BRANCHES / "happy_path.yaml")
    expired = replay(store, BRANCHES / "approval_expired.yaml")
    report = write_report(store, happy, tmp_path / "r.html", "--against", expired)
    diff = json_of(toolloop(store, "diff", happy, expired, "--json"))
    watched = open_report(browser, report)
    section = watched.text("#diff")
    assert f"A {happy} · B {expired}" in section
    assert f"{len(diff['differences'])} difference(s)" in section
    for difference in diff["differences"]:
        assert difference["path"] in section
    watched.assert_quiet()


def test_a_tampered_store_shows_each_mismatch(browser: BrowserContext, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "happy_path.yaml")
    with closing(sqlite3.connect(store)) as conn:
        conn.execute(
            "UPDATE calls SET model_result_json = replace(model_result_json, '4999', '9999')"
            " WHERE name = 'submit_refund'"
        )
        conn.commit()
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    verify = watched.text("#verify")
    assert "✗" in verify and "mismatch(es)" in verify
    assert "calls[" in verify and "model_result_json" in verify and "9999" in verify
    watched.assert_quiet()


def test_a_bad_operation_id_is_one_line_and_no_file(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    replay(store, BRANCHES / "happy_path.yaml")
    target = tmp_path / "r.html"
    result = toolloop(store, "report", "op_nope", "-o", str(target))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: no operation op_nope in store {store}"]
    assert not target.exists()
