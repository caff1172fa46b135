"""Where the requests a replay sends diverge from the requests the recording sent.

Per model request (a "turn" here is the request index, as in ``show``), the default check
compares what matters to the model and to the audit, and nothing that a faithful rerun may
legitimately change:

- the tool results the request carries that the previous request did not: the same call ids,
  and for each the same value (a JSON path into the result names the first differences) and
  the same error flag;
- the tools it declares (name, description, parameters);
- that both runs sent the same number of requests.

``strict`` also compares whole request bodies (RFC 8785 canonical JSON), for recordings made
by toolloop itself, except the top-level fields in ``STRICT_IGNORED``. A body difference is
reported only for a turn whose results and tools matched, so one cause is one divergence.

A result is compared as JSON when its text is JSON. A recording made by another tool carries
the bare tool output where toolloop sends an envelope (``{"ok": true, "result": …}``); then the
envelope's ``result`` (or ``error``) is what is compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolloop_cli.engine.compare import json_diff, json_path

from .shapes import Api, declared_tools, text_of

__all__ = [
    "STRICT_IGNORED",
    "Divergence",
    "RecordedResult",
    "ResultsReader",
    "compare_outcome",
    "compare_requests",
    "error_flag",
    "is_envelope",
    "keyed",
    "recorded_result",
    "result_list",
    "results_in_request",
]

#: Top-level request fields ``--strict-requests`` ignores: they name the caller or a cache
#: session, not the conversation, and a replay is another caller (see docs/replay.md).
STRICT_IGNORED = frozenset({"metadata", "user", "safety_identifier", "prompt_cache_key"})


@dataclass(frozen=True)
class RecordedResult:
    """One tool result as a request carries it back to the model."""

    call_id: str
    value: Any  # the parsed JSON when the text is JSON, else the text (or parts) as sent
    is_error: bool | None = None  # the request's own error flag; None where the API has none


ResultsReader = Callable[[Api, Any], list[RecordedResult]]
JSONObjectLike = dict[str, Any]


def recorded_result(call_id: str, output: Any, is_error: bool | None = None) -> RecordedResult:
    """A result as a request carried it; JSON text is compared as the JSON it encodes."""
    return RecordedResult(call_id, _parsed(output), is_error)


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def result_list(api: Api, body: Any) -> list[RecordedResult]:
    """Every tool result in a request body, in order, for any known API family.

    OpenAI Responses ``function_call_output`` items, Anthropic ``tool_result`` blocks, Gemini
    Interactions ``function_result`` steps and generateContent ``functionResponse`` parts
    (keyed by their ``id``, else by function name, as that API often sends no id).
    """
    if not isinstance(body, dict):
        return []
    found = (_result(item, api[1]) for item in _items(body, api[1]))
    return [result for result in found if result is not None]


def results_in_request(api: Api, body: Any) -> dict[str, RecordedResult]:
    """(call id → result) of the tool results in a request body (first one of an id wins)."""
    found: dict[str, RecordedResult] = {}
    for result in result_list(api, body):
        found.setdefault(result.call_id, result)
    return found


def keyed(results: Sequence[RecordedResult]) -> dict[str, RecordedResult]:
    """Results by call id; a repeated id (generateContent's names) as ``id#2``, ``id#3``…"""
    found: dict[str, RecordedResult] = {}
    seen: dict[str, int] = {}
    for result in results:
        seen[result.call_id] = seen.get(result.call_id, 0) + 1
        count = seen[result.call_id]
        found[result.call_id if count == 1 else f"{result.call_id}#{count}"] = result
    return found


def _items(body: JSONObjectLike, family: str) -> list[Any]:
    if family in ("messages", "generate_content"):
        outer, inner = ("messages", "content") if family == "messages" else ("contents", "parts")
        entries = body.get(outer)
        return [
            item
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and isinstance(entry.get(inner), list)
            for item in entry[inner]
        ]
    items = body.get("input")
    return items if isinstance(items, list) else []


def _result(item: Any, family: str) -> RecordedResult | None:
    if not isinstance(item, dict):
        return None
    match family:
        case "responses" if item.get("type") == "function_call_output":
            call_id, value, flag = item.get("call_id"), _parsed(item.get("output")), None
        case "messages" if item.get("type") == "tool_result":
            content = item.get("content")
            text = text_of(content)
            value = _parsed(text) if text is not None else content
            call_id, flag = item.get("tool_use_id"), _flag(item.get("is_error", False))
        case "interactions" if item.get("type") == "function_result":
            call_id, value = item.get("call_id"), _parsed(item.get("result"))
            flag = _flag(item.get("is_error"))
        case "generate_content" if isinstance(item.get("functionResponse"), dict):
            response = item["functionResponse"]
            call_id = response.get("id") or response.get("name")
            value, flag = response.get("response"), None
        case _:
            return None
    return RecordedResult(call_id, value, flag) if isinstance(call_id, str) else None


def is_envelope(value: Any) -> bool:
    """A toolloop result envelope: ``{"ok": true, "result": …}`` or ``{"ok": false, "error"}``."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("ok"), bool)
        and ("result" in value if value["ok"] else isinstance(value.get("error"), dict))
    )


def error_flag(result: RecordedResult) -> bool | None:
    """Whether a result reports an error: the request's flag, else the envelope's ``ok``."""
    if result.is_error is not None:
        return result.is_error
    if is_envelope(result.value):
        return result.value["ok"] is not True
    return None


@dataclass(frozen=True)
class Divergence:
    """One place where the replay differs from the recording."""

    kind: str
    turn: int | None
    call_id: str | None
    path: str
    recorded: Any
    replayed: Any
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "turn": self.turn,
            "call_id": self.call_id,
            "path": self.path,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "message": self.message,
        }


def compare_requests(
    api: Api,
    sent: Sequence[Any],
    recorded: Sequence[Any],
    *,
    strict: bool = False,
    read_results: ResultsReader = result_list,
) -> list[Divergence]:
    """Divergences between the request bodies a replay sent and those recorded, in order."""
    found: list[Divergence] = []
    seen_tools: set[tuple[str, str]] = set()
    before: tuple[dict[str, RecordedResult], dict[str, RecordedResult]] = ({}, {})
    for turn in range(max(len(sent), len(recorded))):
        if turn >= len(recorded):
            found.append(_count_divergence(turn, "extra_request", len(recorded)))
            continue
        if turn >= len(sent):
            found.append(_count_divergence(turn, "missing_request", len(sent)))
            continue
        s_results = keyed(read_results(api, sent[turn]))
        r_results = keyed(read_results(api, recorded[turn]))
        here = _compare_results(turn, _new(s_results, before[0]), _new(r_results, before[1]))
        before = (s_results, r_results)
        for divergence in _compare_tools(api, turn, sent[turn], recorded[turn]):
            key = (divergence.path, json.dumps(divergence.replayed, sort_keys=True, default=str))
            if key not in seen_tools:
                seen_tools.add(key)
                here.append(divergence)
        if strict and not here:
            here = _compare_bodies(turn, sent[turn], recorded[turn])
        found.extend(here)
    return found


def _new(
    results: dict[str, RecordedResult], before: dict[str, RecordedResult]
) -> dict[str, RecordedResult]:
    return {call_id: r for call_id, r in results.items() if call_id not in before}


def _count_divergence(turn: int, kind: str, count: int) -> Divergence:
    if kind == "extra_request":
        message = f"this run sent request {turn}; the recording has only {count} request(s)"
    else:
        message = f"the recording has request {turn}; this run stopped after {count} request(s)"
    return Divergence(kind, turn, None, "$", None, None, message)


def _compare_results(
    turn: int, sent: dict[str, RecordedResult], recorded: dict[str, RecordedResult]
) -> list[Divergence]:
    found: list[Divergence] = []
    for call_id, rec in recorded.items():
        mine = sent.get(call_id)
        if mine is None:
            message = f"the recording sent a result for call {call_id}; this run did not"
            found.append(Divergence("missing_result", turn, call_id, "$", rec.value, None, message))
            continue
        changes = json_diff(*_comparable(rec.value, mine.value))
        for change in changes:
            message = f"result of call {call_id} differs at {change.path}"
            found.append(
                Divergence("result", turn, call_id, change.path, change.a, change.b, message)
            )
        flags = error_flag(rec), error_flag(mine)
        if None not in flags and flags[0] != flags[1] and all(c.path != "$.ok" for c in changes):
            message = f"call {call_id} is_error was {flags[0]}, now {flags[1]}"
            found.append(Divergence("error_flag", turn, call_id, "$", flags[0], flags[1], message))
    for call_id, mine in sent.items():
        if call_id not in recorded:
            message = f"this run sent a result for call {call_id}; the recording did not"
            found.append(Divergence("extra_result", turn, call_id, "$", None, mine.value, message))
    return found


def _comparable(recorded: Any, replayed: Any) -> tuple[Any, Any]:
    """Compare the bare tool output when only one side wraps it in a toolloop envelope."""

    def bare(value: Any) -> Any:
        return value["result"] if value["ok"] else value["error"]

    if is_envelope(replayed) and not is_envelope(recorded):
        return recorded, bare(replayed)
    if is_envelope(recorded) and not is_envelope(replayed):
        return bare(recorded), replayed
    return recorded, replayed


def _compare_tools(api: Api, turn: int, sent: Any, recorded: Any) -> list[Divergence]:
    def table(body: Any) -> dict[str, Any]:
        return {
            spec.name: {"description": spec.description, "parameters": spec.parameters}
            for spec in declared_tools(api, body)
        }

    found: list[Divergence] = []
    for change in json_diff(table(recorded), table(sent), "$.tools"):
        message = f"declared tools differ at {change.path}"
        found.append(Divergence("tools", turn, None, change.path, change.a, change.b, message))
    return found


def _compare_bodies(turn: int, sent: Any, recorded: Any) -> list[Divergence]:
    def kept(body: Any) -> Any:
        if not isinstance(body, dict):
            return body
        return {k: v for k, v in body.items() if k not in STRICT_IGNORED}

    return [
        Divergence(
            "request",
            turn,
            None,
            change.path,
            change.a,
            change.b,
            f"request body differs at {change.path}",
        )
        for change in json_diff(kept(recorded), kept(sent))
    ]


def compare_outcome(
    recorded_state: str | None,
    state: str,
    recorded_calls: Mapping[str, str],
    calls: Mapping[str, str],
) -> list[Divergence]:
    """Against toolloop's own metadata: the operation's end state and each call's state."""
    found: list[Divergence] = []
    for call_id, expected in recorded_calls.items():
        actual = calls.get(call_id)
        if actual != expected:
            path = json_path("$.calls", call_id) + ".state"
            message = f"call {call_id} ended {actual or 'absent'}; the recording says {expected}"
            found.append(Divergence("call_state", None, call_id, path, expected, actual, message))
    if recorded_state is not None and recorded_state != state:
        message = f"the operation ended {state}; the recording ended {recorded_state}"
        found.append(Divergence("state", None, None, "$.state", recorded_state, state, message))
    return found
