"""Runs of the refund exercise to report on, and a real Chromium (Playwright) to open them in.

The browser is Debian's Chromium found on PATH (package ``chromium``; ``.ci/run`` installs
it); Playwright never downloads one. Every page records its console errors, page errors,
dialogs and requests, so a test can assert that a report ran no foreign script and asked
for nothing but its own file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    BrowserContext,
    ConsoleMessage,
    Dialog,
    FloatRect,
    Page,
    sync_playwright,
)
from support.paths import REGISTRY, ROOT, TASK
from typer.testing import CliRunner

from toolloop_cli.cli import app

BRANCHES = ROOT / "transcripts" / "branches" / "openai"
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def toolloop(store: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run one toolloop command in-process on ``store``; returns the Click result."""
    result = CliRunner().invoke(
        app, [*args, "--store", str(store)], env=env, catch_exceptions=False
    )
    return result


def json_of(result: Any) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


#: live handlers run on an operator's decision, never on one written in the cassette
APPROVER = ("--approve-as", "ops-lead")


def replay(store: Path, cassette: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    """Replay a cassette (live handlers of the refund registry unless ``extra`` says else)."""
    args = extra or ("--registry", str(REGISTRY))
    if "--registry" in args and "recorded" not in args and "--approve-as" not in args:
        args = (*args, *APPROVER)
    result = toolloop(store, "replay", str(cassette), *args, "--json", env=env)
    assert result.exit_code in (0, 10, 12, 14, 16, 17), result.output
    return str(json_of(result)["operation_id"])


def completed_run(store: Path, transcript: Path = BRANCHES / "happy_path.yaml") -> str:
    """The happy path as a person runs it: stop for approval, approve, resume, COMPLETED."""
    started = toolloop(
        store, "run", TASK, "--registry", str(REGISTRY), "--transcript", str(transcript), "--json"
    )
    assert started.exit_code == 10, started.output
    (approval,) = json_of(started)["approvals"]
    done = toolloop(
        store, "approve", approval["approval_id"], "--as", "ops-lead", "--resume", "--json"
    )
    assert done.exit_code == 0, done.output
    return str(json_of(done)["operation_id"])


def escalated_run(store: Path, tmp_path: Path) -> str:
    """A submit that times out with no reconcile handler: UNKNOWN_OUTCOME, then ESCALATED."""
    registry = tmp_path / "no-reconcile.yaml"
    text = REGISTRY.read_text()
    registry.write_text(
        "\n".join(line for line in text.splitlines() if "reconcile: " not in line) + "\n"
    )
    started = toolloop(
        store,
        "run",
        TASK,
        "--registry",
        str(registry),
        "--transcript",
        str(BRANCHES / "submit_timeout_reconciled.yaml"),
        "--tool-timeout-ms",
        "200",
        "--json",
    )
    assert started.exit_code == 10, started.output
    (approval,) = json_of(started)["approvals"]
    slow = {"TOOLLOOP_REFUND_DELAY_MS": "600"}
    stopped = toolloop(
        store, "approve", approval["approval_id"], "--as", "ops-lead", "--resume", env=slow
    )
    assert stopped.exit_code == 16, stopped.output
    return str(json_of(started)["operation_id"])


def diverging_registry(tmp_path: Path) -> Path:
    """The refund registry with get_order described otherwise: every request diverges."""
    registry = tmp_path / "changed.yaml"
    registry.write_text(
        REGISTRY.read_text().replace(
            "description: Look up an order by its id",
            "description: Find an order by its id",
        )
    )
    return registry


def write_report(store: Path, operation_id: str, target: Path, *extra: str) -> Path:
    result = toolloop(store, "report", operation_id, "-o", str(target), *extra)
    assert result.exit_code == 0, result.output
    return target


@dataclass
class Watched:
    """A page and everything it did that a report must never do."""

    page: Page
    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)

    def assert_quiet(self) -> None:
        """No console error, no script error, no dialog, no request but the file itself."""
        assert self.console_errors == []
        assert self.page_errors == []
        assert self.dialogs == []
        assert self.requests == [self.url]
        assert self.responses == [self.url]

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector)


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("Debian's chromium is not installed: apt-get install -y chromium")
    return found


def chromium_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """Chromium with a fresh profile (each test module's ``browser`` fixture yields from it)."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium(),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


def open_report(browser: BrowserContext, path: Path) -> Watched:
    """Open a report from ``file://`` and watch what it does."""
    page = browser.new_page()
    watched = Watched(page, path.resolve().as_uri())

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.console_errors.append(message.text)

    def on_dialog(dialog: Dialog) -> None:
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.page_errors.append(str(error)))
    page.on("dialog", on_dialog)
    page.on("request", lambda request: watched.requests.append(request.url))
    page.on("response", lambda response: watched.responses.append(response.url))
    page.goto(watched.url)
    page.wait_for_selector("html[data-ready=true]")
    return watched


def screenshot(watched: Watched, name: str, tmp_path: Path, selector: str | None = None) -> Path:
    """Save a screenshot: into docs/screenshots with TOOLLOOP_UPDATE_SCREENSHOTS=1 (the
    README embeds those), else beside the test, so a test run leaves the tree unchanged."""
    folder = SCREENSHOTS if os.environ.get("TOOLLOOP_UPDATE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if selector is None:  # the top of the page, as it opens
        watched.page.evaluate("() => window.scrollTo(0, 0)")
        clip: FloatRect = {"x": 0, "y": 0, "width": 1280, "height": 1280}
        watched.page.screenshot(path=str(target), full_page=True, clip=clip)
    else:
        watched.page.locator(selector).screenshot(path=str(target))
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    return target
