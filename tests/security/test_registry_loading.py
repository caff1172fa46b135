"""Registries and stores read by commands that must not execute them (security review M5, L2,
L8, I4): `verify` imports nothing and writes nothing, `registry check --no-import` runs no
registry code, handler modules cannot shadow the standard library, and hostile YAML in a
registry or price file is one line, not a traceback or a hang.
"""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.tools.registry import check_registry, load_registry


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text[:2000]
    assert "Traceback" not in text
    return lines[0]


def planted(folder: Path, marker: Path, *, name: str | None = None) -> str:
    """A module in ``folder`` that writes ``marker`` when imported; its name."""
    name = name or f"planted_{uuid.uuid4().hex}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "def f(arguments, context):\n    return {}\n"
    )
    return name


def registry_text(handler: str, *, extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        registry: refunds
        revision: "2026-12-01.1"
        policy: {{revision: pol-3, approvers: [ops-lead, finance]}}
        tools:
          submit_refund:
            schema_version: submit-refund-v1
            description: x
            risk: irreversible
            handler: "{handler}"
            approval: always
            parameters: {{type: object{extra}}}
        """
    )


@pytest.fixture
def waiting(cli: Invoke, store_path: Path) -> str:
    """A store whose one operation waits for an approval; its operation id."""
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--json"
    )
    assert result.exit_code == 10, result.output
    return str(json_out(result)["operation_id"])


def point_at(store: Path, registry: Path) -> None:
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("UPDATE operations SET registry_path = ?", (str(registry),))
    conn.close()


def test_verify_never_imports_the_handlers_of_the_registry_a_store_names(
    cli: Invoke, store_path: Path, waiting: str, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED_by_verify"
    module = planted(tmp_path / "evil", marker)
    evil = tmp_path / "evil" / "reg.yaml"
    evil.write_text(registry_text(f"{module}:f"))
    point_at(store_path, evil)
    result = cli("verify", "--json")
    assert not marker.exists()
    assert module not in sys.modules
    assert result.exit_code == 20, result.output  # the drift is still reported
    fields = {m["field"] for m in json_out(result)["mismatches"]}
    assert "tool_sha256" in fields


def test_the_approver_hint_parses_the_registry_without_importing_it(tmp_path: Path) -> None:
    from toolloop_cli.cli.run import _approver

    marker = tmp_path / "PWNED_by_hint"
    module = planted(tmp_path, marker)
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text(f"{module}:f"))
    view = {"registry": {"path": str(path)}, "subject": "ops-lead"}
    assert _approver(view) == "finance"
    assert not marker.exists() and module not in sys.modules


def test_verify_opens_the_store_read_only_and_changes_no_journal_mode(
    cli: Invoke, store_path: Path, waiting: str
) -> None:
    gc.collect()  # closes the connection the in-process run left open
    conn = sqlite3.connect(store_path)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    conn.close()
    assert cli("verify").exit_code == 0
    conn = sqlite3.connect(store_path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


def _make_old(store: Path) -> None:
    """Undo the last migration, as a store written by the previous release looks."""
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'call_lookup_order'")
        conn.execute("DROP INDEX calls_intent")
        conn.execute("DROP INDEX calls_key")
        conn.execute("CREATE INDEX calls_intent ON calls(operation_id, name, arguments_sha256)")
        conn.execute("CREATE INDEX calls_key ON calls(operation_id, idempotency_key)")
    conn.close()


def test_verify_reports_a_store_that_needs_migrations_and_migrates_nothing(
    cli: Invoke, store_path: Path, waiting: str
) -> None:
    _make_old(store_path)
    result = cli("verify")
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert "not at the current schema" in line and "call_lookup_order" in line
    conn = sqlite3.connect(store_path)
    names = {r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")}
    conn.close()
    assert "call_lookup_order" not in names


def test_registry_check_no_import_runs_no_registry_code(cli: Invoke, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED_by_check"
    module = planted(tmp_path, marker)
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text(f"{module}:f"))
    quiet = cli("registry", "check", "--no-import", str(path), "--json")
    assert quiet.exit_code == 0, quiet.output
    assert json_out(quiet)["handlers_imported"] is False
    assert not marker.exists() and module not in sys.modules
    helped = cli("registry", "check", "--help")
    assert "--no-import" in helped.stdout and "executes" in helped.stdout
    default = cli("registry", "check", str(path))  # importing stays the default: its job
    assert default.exit_code == 0 and marker.exists()
    sys.modules.pop(module, None)


def test_registry_check_no_import_still_reports_document_problems(
    cli: Invoke, tmp_path: Path
) -> None:
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text("not an import path").replace("risk: irreversible", "risk: x"))
    result = cli("registry", "check", "--no-import", str(path))
    assert result.exit_code == 2
    assert "tools.submit_refund.handler" in result.stderr
    assert "tools.submit_refund.risk" in result.stderr


# -- handler modules and the registry folder (L2) --------------------------------------------


def test_a_planted_stdlib_module_in_the_registry_folder_never_runs(tmp_path: Path) -> None:
    """The review's reproduction, in a fresh interpreter (smtplib not yet imported)."""
    folder = tmp_path / "shadow"
    marker = tmp_path / "PWNED_shadow_smtplib"
    planted(folder, marker, name="smtplib")
    (folder / "mytool.py").write_text("import smtplib\ndef lookup(a, c):\n    return {}\n")
    (folder / "reg.yaml").write_text(registry_text("mytool:lookup"))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "registry", "check", str(folder / "reg.yaml")],
        cwd=elsewhere, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_a_handler_module_named_like_a_stdlib_module_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted(tmp_path, marker, name="smtplib")
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text("smtplib:f"))
    [(where, message)] = check_registry(path)
    assert where == "tools.submit_refund.handler"
    assert "'smtplib'" in message and "standard-library" in message
    assert not marker.exists()


def test_a_handler_module_shadowing_an_installed_module_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted(tmp_path, marker, name="httpx")
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text("httpx:f"))
    [(where, message)] = check_registry(path)
    assert where == "tools.submit_refund.handler"
    assert "shadows 'httpx'" in message and "site-packages" in message
    assert not marker.exists()


def test_handler_modules_load_from_their_file_with_the_folder_appended(tmp_path: Path) -> None:
    name, sibling = f"tl_handler_{uuid.uuid4().hex}", f"tl_sibling_{uuid.uuid4().hex}"
    (tmp_path / f"{sibling}.py").write_text("VALUE = 7\n")
    (tmp_path / f"{name}.py").write_text(
        f"import sys\nimport {sibling}\nPATH = list(sys.path)\n"
        f"def f(arguments, context):\n    return {{'v': {sibling}.VALUE}}\n"
    )
    path = tmp_path / "reg.yaml"
    path.write_text(registry_text(f"{name}:f"))
    before = list(sys.path)
    try:
        handler: Any = load_registry(path).tools["submit_refund"].handler
    finally:
        for module in (name, sibling):
            sys.modules.pop(module, None)
    assert sys.path == before
    folder = str(tmp_path.resolve())
    seen = handler.__globals__["PATH"]
    assert seen[-1] == folder and folder not in seen[:-1]
    assert Path(handler.__code__.co_filename) == tmp_path / f"{name}.py"
    assert handler({}, None) == {"v": 7}


# -- hostile YAML in registries and price files (L8, I4) ---------------------------------------


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("levels", [300, 20_000])
def test_a_deeply_nested_registry_is_one_problem(cli: Invoke, tmp_path: Path, levels: int) -> None:
    path = tmp_path / "reg_deep.yaml"
    path.write_text(f'registry: x\nrevision: "1"\npolicy: {_deep(levels)}\n')
    check = cli("registry", "check", str(path))
    assert check.exit_code == 2
    assert "Traceback" not in check.output
    assert "deeper than" in check.stderr or "nesting depth" in check.stderr
    run = cli("run", TASK, "--registry", str(path), "--transcript", str(REFUND_OPENAI))
    assert run.exit_code == 2
    assert str(path) in one_line(run.stderr)


def test_a_billion_laughs_registry_is_refused_at_once(tmp_path: Path) -> None:
    """The review's tree under ``parameters.$defs``: 10^9 values if walked, 1 KiB on disk."""
    lol = '        a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for i in range(1, 9):
        lol += f"        l{i}: &l{i} [" + ",".join([f"*{prev}"] * 10) + "]\n"
        prev = f"l{i}"
    text = (
        'registry: shadow\nrevision: "1"\npolicy: {revision: p1, approvers: [ops-lead]}\n'
        "tools:\n  lookup:\n    schema_version: v1\n    description: d\n    risk: read\n"
        '    handler: "toolloop_cli.examples.refunds:get_order"\n'
        f"    parameters:\n      type: object\n      $defs:\n{lol}      examples: [*{prev}]\n"
    )
    path = tmp_path / "reg.yaml"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "registry", "check", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "alias" in done.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models: " + _deep(20_000), "nesting depth"),
        ("models: " + _deep(300), "deeper than 128"),
        ("models: !!python/name:os.system x\n", "could not determine a constructor"),
        ("models: {gpt-4.1: {input_per_mtok: 1, output_per_mtok: [}\n", "not valid YAML"),
        ("models: &m {}\nother: *m\n", "alias"),
        ("models: {}\nmodels: {}\n", "duplicate key"),
        # a run's cost would be infinite (or NaN): stored, it made every later read of the
        # store call the operation tampered, `runs` included
        ("models: {gpt-4.1: {input_per_mtok: .inf, output_per_mtok: 8}}\n", "found inf"),
        ("models: {gpt-4.1: {input_per_mtok: 2, output_per_mtok: .nan}}\n", "found nan"),
        ("models: {gpt-4.1: {input_per_mtok: 1e308, output_per_mtok: 8}}\n", "from 0 to 1,000,000"),
        ("models: {gpt-4.1: {input_per_mtok: -1, output_per_mtok: 8}}\n", "found -1"),
    ],
    ids=[
        "deep",
        "deeper-than-limit",
        "tag",
        "syntax",
        "alias",
        "duplicate",
        "inf",
        "nan",
        "huge",
        "negative",
    ],
)
def test_a_bad_price_file_is_one_line(cli: Invoke, tmp_path: Path, text: str, needle: str) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    result = cli(
        "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI),
        "--prices", str(prices),
    )  # fmt: skip
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert needle in line and str(prices) in line
    listed = cli("runs", "--json")  # nothing half-written that a read trips on
    assert listed.exit_code == 0 or "no store" in listed.stderr, listed.output
