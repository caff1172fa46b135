"""Split a cassette into conversations, and list the interactions a replay cannot use.

A cassette recorded around a test suite or an app may hold several conversations, and calls
to endpoints that are not a model API (token exchange, telemetry, file uploads). A request
continues the conversation before it when it is of the same API and either names provider
state to continue (``previous_response_id`` …) or carries that conversation's items, in
order, plus more. The same items again continue it only after an error answer (a retry);
after a successful answer they start a new conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolloop_cli.errors import TranscriptError
from toolloop_cli.transcripts.cassette import Cassette, Interaction

from .shapes import Api, continues_from, conversation_items

__all__ = ["Conversation", "Skipped", "Split", "split_conversations"]


@dataclass(frozen=True)
class Conversation:
    """Consecutive interactions of one conversation; ``indices`` are 0-based cassette positions."""

    api: Api
    interactions: tuple[Interaction, ...]
    indices: tuple[int, ...]

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
    last_status: int
    interactions: list[Interaction] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)

    def close(self) -> Conversation:
        return Conversation(self.api, tuple(self.interactions), tuple(self.indices))


def split_conversations(cassette: Cassette) -> Split:
    """Conversations in recording order; a ``TranscriptError`` when there is none."""
    split = Split()
    current: _Open | None = None
    for index, interaction in enumerate(cassette.interactions):
        request = interaction.request
        if interaction.api is None:
            split.skipped.append(
                Skipped(index, request.method, request.uri, "not a known model API endpoint")
            )
            continue
        try:
            body = request.json()
        except TranscriptError:
            body = None
        if not isinstance(body, dict):
            split.skipped.append(
                Skipped(index, request.method, request.uri, "request has no JSON object body")
            )
            continue
        items = conversation_items(interaction.api, body)
        if current is None or not _continues(current, interaction.api, body, items):
            if current is not None:
                split.conversations.append(current.close())
            current = _Open(interaction.api, items, interaction.response.status)
        current.items, current.last_status = items, interaction.response.status
        current.interactions.append(interaction)
        current.indices.append(index)
    if current is not None:
        split.conversations.append(current.close())
    if not split.conversations:
        raise TranscriptError(
            f"transcript {cassette.path}: no model API request with a JSON body to replay"
        )
    return split


def _continues(current: _Open, api: Api, body: Any, items: list[Any]) -> bool:
    if api != current.api:
        return False
    if continues_from(api, body) is not None:
        return True
    before = current.items
    if items[: len(before)] != before:
        return False
    return len(items) > len(before) or not 200 <= current.last_status < 300
