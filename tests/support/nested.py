"""Where every value of a JSON-like document sits, for tests that break one of them."""

from __future__ import annotations

from typing import Any


def value_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path (keys and indices) of every value in ``value``, itself first."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += value_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += value_paths(item, (*prefix, i))
    return out
