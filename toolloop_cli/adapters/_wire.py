"""What the live transport does to keys on the wire: checked before sending, redacted after.

- ``key_problem`` says why a key cannot be sent as a header value (control characters,
  whitespace, non-ASCII), naming the character class but never the key.
- ``Secrets`` redacts the key and its header value from error texts and, as the answer
  arrives, from the answer's bytes (a key split across two chunks included), so the key never
  reaches the adapter, the store or a recording, whatever a provider or proxy echoes.
- ``plaintext_host`` names the host of an ``http://`` URL that is not loopback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

__all__ = ["MIN_REDACTED_BYTES", "REDACTED", "Secrets", "key_problem", "plaintext_host"]

REDACTED = "[REDACTED]"
#: Shorter secrets are not redacted: they would match ordinary text (no provider issues them).
MIN_REDACTED_BYTES = 8


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a header value, without echoing any of it; None when it can."""
    for char in key:
        if char == " ":
            return "contains whitespace (a space)"
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return f"contains a control character ({repr(char)[1:-1]})"
        if ord(char) > 0x7E:
            return "contains a non-ASCII character"
    return None


def plaintext_host(url: str) -> str | None:
    """The host of ``url`` when it is plaintext ``http://`` to a host that is not loopback."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return None
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host or "(no host)"
    mapped = getattr(address, "ipv4_mapped", None)
    return None if address.is_loopback or (mapped is not None and mapped.is_loopback) else host


class Secrets:
    """The key and its header value, in every form an error text or an echo may show them."""

    def __init__(self, *values: str) -> None:
        forms: set[str] = set()
        for value in values:
            forms.update(
                {
                    value,
                    repr(value)[1:-1],  # as a str repr shows it
                    repr(value.encode("utf-8", "backslashreplace"))[2:-1],  # as bytes repr does
                    value.replace("\\", "\\\\").replace('"', '\\"'),  # inside a JSON string
                    value.replace("/", "\\/"),
                }
            )
        keep = [
            f for f in forms if len(f.encode("utf-8", "backslashreplace")) >= MIN_REDACTED_BYTES
        ]
        self._texts = sorted(keep, key=len, reverse=True)  # "Bearer KEY" before "KEY"
        self._bytes = [f.encode("utf-8", "backslashreplace") for f in self._texts]

    def text(self, message: str) -> str:
        for form in self._texts:
            message = message.replace(form, REDACTED)
        return message

    def redact(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` with every secret replaced, holding back only a tail that may start one.

        The tail held is the longest end of the data that begins some secret: usually none,
        so an event is never delayed waiting for the next chunk.
        """
        if not self._bytes:
            yield from chunks
            return
        marker = REDACTED.encode()
        tail = b""
        for chunk in chunks:
            data = tail + chunk
            for form in self._bytes:
                data = data.replace(form, marker)
            cut = len(data) - self._may_start(data)
            tail = data[cut:]
            if cut:
                yield data[:cut]
        if tail:
            yield tail

    def _may_start(self, data: bytes) -> int:
        """How many of the last bytes of ``data`` are the start of a secret."""
        for size in range(min(len(data), max(map(len, self._bytes)) - 1), 0, -1):
            end = data[-size:]
            if any(form.startswith(end) for form in self._bytes):
                return size
        return 0
