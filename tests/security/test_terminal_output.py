"""What a person sees on the terminal: the exact call they approve, and no hostile text.

Security review 2026-12-03: H1 (display side) — the call of an approval is found through the
approval's own row, never by call id alone; L10 — the arguments are shown whole wherever a
person decides; M3 — text from a model, a cassette, a provider or a handler is never parsed
as Rich markup and never reaches the terminal raw.
"""

from __future__ import annotations

import ast
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hostile_cassettes import call, response, text, write
from support.cli import Invoke, json_out
from support.paths import REGISTRY, ROOT

from toolloop_cli.cli import render
from toolloop_cli.service import diff as run_diff, views
from toolloop_cli.store import open_store

PAYOUTS = Path(__file__).parent / "payouts" / "registry.yaml"
CLI = ROOT / "toolloop_cli" / "cli"
#: markup, an OSC title change, a colour, a screen clear, CR, bidi and zero-width characters
HOSTILE = (
    "[/][conceal]hidden[/conceal] \x1b]0;pwned-title\x07 \x1b[31mRED\x1b[0m \x1b[2J"
    " over\rwrite \u202eevil\u202c zero\u200bwidth \u2066iso\u2069 \x9bC1"
)
#: how each hidden character of HOSTILE must be shown
SHOWN = [
    "[/][conceal]hidden[/conceal]",
    "\\x1b]0;pwned-title\\x07",
    "\\x1b[31mRED\\x1b[0m",
    "\\x1b[2J",
    "over\\x0dwrite",
    "\\u202eevil\\u202c",
    "zero\\u200bwidth",
    "\\u2066iso\\u2069",
    "\\x9bC1",
]
RAW = ["\x1b", "\x07", "\r", "\u202e", "\u202c", "\u200b", "\u2066", "\u2069", "\x9b"]
T = "t"


def assert_shown_safely(output: str) -> None:
    """Every hostile piece is visible as an escape, and no raw control character is left."""
    for piece in SHOWN:
        assert piece in output, (piece, output)
    for raw in RAW:
        assert raw not in output, (raw, output)


def approval_section(stdout: str, approval_id: str) -> str:
    """The approval panel: from its title line to its bottom border."""
    start = stdout.index(f"approval {approval_id} ·")
    return stdout[start : stdout.index("╰", start)]


def flat(shown: str) -> str:
    """Text without whitespace and panel borders: what is left when a long value is wrapped."""
    return re.sub(r"[\s│]", "", shown)


def reuse_cassette(path: Path) -> Path:
    """H1: the irreversible call reuses the call id of a 1-cent draft two turns earlier.

    A provider may name a later turn's call like an earlier one: it is another call, and
    everything shown for its approval must be found through the approval's own row
    (response id and call id), never through the first call with that id."""
    return write(
        path,
        [
            response(
                "resp_t0",
                [
                    call(
                        "call_X",
                        "create_refund_draft",
                        {"order_id": "ord_1001", "amount_cents": 1, "reason": "goodwill"},
                    )
                ],
            ),
            response(
                "resp_t1",
                [
                    call(
                        "call_Y",
                        "create_refund_draft",
                        {"order_id": "ord_1001", "amount_cents": 4999},
                    )
                ],
            ),
            response(
                "resp_t2",
                [
                    text("Submitting the full refund now."),
                    call("call_X", "submit_refund", {"order_id": "ord_1001", "amount_cents": 4999}),
                ],
            ),
            response("resp_t3", [text("done")]),
        ],
    )


def run_waiting(cli: Invoke, cassette: Path, registry: Path = REGISTRY, *extra: str) -> Any:
    result = cli("run", T, "--registry", str(registry), "--transcript", str(cassette), *extra)
    assert result.exit_code == 10, result.output
    return result


def only_pending(cli: Invoke) -> dict[str, Any]:
    (pending,) = json_out(cli("pending", "--json"))["pending"]
    return dict(pending)


# -- H1: the call of an approval is the approval's own call -----------------------------------


def test_run_hint_shows_the_waiting_calls_arguments_not_an_earlier_call_with_its_id(
    cli: Invoke, tmp_path: Path
) -> None:
    result = run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    apr = only_pending(cli)["approval_id"]
    panel = approval_section(result.stdout, apr)
    assert '"amount_cents": 4999' in panel
    assert '"amount_cents": 1,' not in panel and "goodwill" not in panel
    assert "call_X of response resp_t2" in panel


def test_pending_json_carries_the_waiting_calls_own_arguments_and_response(
    cli: Invoke, tmp_path: Path
) -> None:
    run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    pending = only_pending(cli)
    assert pending["response_id"] == "resp_t2"  # the design.md fields are all still there
    assert {"approval_id", "call_id", "tool", "status", "expires_at"} <= set(pending)
    shown = pending["call"]
    assert shown["arguments"] == {"order_id": "ord_1001", "amount_cents": 4999}
    assert (shown["response_id"], shown["call_id"], shown["turn"]) == ("resp_t2", "call_X", 2)
    assert shown["tool"] == "submit_refund" and shown["risk"] == "irreversible"
    assert shown["arguments_sha256"] == pending["arguments_sha256"]
    assert shown["arguments_match"] is True
    assert shown["policy_revision"] == "pol-3"
    assert shown["expires_at"] == pending["expires_at"]
    assert shown["idempotency_key"].startswith("idk_")
    human = cli("pending")
    panel = approval_section(human.stdout, pending["approval_id"])
    assert '"amount_cents": 4999' in panel and "goodwill" not in panel


def test_approve_prints_the_waiting_call_before_deciding_and_its_json_carries_it(
    cli: Invoke, tmp_path: Path
) -> None:
    run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    apr = only_pending(cli)["approval_id"]
    refused = cli("approve", apr, "--as", "mallory")  # printed first, then refused by policy
    assert refused.exit_code == 2
    panel = approval_section(refused.stdout, apr)
    assert '"amount_cents": 4999' in panel and "goodwill" not in panel
    assert "risk irreversible" in panel and "policy revision  pol-3" in panel
    decided = json_out(cli("approve", apr, "--as", "ops-lead", "--json"))
    assert decided["decision"]["status"] == "APPROVED"
    shown = decided["call"]
    assert shown["arguments"] == {"order_id": "ord_1001", "amount_cents": 4999}
    assert shown["response_id"] == "resp_t2" and shown["risk"] == "irreversible"
    assert shown["arguments_sha256"] == decided["decision"]["arguments_sha256"]
    assert {"idempotency_key", "policy_revision", "expires_at", "tool"} <= set(shown)


def test_diff_attaches_an_approval_to_its_own_call_only(
    cli: Invoke, tmp_path: Path, store_path: Path
) -> None:
    run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    store = open_store(store_path)
    (op,) = store.list_operations()
    run = run_diff.run_view(views.operation_view(store, op.operation_id), "a")
    approvals = {(t.index, c.call_id): c.approval for t in run.turns for c in t.calls}
    assert approvals == {(0, "call_X"): None, (1, "call_Y"): None, (2, "call_X"): "PENDING"}


def test_an_approval_that_names_another_call_is_refused_before_any_decision(
    cli: Invoke, tmp_path: Path, store_path: Path
) -> None:
    run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    apr = only_pending(cli)["approval_id"]
    conn = sqlite3.connect(store_path)  # point the approval at the 1-cent draft's row
    conn.execute("UPDATE approvals SET response_id = 'resp_t0'")
    conn.commit()
    conn.close()
    for args in (("pending",), ("approve", apr, "--as", "ops-lead")):
        result = cli(*args)
        assert result.exit_code == 2, result.output
        assert "names call call_X of response resp_t0" in result.stderr
        assert "goodwill" not in result.stdout
    assert only_pending_status(store_path, apr) == "PENDING"


def only_pending_status(store_path: Path, approval_id: str) -> str:
    return open_store(store_path).get_approval(approval_id).status


# -- L10: the arguments are never cut where a person decides ---------------------------------


def test_a_long_field_sorted_first_never_pushes_the_amount_out_of_view(
    cli: Invoke, tmp_path: Path
) -> None:
    note = "routine monthly settlement " * 18  # 486 characters, sorted before amount_cents
    args = {"account": "acct_42", "account_note": note, "amount_cents": 9999999}
    cassette = write(
        tmp_path / "long.yaml",
        [response("r0", [call("call_P", "payout", args)]), response("r1", [text("done")])],
    )
    result = run_waiting(cli, cassette, PAYOUTS)
    pending = only_pending(cli)
    assert pending["call"]["arguments"] == args
    for output in (
        result.stdout,
        cli("pending").stdout,
        cli("approve", pending["approval_id"], "--as", "x").stdout,
    ):
        panel = approval_section(output, pending["approval_id"])
        assert '"amount_cents": 9999999' in panel
        assert flat(panel).count(flat(note)) == 1  # whole, once, however it is wrapped


# -- M3: hostile text is never markup and never raw -------------------------------------------


def incomplete(reason: str) -> dict[str, Any]:
    answer = response("resp_m0", [], status="incomplete")
    answer["incomplete_details"] = {"reason": reason}
    return answer


def test_markup_and_escapes_in_a_provider_reason_neither_crash_nor_reach_the_terminal(
    cli: Invoke, tmp_path: Path
) -> None:
    cassette = write(tmp_path / "reason.yaml", [incomplete(HOSTILE)])
    result = cli("run", T, "--registry", str(REGISTRY), "--transcript", str(cassette))
    assert result.exit_code == 12, result.output  # INCOMPLETE, not a MarkupError (exit 1)
    assert_shown_safely(result.stdout)
    (op,) = json_out(cli("runs", "--json"))["operations"]
    shown = cli("show", op["operation_id"])
    assert shown.exit_code == 0
    assert_shown_safely(shown.stdout)


def test_markup_in_a_recorded_model_name_does_not_break_runs(cli: Invoke, tmp_path: Path) -> None:
    cassette = write(
        tmp_path / "model.yaml", [response("r0", [text("hi")])], model="gpt[/]" + HOSTILE
    )
    assert cli("run", T, "--registry", str(REGISTRY), "--transcript", str(cassette)).exit_code == 0
    listed = cli("runs", env={"COLUMNS": "400"})
    assert listed.exit_code == 0
    assert "gpt[/][/][conceal]hidden" in listed.stdout
    assert "\x1b" not in listed.stdout and "\u202e" not in listed.stdout


def test_hostile_final_text_is_shown_escaped_and_exact_in_json(cli: Invoke, tmp_path: Path) -> None:
    cassette = write(tmp_path / "final.yaml", [response("r0", [text(HOSTILE)])])
    result = cli("run", T, "--registry", str(REGISTRY), "--transcript", str(cassette))
    assert result.exit_code == 0
    assert_shown_safely(result.stdout)
    (op,) = json_out(cli("runs", "--json"))["operations"]
    as_json = cli("show", op["operation_id"], "--json")
    assert json.loads(as_json.stdout)["final_text"] == HOSTILE  # exact
    for raw in RAW:  # and still safe to print: JSON escapes for every hidden character
        assert raw not in as_json.stdout


def test_a_hostile_tool_name_and_call_id_are_escaped_in_show_and_in_progress(
    cli: Invoke, tmp_path: Path
) -> None:
    name = "[/]get\x1b[8m_order\u202e"
    cassette = write(
        tmp_path / "tool.yaml",
        [
            response("r0", [call("call_\x1b]0;t\x07", name, {"order_id": "ord_1"})]),
            response("r1", [text("ok")]),
        ],
    )
    result = cli("run", T, "--registry", str(REGISTRY), "--transcript", str(cassette), "--verbose")
    assert result.exit_code == 0, result.output
    for output in (result.stdout, result.stderr):
        assert "[/]get\\x1b[8m_order\\u202e" in output
        assert "\x1b" not in output and "\u202e" not in output
    assert "call_\\x1b]0;t\\x07" in result.stdout


def test_hostile_arguments_are_escaped_in_run_pending_and_approve(
    cli: Invoke, tmp_path: Path
) -> None:
    args = {
        "account": "acct_42 [conceal]\x1b[8m",
        "amount_cents": 9999999,
        "memo": "[/conceal]\u202e monthly fee",
    }
    cassette = write(
        tmp_path / "payout.yaml",
        [
            response("r0", [text(HOSTILE), call("call_P", "payout", args)]),
            response("r1", [text("done")]),
        ],
    )
    result = run_waiting(cli, cassette, PAYOUTS)
    apr = only_pending(cli)["approval_id"]
    listed = cli("pending")
    decided = cli("approve", apr, "--as", "ops-lead")
    assert decided.exit_code == 0
    for output in (result.stdout, listed.stdout, decided.stdout):
        panel = approval_section(output, apr)
        assert '"account": "acct_42 [conceal]\\u001b[8m"' in panel
        assert '"amount_cents": 9999999' in panel
        assert '"memo": "[/conceal]\\u202e monthly fee"' in panel
        assert "\x1b" not in output and "\u202e" not in output
    assert_shown_safely(approval_section(decided.stdout, apr))  # what the model wrote


def test_a_handlers_escalation_reason_is_escaped_in_pending(cli: Invoke, tmp_path: Path) -> None:
    cassette = write(
        tmp_path / "esc.yaml",
        [
            response("r0", [call("call_E", "escalate", {"why": HOSTILE})]),
            response("r1", [text("x")]),
        ],
    )
    result = cli("run", T, "--registry", str(PAYOUTS), "--transcript", str(cassette))
    assert result.exit_code == 16, result.output
    assert_shown_safely(result.stdout)
    listed = cli("pending", env={"COLUMNS": "400"})
    assert listed.exit_code == 0
    assert_shown_safely(listed.stdout)


def test_replay_and_diff_output_escape_hostile_text(cli: Invoke, tmp_path: Path) -> None:
    one = write(tmp_path / "one.yaml", [response("r0", [text(HOSTILE)])])
    two = write(tmp_path / "two.yaml", [response("r0", [text("benign")])])
    replayed = cli("replay", str(one), "--registry", str(REGISTRY))
    assert replayed.exit_code == 17, replayed.output  # the recording declares no tools
    assert_shown_safely(replayed.stdout)
    compared = cli("diff", str(one), str(two), env={"COLUMNS": "400"})
    assert compared.exit_code == 18, compared.output
    assert_shown_safely(compared.stdout)


def test_verify_output_escapes_a_hostile_call_id(
    cli: Invoke, tmp_path: Path, store_path: Path
) -> None:
    cassette = write(
        tmp_path / "v.yaml",
        [
            response(
                "r0", [call("call_\x1b]0;t\x07\u202e", "get_order", {"order_id": "ord_1001"})]
            ),
            response("r1", [text("ok")]),
        ],
    )
    assert cli("run", T, "--registry", str(REGISTRY), "--transcript", str(cassette)).exit_code == 0
    conn = sqlite3.connect(store_path)
    conn.execute("UPDATE calls SET model_result_json = replace(model_result_json, '4999', '1')")
    conn.commit()
    conn.close()
    result = cli("verify")
    assert result.exit_code == 20
    assert "call call_\\x1b]0;t\\x07\\u202e" in result.stdout
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout


def test_an_error_line_stays_one_visible_line(cli: Invoke, store_path: Path) -> None:
    open_store(store_path).close()  # an empty store: the error is about the id
    result = cli("show", "op_\x1b]0;t\x07\nforged line")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "op_\\x1b]0;t\\x07\\x0aforged line" in result.stderr


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x00", "\\x00"),
        ("\x07", "\\x07"),
        ("\x08", "\\x08"),
        ("\t", "\\x09"),
        ("\n", "\\x0a"),
        ("\r", "\\x0d"),
        ("\x1b", "\\x1b"),
        ("\x7f", "\\x7f"),
        ("\x85", "\\x85"),
        ("\x9b", "\\x9b"),
        ("\x9d", "\\x9d"),
        ("\u00ad", "\\xad"),
        ("\u061c", "\\u061c"),
        ("\u200b", "\\u200b"),
        ("\u200c", "\\u200c"),
        ("\u200d", "\\u200d"),
        ("\u200e", "\\u200e"),
        ("\u200f", "\\u200f"),
        *((chr(c), f"\\u{c:04x}") for c in range(0x202A, 0x202F)),
        *((chr(c), f"\\u{c:04x}") for c in range(0x2066, 0x206A)),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
        ("\u2060", "\\u2060"),
        ("\ufeff", "\\ufeff"),
        ("\U000e0041", "\\U000e0041"),  # a tag character: invisible text
    ],
)
def test_safe_shows_every_hidden_character_as_an_escape(raw: str, shown: str) -> None:
    assert render.safe(f"a{raw}b").plain == f"a{shown}b"


def test_safe_leaves_ordinary_text_alone_and_never_parses_markup() -> None:
    plain = "Müller paid 49,99 € — 東京 [bold]x[/bold] [/]"
    assert render.safe(plain).plain == plain
    assert render.safe("line one\nline two", newlines=True).plain == "line one\nline two"


# -- the source: nothing untrusted reaches Rich except through the helper ---------------------

#: calls that hand text to Rich (or Click) for the terminal
_SINKS = {"print", "Text", "assemble", "append", "add_row", "add_column", "Panel", "ask", "echo"}


def _sink_name(node: ast.Call) -> str | None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name if name in _SINKS else None


def _interpolations(node: ast.AST) -> list[ast.JoinedStr]:
    """f-strings with a value in them, not counting those inside a ``safe``/``dim`` call."""
    found: list[ast.JoinedStr] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.Call):
            callee = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if callee in {
                "safe",
                "dim",
                "line",
                "short",
                "safe_json",
                "state_text",
                "risk_text",
                "when",
            }:
                return
        if isinstance(n, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) for v in n.values
        ):
            found.append(n)
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return found


def test_no_interpolated_string_reaches_rich_or_click_without_the_helper() -> None:
    """``console.print(f"...{x}...")``, ``Text(f"...")``, ``table.add_row(f"...")`` and the
    like are the way untrusted text reached the terminal raw; in cli/ every interpolated
    string a sink receives goes through ``render.safe`` (or a helper built on it)."""
    offenders = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _sink_name(node):
                args = [*node.args, *(k.value for k in node.keywords)]
                for arg in args:
                    for bad in _interpolations(arg):
                        offenders.append(f"{path.name}:{bad.lineno} {_sink_name(node)}")
    assert offenders == []


def test_the_consoles_never_parse_markup(capsys: pytest.CaptureFixture[str]) -> None:
    render.out.print("[/] [bold]x[/bold]")  # a plain string printed by mistake
    render.err.print("[/x]")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("[/] [bold]x[/bold]\n", "[/x]\n")
    source = "\n".join(p.read_text() for p in CLI.glob("*.py"))
    assert "markup=True" not in source and "from_markup" not in source


def test_a_call_resume_would_refuse_is_flagged_before_anyone_decides(
    cli: Invoke, store_path: Path, tmp_path: Path
) -> None:
    """Stored arguments edited after the approval was asked: the person is told, in red,
    that what they would approve is not what the approval is bound to."""
    run_waiting(cli, reuse_cassette(tmp_path / "reuse.yaml"))
    conn = sqlite3.connect(store_path)
    conn.execute(
        "UPDATE calls SET arguments_json = replace(arguments_json, '4999', '1')"
        " WHERE name = 'submit_refund'"
    )
    conn.commit()
    conn.close()
    pending = only_pending(cli)
    assert pending["call"]["arguments"]["amount_cents"] == 1
    assert pending["call"]["arguments_match"] is False
    panel = approval_section(cli("pending").stdout, pending["approval_id"])
    assert "warning: the stored arguments do not hash to the approval's digest" in panel
