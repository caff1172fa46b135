"""Output: Rich for people, exactly one JSON object for programs. The only place that prints.

Every string a model, a cassette, a provider, a handler or a registry wrote is untrusted: it
reaches the terminal only through ``safe`` (or ``safe_json``), which returns a Rich ``Text``
(never parsed as markup) with every control character, escape sequence, bidi override and
invisible character replaced by a visible escape (``\\x1b``, ``\\u202e``). Both consoles are
``markup=False`` as well, so a plain string printed by mistake is never parsed as markup
either. ``--json`` output is untouched: JSON escaping already makes it exact.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console, RenderableType
from rich.text import Text

from toolloop_cli.report.shown_text import SUSPECT, escape, hidden


def _discard(stream: Any) -> None:
    """Send the rest of ``stream``'s output nowhere: its reader has gone (``| head``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


class _Console(Console):
    """A console whose reader may go away (``toolloop run … | head -1``): the rest of its
    output is dropped and the command goes on to its own exit code. Rich's default raised
    ``SystemExit(1)``: exit 1 ("a bug") instead of the operation's state, from whatever line
    printed, between two steps of a run."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _discard(self.file)


out = _Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
err = _Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)

STATE_STYLE = {
    "COMPLETED": "bold green",
    "SUCCEEDED": "green",
    "RECONCILED": "green",
    "APPROVED": "green",
    "WAITING_APPROVAL": "bold yellow",
    "PENDING": "bold yellow",
    "EXECUTING": "cyan",
    "MODEL_REQUESTED": "cyan",
    "VALIDATING": "cyan",
    "RESULTS_READY": "cyan",
    "PROPOSED": "cyan",
    "DUPLICATE": "blue",
    "REFUSED": "bold red",
    "INCOMPLETE": "bold red",
    "FAILED": "bold red",
    "NO_PROGRESS": "bold red",
    "BUDGET_EXHAUSTED": "bold red",
    "INVALID": "red",
    "DENIED": "red",
    "EXPIRED": "red",
    "TIMED_OUT": "red",
    "NOT_EXECUTED": "dim",
    "ESCALATED": "bold magenta",
    "UNKNOWN_OUTCOME": "bold magenta",
}
RISK_STYLE = {"read": "green", "write": "yellow", "irreversible": "bold red"}

_ESCAPE_STYLE = "reverse"


def safe(value: object, style: str = "", *, newlines: bool = False) -> Text:
    """Untrusted text for the terminal: a ``Text`` (no markup), escapes shown in reverse video.

    ``newlines=True`` keeps line feeds as line breaks (multi-line text inside a panel); every
    other control character, CR included, is always shown escaped.
    """
    text = value if isinstance(value, str) else str(value)
    result = Text(style=style)
    last = 0
    for match in SUSPECT.finditer(text):
        ch = match.group()
        if not hidden(ch, newlines):
            continue
        result.append(text[last : match.start()])
        result.append(escape(ch), style=_ESCAPE_STYLE)
        last = match.end()
    result.append(text[last:])
    return result


def line(*parts: Text | str) -> Text:
    """Join ``Text`` parts; a plain ``str`` part is treated as untrusted and made ``safe``."""
    result = Text()
    for part in parts:
        result.append_text(part if isinstance(part, Text) else safe(part))
    return result


def dim(value: object) -> Text:
    return safe(value, "dim")


def compact_json(value: Any) -> str:
    """One-line JSON with sorted keys (the order canonical arguments are hashed in)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def safe_json(value: Any, *, pretty: bool = False, style: str = "") -> Text:
    """A JSON value for a person: sorted keys, whole (never cut), made ``safe``.

    JSON escaping already spells out C0 controls inside strings; ``safe`` adds the rest
    (C1, bidi, zero-width, separators). A raw string (arguments that never parsed) is shown
    as it is, escaped.
    """
    if isinstance(value, str):
        return safe(value, style)
    if pretty:
        return safe(
            json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2), style, newlines=True
        )
    return safe(compact_json(value), style)


def short(value: Any, width: int = 80, style: str = "") -> Text:
    """A value cut to ``width`` characters (for results and overviews, never for arguments)."""
    text = compact_json(value)
    return safe(text if len(text) <= width else text[: width - 1] + "…", style)


def newline() -> Text:
    """A line break of our own (``safe`` shows one inside untrusted text as ``\\x0a``)."""
    return Text("\n")


def state_text(state: str) -> Text:
    return safe(state, STATE_STYLE.get(state, "bold"))


def risk_text(risk: str | None) -> Text:
    if risk is None:
        return safe("unknown", "bold red")
    return safe(risk, RISK_STYLE.get(risk, "bold"))


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def block(renderable: RenderableType) -> None:
    """A table or panel on stdout, laid out to the terminal's width (lines are never wrapped,
    so a command to copy stays one line; blocks are, so they fit 80 columns)."""
    out.print(renderable, soft_wrap=False)


def emit_text(text: str) -> None:
    """A document a command writes whole to stdout (``report -o -``), as it is."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader has gone: the exit code still says what happened
        _discard(sys.stdout)


def emit_json(obj: dict[str, Any]) -> None:
    """The one JSON object of a ``--json`` command, on stdout.

    The same value JSON decoders read, with the characters ``json.dumps`` leaves raw (C1
    controls, bidi overrides, zero-width and separator characters) written as ``\\u`` escapes
    too, so the object is safe to print on a terminal as it is.
    """
    text = json.dumps(obj, ensure_ascii=False, sort_keys=False)
    text = SUSPECT.sub(
        lambda m: _json_escape(m.group()) if hidden(m.group(), False) else m.group(), text
    )
    emit_text(text + "\n")
