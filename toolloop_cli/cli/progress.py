"""Progress of ``run``/``resume``/``approve --resume`` on stderr, so stdout stays clean.

One line per model turn: the turn, each call's tool and state, and where the operation went
(``turn 1  create_refund_draft SUCCEEDED``); while a streamed call's arguments arrive, a line
says the model is preparing it (nothing has run). On a terminal a Rich status line shows the
turn in flight. The raw transitions (``MODEL_REQUESTED -> VALIDATING``) and call moves only with
``--verbose``. Tool names come from the model: they are shown through ``render.safe``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.status import Status
from rich.text import Text

from . import render
from .render import dim, line, safe

#: where a turn's line ends: the operation stopped, or waits for a person
_SETTLED = frozenset(
    {
        "WAITING_APPROVAL",
        "COMPLETED",
        "REFUSED",
        "INCOMPLETE",
        "FAILED",
        "NO_PROGRESS",
        "BUDGET_EXHAUSTED",
        "ESCALATED",
    }
)


class TurnProgress:
    """An event sink for the engine (``on_event``) that prints a line per turn."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.turn: int | None = None
        self.calls: dict[str, tuple[str, str]] = {}
        self.status: Status | None = None
        if render.err.is_terminal:
            self.status = Status(Text(""), console=render.err, spinner="dots")
            self.status.start()

    def __call__(self, kind: str, data: dict[str, object]) -> None:
        if self.verbose:
            self._raw(kind, data)
        if kind == "request":
            self._flush(None)
            self.turn = _int(data.get("turn"))
            self._show(dim("  asking the model"))
        elif kind == "call":
            turn = _int(data.get("turn"))
            if turn is not None and turn != self.turn:
                self._flush(None)
                self.turn = turn
            self.calls[str(data["call_id"])] = (str(data["name"]), str(data["state"]))
            self._show(self._calls())
        elif kind == "call_streaming":  # arguments still arriving: nothing has run
            render.err.print(
                line(
                    dim("    model is preparing call "),
                    dim(data["call_id"]),
                    dim(" "),
                    dim(data["name"]),
                )
            )
            self._show(line(dim("  model is preparing "), safe(data["name"])))
        elif kind == "backoff":
            seconds = float(str(data["seconds"]))
            render.err.print(dim(f"  retrying in {seconds:.2f} s"))
        elif kind == "transition" and str(data["target"]) in _SETTLED:
            self._flush(str(data["target"]))

    def close(self) -> None:
        self._flush(None)
        if self.status is not None:
            self.status.stop()
            self.status = None

    def _raw(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "transition":
            render.err.print(dim(f"  {data['source']} -> {data['target']}"))
        elif kind == "call":
            render.err.print(
                line(
                    dim("    call "),
                    safe(data["call_id"]),
                    safe(" "),
                    safe(data["name"]),
                    dim(": "),
                    render.state_text(str(data["state"])),
                )
            )

    def _label(self) -> Text:
        return safe("turn " + ("?" if self.turn is None else str(self.turn)), "bold")

    def _calls(self) -> Text:
        shown = Text()
        for name, state in self.calls.values():
            shown.append_text(line(safe("  "), safe(name), safe(" "), render.state_text(state)))
        return shown

    def _show(self, what: Text) -> None:
        if self.status is not None:
            self.status.update(line(self._label(), what))

    def _flush(self, target: str | None) -> None:
        """Print the turn's line once (its calls and, when it settled, the operation's state)."""
        if self.turn is None and not self.calls and target is None:
            return
        if self.calls:
            shown = line(self._label(), self._calls())
        else:
            shown = line(
                self._label(), dim("  final text" if target == "COMPLETED" else "  no calls")
            )
        if target is not None:
            shown.append_text(line(dim("  · operation "), render.state_text(target)))
        render.err.print(shown)
        self.turn, self.calls = None, {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


@contextmanager
def progress(as_json: bool, verbose: bool) -> Iterator[TurnProgress | None]:
    """The sink for one run/resume (None with ``--json``: programs get the JSON only)."""
    if as_json:
        yield None
        return
    sink = TurnProgress(verbose)
    try:
        yield sink
    finally:
        sink.close()
