"""Where the requests a replay sends diverge from the requests the recording sent.

Per model request (a "turn" here is the request index, as in ``show``), the default check
compares what matters to the model and to the audit, and nothing that a faithful rerun may
legitimately change:

- the tool results the request carries that the previous request did not, each paired with
  the call it answers (``pairing``: by id when the id is one of the previous answer's calls,
  else by position), compared per call: the same value (a JSON path into the result names the
  first differences) and the same error flag;
- the tools it declares (name, description, parameters);
- that both runs sent the same number of requests.

``strict`` also compares whole request bodies (RFC 8785 canonical JSON), for recordings made
by toolloop itself, in the form ``strict_form`` gives them. A body difference is reported
only for a turn whose results and tools matched, so one cause is one divergence.

A result is compared as JSON when its text is JSON. A recording made by another tool carries
the bare tool output where toolloop sends an envelope (``{"ok": true, "result": …}``); then the
envelope's ``result`` (or ``error``) is what is compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolloop_cli.engine.compare import json_diff, json_path
from toolloop_cli.engine.types import RecordedResult

from .pairing import new_results, pair
from .shapes import Api, declared_tools, request_results

__all__ = [
    "STRICT_IGNORED",
    "Divergence",
    "RecordedResult",
    "compare_outcome",
    "compare_requests",
    "error_flag",
    "is_envelope",
    "keyed",
    "recorded_result",
    "result_list",
    "results_in_request",
    "strict_form",
]

#: Top-level request fields ``--strict-requests`` ignores: they name the caller or a cache
#: session, not the conversation, and a replay is another caller (see docs/replay.md).
STRICT_IGNORED = frozenset({"metadata", "user", "safety_identifier", "prompt_cache_key"})


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


def result_list(api: Api, body: Any) -> list[RecordedResult]:
    """Every tool result in a request body, in order, as its API family's adapter reads it."""
    return request_results(api, body)


def _key(result: RecordedResult) -> str:
    return result.call_id or result.name or "?"


def results_in_request(api: Api, body: Any) -> dict[str, RecordedResult]:
    """(call id, else function name → result) of a request's results (first one wins)."""
    found: dict[str, RecordedResult] = {}
    for result in result_list(api, body):
        found.setdefault(_key(result), result)
    return found


def keyed(results: Sequence[RecordedResult]) -> dict[str, RecordedResult]:
    """Results by call id (else name); a repeated key as ``id#1``, ``id#2``…: numbered from 0,
    as everything a replay numbers, the first one (``#0``) written without its number."""
    found: dict[str, RecordedResult] = {}
    seen: dict[str, int] = {}
    for result in results:
        key = _key(result)
        count = seen.get(key, 0)
        seen[key] = count + 1
        found[key if count == 0 else f"{key}#{count}"] = result
    return found


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
    calls: Sequence[Sequence[str]] | None = None,
) -> list[Divergence]:
    """Divergences between the request bodies a replay sent and those recorded, in order.

    ``calls[k]`` are the ids of the calls the engine made of answer ``k``: each request's new
    results, on both sides, are paired with the calls of the answer before it (``pairing``)
    and compared per call. Without ``calls``, results are compared by their own ids.
    """
    found: list[Divergence] = []
    seen_tools: set[tuple[str, str]] = set()
    sent_new, recorded_new = new_results(api, sent), new_results(api, recorded)
    for turn in range(max(len(sent), len(recorded))):
        if turn >= len(recorded):
            found.append(_count_divergence(turn, "extra_request", len(recorded)))
            continue
        if turn >= len(sent):
            found.append(_count_divergence(turn, "missing_request", len(sent)))
            continue
        answer = list(calls[turn - 1]) if calls is not None and 0 < turn <= len(calls) else []
        here = _compare_results(
            turn,
            _by_call(sent_new[turn], answer, calls is not None),
            _by_call(recorded_new[turn], answer, calls is not None),
        )
        for divergence in _compare_tools(api, turn, sent[turn], recorded[turn]):
            key = (divergence.path, json.dumps(divergence.replayed, sort_keys=True, default=str))
            if key not in seen_tools:
                seen_tools.add(key)
                here.append(divergence)
        if strict and not here:
            here = _compare_bodies(turn, sent[turn], recorded[turn])
        found.extend(here)
    return found


class _ByCall(dict[str, RecordedResult]):
    """Results keyed by the call they answer; ``unpaired``: the keys of those that answer no
    call of the turn (another result for one already answered, or for a call not proposed)."""

    unpaired: frozenset[str] = frozenset()


def _by_call(results: list[RecordedResult], call_ids: list[str], known: bool) -> _ByCall:
    """Results keyed by the call they answer; unpaired ones by their own id or name.
    ``known``: ``call_ids`` are the calls the answer made (else nothing is said unpaired)."""
    paired = pair(results, call_ids)
    found = _ByCall(paired.by_call)
    unpaired = set()
    for key, result in keyed(paired.unpaired).items():
        while key in found:
            key += "#"
        found[key] = result
        unpaired.add(key)
    found.unpaired = frozenset(unpaired) if known else frozenset()
    return found


def _count_divergence(turn: int, kind: str, count: int) -> Divergence:
    if kind == "extra_request":
        message = f"this run sent request {turn}; the recording has only {count} request(s)"
    else:
        message = f"the recording has request {turn}; this run stopped after {count} request(s)"
    return Divergence(kind, turn, None, "$", None, None, message)


def _compare_results(turn: int, sent: _ByCall, recorded: _ByCall) -> list[Divergence]:
    found: list[Divergence] = []
    for call_id, rec in recorded.items():
        mine = sent.get(call_id)
        if mine is None:
            message = f"the recording sent a result for call {call_id}; this run did not"
            if call_id in recorded.unpaired:
                message = (
                    f"the recording sent a result ({call_id}) that answers no call of the "
                    "answer before it, or answers one a second time; this run did not"
                )
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
    """Compare the bare tool output when only one side wraps it in a toolloop envelope.

    Another tool records an error as its text (with the request's error flag), which a replay
    sends back as a tool error carrying that text: the error's ``message`` is compared (as
    the JSON it encodes, when it does), not the envelope's ``{"code", "message"}``."""

    def bare(value: Any) -> Any:
        if value["ok"]:
            return value["result"]
        message = value["error"].get("message")
        return _parsed(message) if isinstance(message, str) else value["error"]

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
        for change in json_diff(strict_form(recorded), strict_form(sent))
    ]


def strict_form(body: Any) -> Any:
    """A request body as ``--strict-requests`` compares it (docs/replay.md lists the rules).

    Left out: the top-level ``STRICT_IGNORED`` fields; prompt-cache markers (``cache_control``,
    anywhere: where a client puts them changes no conversation); null fields (``"citations":
    null`` is an absent field); a tool's empty or null ``description``; the ``status`` and
    ``namespace`` of echoed input items (a client may drop or add them). A Gemini thought
    signature is compared as its bytes (standard base64 and base64url alike).
    """
    if not isinstance(body, dict):
        return body
    kept = {k: v for k, v in body.items() if k not in STRICT_IGNORED}
    if isinstance(kept.get("input"), list):
        kept["input"] = [
            {k: v for k, v in item.items() if k not in _ECHO_FIELDS}
            if isinstance(item, dict)
            else item
            for item in kept["input"]
        ]
    if isinstance(kept.get("tools"), list):
        kept["tools"] = [
            {k: v for k, v in tool.items() if not (k == "description" and not v)}
            if isinstance(tool, dict)
            else tool
            for tool in kept["tools"]
        ]
    return _normal(kept)


_ECHO_FIELDS = frozenset({"status", "namespace"})
_SIGNATURES = frozenset({"thoughtSignature", "thought_signature"})
_B64URL = str.maketrans("-_", "+/")


def _normal(value: Any) -> Any:
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None or key == "cache_control":
            continue
        if key in _SIGNATURES and isinstance(item, str):
            out[key] = item.translate(_B64URL).rstrip("=")
        else:
            out[key] = _normal(item)
    return out


def compare_outcome(
    recorded_state: str | None,
    state: str,
    recorded_calls: Mapping[tuple[int, str], str],
    calls: Mapping[tuple[int, str], str],
) -> list[Divergence]:
    """Against toolloop's own metadata: the operation's end state and each call's state.

    Calls are keyed by (turn, call id): a provider may give every turn's calls the same ids.
    """
    found: list[Divergence] = []
    for (turn, call_id), expected in recorded_calls.items():
        actual = calls.get((turn, call_id))
        if actual != expected:
            path = json_path("$.calls", call_id) + ".state"
            message = (
                f"call {call_id} of turn {turn} ended {actual or 'absent'}; "
                f"the recording says {expected}"
            )
            found.append(Divergence("call_state", turn, call_id, path, expected, actual, message))
    if recorded_state is not None and recorded_state != state:
        message = f"the operation ended {state}; the recording ended {recorded_state}"
        found.append(Divergence("state", None, None, "$.state", recorded_state, state, message))
    return found
