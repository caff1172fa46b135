"""Which declared tools an adapter sends, and in which shape.

A function tool (``ToolSpec.provider`` None) is declared by every adapter in its own shape. A
tool with a ``provider`` is that provider's own declaration: its adapter sends it exactly as
it is, and every other adapter leaves it out (an Anthropic memory tool means nothing to
OpenAI, so it is never declared there, and a call to it there is to an unknown tool).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from toolloop_cli.engine.types import JSONObject, ToolSpec

__all__ = ["declarations"]


def declarations(
    tools: Sequence[ToolSpec], provider: str
) -> Iterator[tuple[ToolSpec, JSONObject | None]]:
    """``(tool, its own declaration or None for a function tool)`` for ``provider``, in order."""
    for tool in tools:
        if tool.provider is None:
            yield tool, None
        elif tool.provider == provider and tool.declaration is not None:
            yield tool, tool.declaration
