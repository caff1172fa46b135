"""The guards a replayed operation runs under.

- A toolloop recording carries its guards (``toolloop.guards``): they decided its path, so a
  replay of recorded results keeps them; when handlers run (``live``) they may only tighten
  the registry's defaults, so a cassette never widens what runs.
- Another tool's recording has none. When handlers run, the registry's defaults apply (or
  toolloop's own without a registry). When nothing runs (``recorded``), the guards are the
  defaults widened just enough to let the recorded path through: at least as many turns,
  tool calls and retries as the conversation holds, and a repeat limit above its most
  repeated call. Nothing runs, so no limit would protect anything; a default the other tool
  never had would only end the replay early and report its own limit as a divergence.
  The A,B,A,B alternation check still applies.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from toolloop_cli.engine.ids import arguments_digest
from toolloop_cli.engine.records import Guards
from toolloop_cli.engine.types import ProposedCall, TurnOutcome
from toolloop_cli.errors import CanonicalJSONError, TranscriptError
from toolloop_cli.replay.deps import Plan
from toolloop_cli.replay.split import Conversation

__all__ = ["replay_guards", "stricter"]


def replay_guards(plan: Plan) -> Guards:
    """The guards of the operation replaying ``plan``'s conversation (see the module doc)."""
    recorded = _recorded_guards(plan.meta)
    defaults = Guards()
    if plan.registry is not None:
        from toolloop_cli.wiring import build_guards

        defaults = build_guards(plan.registry, {})
    if recorded is None:
        return covering(defaults, plan.conversation) if plan.mode == "recorded" else defaults
    if plan.registry is None or plan.mode == "recorded":
        return recorded
    return stricter(defaults, recorded)


def covering(base: Guards, conversation: Conversation) -> Guards:
    """``base`` with each count limit raised to what the recorded conversation reached."""
    turns = [turn for turn in conversation.turns if turn is not None]
    answers = sum(1 for turn in turns if turn.outcome is not TurnOutcome.API_FAILURE)
    failures = len(conversation.interactions) - answers
    calls = [call for turn in turns for call in turn.calls]
    repeats = Counter(_intent(call) for call in calls)
    most = max(repeats.values(), default=0)
    return base.model_copy(
        update={
            "max_turns": max(base.max_turns, answers),
            "max_tool_calls": max(base.max_tool_calls, len(calls)),
            "max_retries": max(base.max_retries, failures),
            "no_progress_after": max(base.no_progress_after, most + 1),
        }
    )


def _intent(call: ProposedCall) -> tuple[str, str]:
    """A tool and the digest of its arguments, as the engine counts repeats (else the text as
    sent, when the adapter could not read it: such a call is INVALID, never run)."""
    if call.arguments is None:
        return call.name, call.raw_arguments
    try:
        return call.name, arguments_digest(call.arguments)
    except CanonicalJSONError:
        return call.name, call.raw_arguments


def _recorded_guards(meta: dict[str, Any]) -> Guards | None:
    recorded = meta.get("guards")
    if not isinstance(recorded, dict):
        return None
    known = {k: v for k, v in recorded.items() if k in Guards.model_fields}
    try:
        return Guards.checked(known)
    except ValueError as exc:
        raise TranscriptError(f"the recording's toolloop.guards are invalid: {exc}") from None


def stricter(a: Guards, b: Guards) -> Guards:
    """Each guard at its stricter value: the lower limit (None is no limit), per tool too."""
    values: dict[str, Any] = {}
    for name in Guards.model_fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            both = sorted({*x, *y})
            values[name] = {t: min(x.get(t, y.get(t)), y.get(t, x.get(t))) for t in both}
        else:
            values[name] = x if y is None else y if x is None else min(x, y)
    return Guards.model_validate(values)
