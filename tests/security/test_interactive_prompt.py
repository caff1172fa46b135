"""``run --interactive`` on a real pseudo-terminal, as a person would use it (pexpect).

The prompt shows the approval's own call in full; the approver is ``--as`` or
``TOOLLOOP_SUBJECT``, never typed; approve, deny with a reason and leave pending each end as
the store says; policy checks still apply; hostile text is shown escaped (security review
H1, M3 — the ``[conceal]`` payout case — and L10).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pexpect
import pytest
from hostile_cassettes import call, response, text, write
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.examples.refunds import ledger_refunds
from toolloop_cli.store import open_store

pytestmark = pytest.mark.slow

PAYOUTS = Path(__file__).parent / "payouts" / "registry.yaml"
CHOICE = r"\[a/d/p\]"
WAIT_S = 60
#: what the terminal itself receives from Rich: colours, cursor moves (not text)
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(screen: str) -> str:
    """The screen's text: Rich's own styling and cursor codes taken out, line ends as \\n."""
    return _CSI.sub("", screen).replace("\r\n", "\n")


def paid(data_dir: Path) -> list[object]:
    path = data_dir / "payouts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def spawn(store_path: Path, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    """The CLI on an 80-column pseudo-terminal, without inherited identity or width."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TOOLLOOP_") and k not in ("COLUMNS", "LINES")
    }
    clean["TERM"] = "xterm-256color"
    command = ["-m", "toolloop_cli", "run", *args, "--interactive", "--store", str(store_path)]
    return pexpect.spawn(
        sys.executable,
        command,
        env={**clean, **(env or {})},
        encoding="utf-8",
        timeout=WAIT_S,
        dimensions=(60, 80),
    )


def printed(child: pexpect.spawn) -> str:
    """What the child printed before the last match (text: the child runs with an encoding)."""
    text = child.before
    assert isinstance(text, str)
    return text


def finish(child: pexpect.spawn) -> tuple[str, int]:
    """Everything printed until the process ends, and its exit status."""
    child.expect(pexpect.EOF)
    rest = printed(child)
    child.close()
    assert child.exitstatus is not None, child.signalstatus
    return rest, child.exitstatus


def refund_run(store_path: Path, *extra: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    return spawn(
        store_path,
        TASK,
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(REFUND_OPENAI),
        *extra,
        env=env,
    )


def only_approval(store_path: Path) -> tuple[str, str | None, str | None]:
    store = open_store(store_path)
    (op,) = store.list_operations()
    (apr,) = store.approvals(op.operation_id)
    return apr.status, apr.decided_by, apr.reason


def test_approve_at_the_prompt_runs_the_call_and_completes(store_path: Path) -> None:
    child = refund_run(store_path, "--as", "ops-lead")
    child.expect(CHOICE)
    screen = plain(printed(child))
    for shown in ("submit_refund", "risk", "irreversible", '"amount_cents": 4999'):
        assert shown in screen
    for shown in ("idempotency key", "idk_", "policy revision", "pol-3", "expires", TASK[:30]):
        assert shown in screen
    assert "decide as" in screen and "ops-lead" in screen
    child.sendline("a")
    rest, code = finish(child)
    assert code == 0, rest
    assert only_approval(store_path)[:2] == ("APPROVED", "ops-lead")
    assert [r["amount_cents"] for r in ledger_refunds(store_path.parent / "payments.db")] == [4999]


def test_deny_at_the_prompt_asks_for_a_reason_and_sends_it(store_path: Path) -> None:
    child = refund_run(store_path, "--as", "ops-lead")
    child.expect(CHOICE)
    child.sendline("d")
    child.expect("reason for the denial")
    child.sendline("")  # a reason is required: asked again
    child.expect("reason for the denial")
    child.sendline("customer is abroad")
    rest, code = finish(child)
    assert code == 0, rest  # the recording's next answer ends the run
    assert only_approval(store_path) == ("DENIED", "ops-lead", "customer is abroad")
    assert ledger_refunds(store_path.parent / "payments.db") == []


def test_leave_pending_at_the_prompt_stops_waiting_with_the_commands(store_path: Path) -> None:
    child = refund_run(store_path, "--as", "ops-lead")
    child.expect(CHOICE)
    child.sendline("p")
    rest, code = finish(child)
    assert code == 10, rest
    assert "left pending" in plain(rest) and "toolloop approve apr_" in plain(rest)
    assert only_approval(store_path) == ("PENDING", None, None)


def test_without_an_approver_interactive_mode_says_so_and_leaves_it_pending(
    store_path: Path,
) -> None:
    child = refund_run(store_path)
    rest, code = finish(child)
    assert code == 10, rest
    assert "interactive approval needs an approver" in plain(rest)
    assert "[a/d/p]" not in rest  # nobody was asked, and no name was typed
    assert only_approval(store_path)[0] == "PENDING"


def test_the_approver_may_come_from_toolloop_subject(store_path: Path) -> None:
    child = refund_run(store_path, "--subject", "operator", env={"TOOLLOOP_SUBJECT": "finance"})
    child.expect(CHOICE)
    child.sendline("a")
    rest, code = finish(child)
    assert code == 0, rest
    assert only_approval(store_path)[:2] == ("APPROVED", "finance")


def test_the_policy_still_decides_who_may_approve(store_path: Path) -> None:
    child = refund_run(store_path, "--as", "mallory")
    child.expect(CHOICE)
    child.sendline("a")
    rest, code = finish(child)
    assert code == 10, rest
    assert "may not decide approvals under policy pol-3" in plain(rest)
    assert only_approval(store_path)[0] == "PENDING"
    assert ledger_refunds(store_path.parent / "payments.db") == []


def _draft_then_submit(path: Path, submit_id: str) -> Path:
    """A 1-cent draft as call_X, the full draft as call_Y, then the submit as ``submit_id``."""
    draft = {"order_id": "ord_1001", "amount_cents": 1, "reason": "goodwill"}
    full = {"order_id": "ord_1001", "amount_cents": 4999}
    return write(
        path,
        [
            response("resp_t0", [call("call_X", "create_refund_draft", draft)]),
            response("resp_t1", [call("call_Y", "create_refund_draft", full)]),
            response(
                "resp_t2",
                [text("Submitting the full refund."), call(submit_id, "submit_refund", full)],
            ),
            response("resp_t3", [text("done")]),
        ],
    )


def test_the_prompt_shows_the_waiting_calls_own_arguments_and_what_the_model_wrote(
    store_path: Path, tmp_path: Path
) -> None:
    cassette = _draft_then_submit(tmp_path / "submit.yaml", "call_Z")
    child = spawn(
        store_path,
        "t",
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(cassette),
        "--as",
        "ops-lead",
    )
    child.expect(CHOICE)
    screen = plain(printed(child))
    prompt = screen[screen.index("approval apr_") :]
    assert '"amount_cents": 4999' in prompt and "goodwill" not in prompt
    assert "call_Z of response resp_t2" in prompt
    assert "Submitting the full refund." in prompt  # what the model wrote before the call
    child.sendline("p")
    assert finish(child)[1] == 10


def test_a_submit_reusing_an_earlier_call_id_is_shown_and_run_with_its_own_arguments(
    store_path: Path, tmp_path: Path
) -> None:
    """H1 on a terminal: the submit takes the 1-cent draft's call id. It is another call (a
    call is its response id and call id): the person sees its own 4999, and that is paid."""
    cassette = _draft_then_submit(tmp_path / "reuse.yaml", "call_X")
    child = spawn(
        store_path,
        "t",
        "--registry",
        str(REGISTRY),
        "--transcript",
        str(cassette),
        "--as",
        "ops-lead",
    )
    child.expect(CHOICE)
    screen = plain(printed(child))
    prompt = screen[screen.index("approval apr_") :]
    assert '"amount_cents": 4999' in prompt and "goodwill" not in prompt
    assert "call_X of response resp_t2" in prompt
    child.sendline("a")
    rest, code = finish(child)
    assert code == 0, rest
    assert [r["amount_cents"] for r in ledger_refunds(store_path.parent / "payments.db")] == [4999]


def test_hostile_text_in_the_prompt_is_shown_escaped(store_path: Path, tmp_path: Path) -> None:
    """The review's payout: ``[conceal]`` around the fields sorted between the two strings,
    ESC sequences in an argument and an OSC title change in what the model wrote."""
    args = {
        "account": "acct_42 [conceal]",
        "amount_cents": 9999999,
        "memo": "[/conceal] monthly fee \x1b[8m\u202e",
    }
    said = "Paying now \x1b]0;pwned-title\x07 \x1b[2J\x1b[31mRED\r"
    cassette = write(
        tmp_path / "payout.yaml",
        [
            response("r0", [text(said), call("call_P", "payout", args)]),
            response("r1", [text("ok")]),
        ],
    )
    child = spawn(
        store_path,
        "t",
        "--registry",
        str(PAYOUTS),
        "--transcript",
        str(cassette),
        "--as",
        "ops-lead",
    )
    child.expect(CHOICE)
    raw_screen = printed(child)
    panel = raw_screen[raw_screen.index("approval ") : raw_screen.index("decide as")]
    screen = plain(panel)
    assert '"account": "acct_42 [conceal]",' in screen
    assert '"amount_cents": 9999999,' in screen
    assert '"memo": "[/conceal] monthly fee \\u001b[8m\\u202e"' in screen
    assert "Paying now \\x1b]0;pwned-title\\x07 \\x1b[2J\\x1b[31mRED\\x0d" in screen
    for raw in ("\x1b[8m", "\x1b]0;", "\x1b[2J", "\x1b[31mRED", "\x07", "\u202e"):
        assert raw not in raw_screen, raw
    assert "\r" not in panel.replace("\r\n", "\n")
    child.sendline("d")
    child.expect("reason for the denial")
    child.sendline("hidden amount")
    rest, code = finish(child)
    assert code == 0, rest
    assert only_approval(store_path) == ("DENIED", "ops-lead", "hidden amount")
    assert paid(store_path.parent) == []
