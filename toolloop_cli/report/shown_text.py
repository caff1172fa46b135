"""Untrusted text shown to a person: what can hide, move or fake what is shown, spelled out.

A leaf both renderers use: the HTML report (``report/render.py``) and the terminal
(``cli/render.py``, which imports nothing else of this package).

A model, a cassette, a provider, a handler or a registry may write control characters,
escape sequences, bidi overrides (which reorder what a reader sees: "Trojan Source"),
zero-width characters or separators. Wherever such text reaches a person (the terminal,
``cli/render.py``; the HTML report, ``report/render.py``) each of those characters is shown
as an escape (``\\x1b``, ``\\u202e``) instead.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["SUSPECT", "escape", "hidden", "visible"]

#: characters worth a closer look: anything outside printable ASCII
SUSPECT = re.compile(r"[^\x20-\x7e]")
#: control (C0, DEL, C1), format (bidi, zero-width, BOM, tags), line/paragraph separators,
#: surrogates: each one can move, hide, reorder or fake what is shown
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def escape(ch: str) -> str:
    """One character as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def hidden(ch: str, newlines: bool) -> bool:
    """Whether ``ch`` must be shown escaped (a newline only when ``newlines`` is False)."""
    if ch == "\n":
        return not newlines
    return unicodedata.category(ch) in _HIDDEN_CATEGORIES


def visible(text: str, *, newlines: bool = False) -> str:
    """``text`` with every hidden or display-controlling character written as an escape."""
    return SUSPECT.sub(
        lambda m: escape(m.group()) if hidden(m.group(), newlines) else m.group(), text
    )
