"""The report as one self-contained HTML file: Jinja2 with autoescape, inline CSS and JS.

The page loads nothing: its Content-Security-Policy allows no source at all except the one
inline style and the one inline script, each pinned by its SHA-256 (computed here, from the
bytes written), and ``data:`` images. So an inline event handler, a remote script or a
``javascript:`` URL would not run even if markup got through; and none does, because every
value from the store is escaped by autoescape (no ``|safe`` on data: only our own CSS and JS
are marked safe). The data the script reads is embedded as JSON with ``<``, ``>``, ``&`` and
``'`` escaped (Jinja2's ``tojson``), so a ``</script>`` or ``<!--`` in it ends nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from toolloop_cli.errors import UsageError
from toolloop_cli.report.shown_text import visible
from toolloop_cli.transcripts.overwrite import replace_whole

__all__ = ["content_security_policy", "render_html", "write_report"]

#: State → CSS class; anything else (a tampered store) gets the neutral one.
_STATE_CLASS = {
    "COMPLETED": "ok",
    "SUCCEEDED": "ok",
    "RECONCILED": "ok",
    "APPROVED": "ok",
    "WAITING_APPROVAL": "wait",
    "PENDING": "wait",
    "EXECUTING": "wait",
    "PROPOSED": "wait",
    "ESCALATED": "escalated",
    "UNKNOWN_OUTCOME": "escalated",
    "DUPLICATE": "muted",
    "NOT_EXECUTED": "muted",
}
_BAD = ("REFUSED", "INCOMPLETE", "FAILED", "NO_PROGRESS", "BUDGET_EXHAUSTED", "INVALID")
_BAD_TOO = ("DENIED", "EXPIRED", "TIMED_OUT")


def state_class(state: object) -> str:
    if state in _BAD or state in _BAD_TOO:
        return "state bad"
    return f"state {_STATE_CLASS.get(str(state), 'other')}"


def pretty(value: Any) -> str:
    """JSON for people: indented, keys in stored order, non-ASCII kept."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.6f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "—" if value is None else str(value)


@cache
def _asset(name: str) -> str:
    text = resources.files("toolloop_cli.report").joinpath("templates", name).read_text("utf-8")
    closing = "</script" if name.endswith(".js") else "</style"
    if closing in text.lower():  # would end the element early: refuse our own broken asset
        raise UsageError(f"report asset {name} contains {closing}")
    return text


def _shown(value: object) -> object:
    """Each value a template prints, before autoescape: text from the store with every
    character that could hide, reorder or fake what the page shows (controls, bidi overrides,
    zero-width) spelled out as an escape, as the terminal shows it (``shown_text``). Our own
    markup (``Markup``: the inline CSS and JS, ``tojson``) is left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value, newlines=True)
    return value


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("toolloop_cli.report", "templates"),
        autoescape=True,
        finalize=_shown,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = pretty
    env.filters["number"] = number
    env.filters["state_class"] = state_class
    return env


def _sha256_source(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(script: str, style: str) -> str:
    """Nothing may load; only this script and this style (by hash) may run or apply."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {_sha256_source(script)}",
            f"style-src {_sha256_source(style)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


def render_html(data: dict[str, Any]) -> str:
    """The report page for ``data`` (``report.data.report_data``)."""
    script, style = _asset("report.js"), _asset("report.css")
    template = _environment().get_template("report.html.j2")
    return template.render(
        data=data,
        script=Markup(script),  # our own asset, hashed into the CSP; never data
        style=Markup(style),
        csp=content_security_policy(script, style),
    )


def write_report(path: Path, html: str) -> None:
    """Write the page whole or not at all (temporary file, fsync, rename)."""
    replace_whole(path, html, "report")
