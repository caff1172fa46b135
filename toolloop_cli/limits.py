"""Hard ceilings that hold whatever a registry says, and a byte count that costs no copy.

A tool's ``max_argument_bytes`` is its cap; ``MAX_ARGUMENT_BYTES`` is the most any registry
may set. Adapters refuse to parse argument text over the ceiling, so a hostile answer with
megabytes of arguments costs the bytes the provider sent and nothing more: the engine then
refuses it against the tool's own cap with the original text kept.
"""

from __future__ import annotations

__all__ = ["MAX_ARGUMENT_BYTES", "utf8_size"]

#: The largest ``max_argument_bytes`` a registry may declare (1 MiB).
MAX_ARGUMENT_BYTES = 1 << 20

_CHUNK = 256  # a slice and its bytes: at most 2 KiB at a time


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (lone surrogates as 3 bytes), encoded a little at a time."""
    if text.isascii():
        return len(text)
    return sum(
        len(text[i : i + _CHUNK].encode("utf-8", "surrogatepass"))
        for i in range(0, len(text), _CHUNK)
    )
