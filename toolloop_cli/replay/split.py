"""Split a cassette into conversations, and list the interactions a replay cannot use.

A cassette recorded around a test suite or an app may hold several conversations, and calls
to endpoints that are not a model API (token exchange, telemetry, file uploads). Each model
request is joined to the open conversation it continues, looked for among all open ones (an
agent called as a tool holds its own conversation between a call and its result):

1. a stateful request names provider state the conversation holds (``previous_response_id``
   of one of its answers, ``previous_interaction_id``, the same ``conversation``);
2. a stateless one carries that conversation's last request items and its answer, in order,
   compared as ``comparable`` says (a moved cache marker or a re-spelled field is the same
   item), and maybe more;
3. the same items again after an answer that may be retried (429, 5xx, 529…) is a retry;
4. failing those, it carries the last request's items plus more and results the last request
   did not (a client that rewrote the answer it echoes, then answered it), or names provider
   state no answer here holds (the newest one). A request that rewrote a tool-call answer and
   answers none of its calls (a client that read a structured-output call itself, then wrote
   it into the history as text and asked again) is a new conversation from that history: the
   calls were never answered, so the first one ends there.

A request that continues a conversation whose last answer was not a tool call (a final
answer, a cut one, an error that is not retried) starts a new conversation, unless a
conversation started later from that history is continued by it through a rewritten echo
(4.): a new user turn after a final answer, or a corrected resend after a refused request,
is a run of its own, which starts from the history its first request carries. A background
answer (``queued``) is the last poll of it (``GET …/responses/ID``), which is folded into its
request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolloop_cli.engine.types import HttpResponse, ModelTurn, TurnOutcome
from toolloop_cli.errors import ToolloopError, TranscriptError
from toolloop_cli.transcripts.cassette import Cassette, Interaction, scrub_uri
from toolloop_cli.transcripts.detect import detect_poll

from .shapes import Api, comparable_items, continues_from, reader, request_results

__all__ = ["Conversation", "Skipped", "Split", "parse_answer", "split_conversations"]

#: the statuses of a background answer that has not ended yet
_UNFINISHED = frozenset({"queued", "in_progress"})
#: Conversations looked at when joining a request (the most recent ones).
MAX_OPEN = 16


@dataclass(frozen=True)
class Conversation:
    """Interactions of one conversation; ``indices`` are 0-based cassette positions.

    ``interactions`` are what a replay serves: a background request's answer is its last
    poll. ``turns`` are their answers parsed by the adapter (None where that failed).
    """

    api: Api
    interactions: tuple[Interaction, ...]
    indices: tuple[int, ...]
    turns: tuple[ModelTurn | None, ...] = ()
    #: when its last answer's calls are answered by a request that starts a later
    #: conversation (it rewrote the history before them): that request's cassette index
    answered_by: int | None = None

    @property
    def bodies(self) -> list[Any]:
        """The recorded request bodies, as JSON."""
        return [interaction.request.json() for interaction in self.interactions]


@dataclass(frozen=True)
class Skipped:
    """An interaction a replay leaves out, and why."""

    index: int
    method: str
    uri: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "method": self.method, "uri": self.uri, "reason": self.reason}


@dataclass
class Split:
    conversations: list[Conversation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class _Open:
    api: Api
    items: list[Any]
    interactions: list[Interaction] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    turns: list[ModelTurn | None] = field(default_factory=list)
    #: provider-side state it holds: its answers' ids, ``conversation:<id>``
    keys: set[str] = field(default_factory=set)
    order: int = 0
    #: how many tool results its last request carried
    results: int = 0
    #: the call ids its first request carries results for
    opening_results: frozenset[str] = frozenset()

    @property
    def last(self) -> ModelTurn | None:
        return self.turns[-1] if self.turns else None

    def answer(self) -> list[Any]:
        """The last answer's items, as a request echoing it carries them."""
        found = reader(self.api)
        turn = self.last
        if found is None or turn is None or turn.outcome is TurnOutcome.API_FAILURE:
            return []
        return [found.comparable(item) for item in turn.output_items]

    def add(
        self, index: int, interaction: Interaction, items: list[Any], key: str | None, results: int
    ) -> None:
        turn = parse_answer(self.api, interaction)
        self.items = items
        self.results = results
        self.interactions.append(interaction)
        self.indices.append(index)
        self.turns.append(turn)
        if key is not None and key.startswith("conversation:"):
            self.keys.add(key)
        if turn is not None and turn.response_id:
            self.keys.add(turn.response_id)

    def close(self, answered_by: int | None = None) -> Conversation:
        return Conversation(
            self.api,
            tuple(self.interactions),
            tuple(self.indices),
            tuple(self.turns),
            answered_by,
        )


def parse_answer(api: Api, interaction: Interaction) -> ModelTurn | None:
    """A recorded answer as the adapter of its API reads it; None when it cannot."""
    from toolloop_cli.adapters import get_adapter

    recorded = interaction.response
    headers = {name: ", ".join(values) for name, values in recorded.headers.items()}
    try:
        return get_adapter(*api).parse_response(
            HttpResponse(recorded.status, headers, recorded.body)
        )
    except ToolloopError:
        return None


def split_conversations(cassette: Cassette) -> Split:
    """Conversations in the order they start; a ``TranscriptError`` when there is none."""
    split = Split()
    opened: list[_Open] = []
    for index, interaction in enumerate(cassette.interactions):
        request = interaction.request
        if request.method.upper() == "GET" and _fold_poll(opened, index, interaction):
            continue
        if interaction.api is None:
            reason = "not a known model API endpoint"
            if detect_poll(request.uri) is not None:
                reason = (
                    f"a {request.method.upper()} of a stored answer, neither a model request (a"
                    " POST) nor a poll of a background answer still running"
                )
            split.skipped.append(Skipped(index, request.method, request.uri, reason))
            continue
        if request.method.upper() != "POST":  # every model request is a POST
            reason = f"a {request.method.upper()} request, not a model request (a POST)"
            split.skipped.append(Skipped(index, request.method, request.uri, reason))
            continue
        where = f"transcript {cassette.path}: interaction {index}"
        try:
            body = request.json()
        except TranscriptError as exc:  # a model request toolloop cannot read: refused
            raise TranscriptError(f"{where}: {exc}") from None
        if not isinstance(body, dict):  # skipping it would replay another conversation
            found = "no body" if request.body is None else f"a JSON {_json_kind(body)}"
            raise TranscriptError(
                f"{where}: the model request to {scrub_uri(request.uri)} holds {found}, not"
                " a JSON object"
            )
        items = comparable_items(interaction.api, body)
        key = continues_from(interaction.api, body)
        answered = [r.call_id for r in request_results(interaction.api, body)]
        target = _find(opened[-MAX_OPEN:], interaction.api, items, key, len(answered))
        if target is None:
            opening = frozenset(i for i in answered if i is not None)
            target = _Open(interaction.api, items, order=len(opened), opening_results=opening)
            opened.append(target)
        target.add(index, interaction, items, key, len(answered))
    openers = _openers(opened)
    split.conversations = [o.close(_answered_by(o, openers)) for o in opened]
    if not split.conversations:
        raise TranscriptError(
            f"transcript {cassette.path}: no model API request (a POST with a JSON body) to replay"
        )
    return split


def _openers(opened: list[_Open]) -> dict[tuple[Api, str], list[_Open]]:
    """The conversations (in order) whose first request carries a result for each call id."""
    by_call: dict[tuple[Api, str], list[_Open]] = {}
    for conversation in opened:
        for call_id in conversation.opening_results:
            by_call.setdefault((conversation.api, call_id), []).append(conversation)
    return by_call


def _answered_by(conversation: _Open, openers: dict[tuple[Api, str], list[_Open]]) -> int | None:
    """The first request of a later conversation that carries results for every call of
    ``conversation``'s last answer, by call id (a client that rewrote the history before them,
    so the request could not join it); None when there is none."""
    last = conversation.last
    ids = {call.call_id for call in last.calls} if last is not None else set()
    if not ids or "" in ids:
        return None
    for later in openers.get((conversation.api, min(ids)), []):
        if later.order > conversation.order and ids <= later.opening_results:
            return later.indices[0]
    return None


def _json_kind(value: object) -> str:
    """What a JSON value that is not an object is, for a message."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "number or boolean"


def _find(
    opened: list[_Open], api: Api, items: list[Any], key: str | None, results: int
) -> _Open | None:
    """The open conversation a request continues (newest first), or None for a new one;
    ``results``: how many tool results the request carries."""
    candidates = [o for o in reversed(opened) if o.api == api]
    finished: _Open | None = None
    for conversation in candidates:
        retry = _retry(conversation, items)
        if retry or _continues(conversation, items, key):
            if retry or _calls(conversation):
                return conversation
            finished = conversation  # a new conversation, unless a later one goes on here
            break
    # the echoed answer was rewritten: last items and more; a conversation started after a
    # finished one it continues carries that one's history, and is the one continued
    later = [o for o in candidates if finished is None or o.order > finished.order]
    for conversation in later:
        if key is None and len(items) > len(conversation.items):
            if items[: len(conversation.items)] == conversation.items:
                answered = _calls(conversation) and _answers(conversation, results)
                return conversation if answered else None
    if finished is not None:
        return None
    if key is not None and candidates:  # state none of its answers named: the newest one
        return candidates[0] if _calls(candidates[0]) else None
    return None


def _retry(conversation: _Open, items: list[Any]) -> bool:
    """The same request again, after an answer that may be retried."""
    last = conversation.last
    failed = last is not None and last.outcome is TurnOutcome.API_FAILURE
    retryable = failed and last is not None and last.error is not None and last.error.retryable
    return retryable and items == conversation.items


def _continues(conversation: _Open, items: list[Any], key: str | None) -> bool:
    if key is not None:
        return key in conversation.keys
    last = conversation.last
    if last is not None and last.outcome is TurnOutcome.API_FAILURE:
        return False
    prefix = conversation.items + conversation.answer()
    return len(items) >= len(prefix) > len(conversation.items) and items[: len(prefix)] == prefix


def _calls(conversation: _Open) -> bool:
    """Whether its last answer asked for tool results (or could not be read at all)."""
    last = conversation.last
    return last is None or last.outcome is TurnOutcome.TOOL_PROPOSALS


def _answers(conversation: _Open, results: int) -> bool:
    """Whether a request that rewrote the conversation's last answer still answers it: it
    carries results its last request did not (an answer that asked for none, a paused turn,
    or one that could not be read, needs none)."""
    last = conversation.last
    return last is None or not last.calls or results > conversation.results


def _unfinished(turn: ModelTurn) -> bool:
    """Whether ``turn`` is a background answer still ``queued`` or ``in_progress``: only such
    an answer is polled. A ``GET`` of an answer that has ended (a test that reads a stored
    answer back, or checks that an unstored one is gone) is no poll of it."""
    return turn.outcome is TurnOutcome.TRUNCATED and turn.finish_reason in _UNFINISHED


def _fold_poll(opened: list[_Open], index: int, interaction: Interaction) -> bool:
    """A poll of a background answer still unfinished becomes that answer (the last poll
    wins)."""
    found = detect_poll(interaction.request.uri)
    if found is None:
        return False
    api, response_id = found
    for conversation in reversed(opened):
        last = conversation.last
        if (
            conversation.api == api
            and last is not None
            and last.response_id == response_id
            and _unfinished(last)
        ):
            started = conversation.interactions[-1]
            answered = Interaction(started.request, interaction.response, api)
            conversation.interactions[-1] = answered
            conversation.turns[-1] = parse_answer(api, answered)
            conversation.indices.append(index)
            return True
    return False
