"""Hostile text in a report: markup from a model, a cassette or a handler is shown as text.

A recording is poisoned with script tags, ``javascript:`` URLs, event-handler markup, Jinja2
syntax and comment/script terminators in the task, the model's text, a call's arguments and
a tool result, then replayed with its recorded results. The browser must show every string
literally, run nothing, open no dialog and create no element from it. A second test breaks
the escaping on purpose (raw markup pasted into the file) and shows that the page's
Content-Security-Policy still runs none of it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import BrowserContext
from report_helpers import (
    BRANCHES,
    chromium_context,
    json_of,
    open_report,
    replay,
    toolloop,
    write_report,
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    yield from chromium_context(tmp_path_factory)


HOSTILE = (
    '<script>alert("1")</script><img src=x onerror="alert(\'2\')">'
    '<a href="javascript:alert(3)">x</a>{{ "rendered" ~ "-by-jinja" }}{% if 1 %}<b>b</b>{% endif %}'
    "&amp;<!-- --></script><!--<style>body{display:none}</style>\\u2028"
)


def _poison(value: Any) -> Any:
    """Put HOSTILE into the texts, arguments and results (JSON inside JSON included)."""
    if isinstance(value, dict):
        return {key: _poison(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_poison(item) for item in value]
    if not isinstance(value, str):
        return value
    try:
        inner = json.loads(value)
    except ValueError:
        inner = None
    if isinstance(inner, dict | list):
        return json.dumps(_poison(inner), separators=(",", ":"), ensure_ascii=False)
    return (
        value.replace("arrived damaged", HOSTILE)
        .replace("cus_42", f"cus_{HOSTILE}")
        .replace("The order was delivered", f"{HOSTILE} The order was delivered")
        .replace("I looked up order", f"{HOSTILE} I looked up order")
    )


def hostile_cassette(target: Path) -> Path:
    document = yaml.safe_load((BRANCHES / "happy_path.yaml").read_text())
    for interaction in document["interactions"]:
        request, response = interaction["request"], interaction["response"]
        request["body"] = json.dumps(_poison(json.loads(request["body"])), ensure_ascii=False)
        answer = json.loads(response["body"]["string"])
        response["body"]["string"] = json.dumps(_poison(answer), ensure_ascii=False)
    document["toolloop"] = _poison(document["toolloop"])
    target.write_text(yaml.safe_dump(document, allow_unicode=True, width=1 << 30))
    return target


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def test_hostile_text_is_shown_literally_and_nothing_of_it_runs(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, hostile_cassette(tmp_path / "hostile.yaml"), "--results", "recorded")
    shown = json_of(toolloop(store, "show", op_id, "--json"))
    assert shown["state"] == "COMPLETED" and HOSTILE in shown["final_text"]
    report = write_report(store, op_id, tmp_path / "r.html")
    html = report.read_text()
    assert "<script>alert(" not in html and "<img" not in html and "<b>" not in html
    assert html.count("</script>") == 2  # the data block's and the script's own

    watched = open_report(browser, report)
    page = watched.page
    page.click("#expand-all")
    assert page.inner_text("#final-text") == shown["final_text"]
    assert page.inner_text("#task") == shown["task"] and HOSTILE in shown["task"]
    assert HOSTILE in page.locator(".model-text").first.inner_text()
    draft = shown["calls"][1]
    assert HOSTILE in draft["arguments"]["reason"]
    call = page.locator("details.call").nth(1)
    assert call.locator("pre.arguments").inner_text() == pretty(draft["arguments"])
    order = shown["calls"][0]
    assert HOSTILE in order["result"]["result"]["customer_id"]
    result = page.locator("details.call").nth(0).locator("pre.model-result").inner_text()
    assert result == pretty(order["result"])
    text = page.inner_text("body")  # shown as written, never evaluated by the template engine
    assert '{{ "rendered" ~ "-by-jinja" }}' in text and "rendered-by-jinja" not in text

    dom = page.evaluate(
        """() => ({
            scripts: document.scripts.length,
            styles: document.querySelectorAll('style').length,
            made: document.querySelectorAll('img, b, iframe, object, embed, svg').length,
            links: Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href')),
            handlers: Array.from(document.querySelectorAll('*')).flatMap(
                el => Array.from(el.attributes).map(at => at.name)
            ).filter(name => name.startsWith('on')),
            bodyShown: getComputedStyle(document.body).display,
            embedded: JSON.parse(document.getElementById('report-data').textContent)
                .operation.final_text,
        })"""
    )
    assert dom["scripts"] == 2 and dom["styles"] == 1 and dom["made"] == 0
    assert all(href.startswith("#") for href in dom["links"])
    assert dom["handlers"] == []
    assert dom["bodyShown"] == "block"
    assert dom["embedded"] == shown["final_text"]  # the JSON block survives escaping intact
    watched.assert_quiet()


def _hash_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_policy_pins_the_one_script_and_style_and_allows_nothing_else(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "happy_path.yaml")
    watched = open_report(browser, write_report(store, op_id, tmp_path / "r.html"))
    page = watched.page
    policy = page.get_attribute("meta[http-equiv=Content-Security-Policy]", "content")
    assert policy is not None
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    script = page.evaluate("() => document.scripts[1].textContent")
    style = page.evaluate("() => document.querySelector('style').textContent")
    assert directives == {
        "default-src": "'none'",
        "script-src": _hash_source(script),
        "style-src": _hash_source(style),
        "img-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
    }
    watched.assert_quiet()


def test_markup_that_escaped_escaping_would_still_not_run(
    browser: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    op_id = replay(store, BRANCHES / "happy_path.yaml")
    report = write_report(store, op_id, tmp_path / "r.html")
    injected = (
        '<img id="bad-img" src="x" onerror="alert(1)"><script>alert(2)</script>'
        '<a id="bad-link" href="javascript:alert(3)">go</a>'
        '<script src="https://example.invalid/x.js"></script>'
        '<div id="bad-div" onclick="alert(4)">click</div>'
    )
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub("<main>", "<main>" + injected, report.read_text(), count=1))
    watched = open_report(browser, broken)
    watched.page.click("#bad-link")
    watched.page.click("#bad-div")
    assert watched.dialogs == []
    assert watched.console_errors  # each refusal is reported by the browser
    assert all("Content Security Policy" in error for error in watched.console_errors)
    assert not any(url.startswith("https:") for url in watched.responses)


HIDING = "\u202eevil\u202c\u200b\x00\x1b[31m"


def _hiding(value: Any) -> Any:
    """The task (the user's message in every request) with HIDING inside it."""
    if isinstance(value, dict):
        return {key: _hiding(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_hiding(item) for item in value]
    if isinstance(value, str) and value.startswith("Order ord_1001 arrived damaged"):
        return value.replace("arrived damaged", f"arrived {HIDING} damaged")
    return value


def test_characters_that_hide_or_reorder_text_are_shown_as_escapes(
    browser: BrowserContext, tmp_path: Path
) -> None:
    """A bidi override can make a page show text in another order than it holds ("Trojan
    Source"); zero-width and control characters hide it. The report spells each one out, as
    the terminal does; the store (``show --json``) keeps the text exactly."""
    document = yaml.safe_load((BRANCHES / "happy_path.yaml").read_text())
    for interaction in document["interactions"]:
        request = interaction["request"]
        request["body"] = json.dumps(_hiding(json.loads(request["body"])))
    document["toolloop"] = _hiding(document["toolloop"])
    cassette = tmp_path / "hiding.yaml"
    cassette.write_text(yaml.safe_dump(document, allow_unicode=True, width=1 << 30))
    store = tmp_path / "store.db"
    op_id = replay(store, cassette, "--results", "recorded")
    shown = json_of(toolloop(store, "show", op_id, "--json"))
    assert HIDING in shown["task"]
    report = write_report(store, op_id, tmp_path / "r.html")
    html = report.read_text()
    assert not any(ch in html for ch in HIDING if ch not in "evil[31m")
    watched = open_report(browser, report)
    task = watched.page.inner_text("#task")
    assert "arrived \\u202eevil\\u202c\\u200b\\x00\\x1b[31m damaged" in task
    watched.assert_quiet()
