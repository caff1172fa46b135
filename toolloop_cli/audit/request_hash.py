"""``request_sha256`` without re-serialising the whole history every turn.

A stateless provider request carries the whole conversation, so hashing its canonical bytes
from scratch costs O(history) per turn and O(turns²) per run. The canonical bytes of a body
``{a: …, conv: [i0, i1, …], z: …}`` are, by RFC 8785, the entries before ``conv``, then
``"conv":[`` and the canonical items joined by commas, then ``]`` and the entries after it.
The conversation only grows (committed items are never changed or removed), so a running
SHA-256 over the items hashed so far is fed only the new items, then copied and finished
with the entries after the list. The digest is byte for byte ``sha256_of(body)``; whenever
the body is not built from the conversation as given (no list equal to it whose first and
last items are the conversation's own, a changed prefix, keys that are not ASCII) it falls
back to exactly that. Adapters put the conversation's own item objects in the body; the
equality check is then a pointer comparison per item, at C speed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .canonical import fast_canonical_bytes, sha256_of

__all__ = ["RequestHasher"]


@dataclass
class _Running:
    """What has been hashed for one operation's requests."""

    conversation: Sequence[Any]  # the list object whose items were hashed
    key: str
    head: bytes  # ``{`` + the canonical entries before the conversation + ``"key":[``
    count: int
    last: Any  # the last item hashed, by identity
    hasher: Any  # hashlib sha256 over head + items so far


class RequestHasher:
    """Per-operation running hashes; one instance per process that steps operations."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def digest(self, operation_id: str, body: Any, conversation: Sequence[Any]) -> str:
        """``sha256_of(body)``, reusing the hash of the items already sent."""
        key = _conversation_key(body, conversation)
        if key is None:
            return sha256_of(body)
        entries = sorted(body.items())
        head = b"{" + b"".join(_entry(k, v) + b"," for k, v in entries if k < key)
        head += fast_canonical_bytes(key) + b":["
        state = self._running.get(operation_id)
        if not _continues(state, conversation, key, head):
            state = _Running(conversation, key, head, 0, None, hashlib.sha256(head))
            self._running[operation_id] = state
        assert state is not None
        for item in conversation[state.count :]:
            state.hasher.update(b"," if state.count else b"")
            state.hasher.update(fast_canonical_bytes(item))
            state.count += 1
            state.last = item
        done = state.hasher.copy()
        done.update(b"]" + b"".join(b"," + _entry(k, v) for k, v in entries if k > key) + b"}")
        return "sha256:" + str(done.hexdigest())


def _entry(key: str, value: Any) -> bytes:
    return fast_canonical_bytes(key) + b":" + fast_canonical_bytes(value)


def _conversation_key(body: Any, conversation: Sequence[Any]) -> str | None:
    """The one key of ``body`` whose value is the conversation, item for item; else None."""
    if not isinstance(body, Mapping) or not conversation:
        return None
    if not all(type(k) is str and k.isascii() for k in body):
        return None  # RFC 8785 orders keys by UTF-16 units: equal to str order for ASCII only
    for key, value in body.items():
        if (
            type(value) is list
            and len(value) == len(conversation)
            and value[0] is conversation[0]
            and value[-1] is conversation[-1]
            and value == conversation  # C speed: identical items compare without recursing
        ):
            return str(key)
    return None


def _continues(state: _Running | None, conversation: Sequence[Any], key: str, head: bytes) -> bool:
    """True when the items hashed so far are still the start of ``conversation``."""
    return (
        state is not None
        and state.conversation is conversation
        and state.key == key
        and state.head == head
        and state.count <= len(conversation)
        and (state.count == 0 or conversation[state.count - 1] is state.last)
    )
