"""Provider-defined client tools in a registry: a ``provider_tool`` entry, checked.

Some APIs define tools of their own that the client executes: Anthropic's ``memory``,
``bash``, ``text_editor`` and ``computer`` tools (declared ``{"type": "memory_20250818",
"name": "memory"}``, with no JSON Schema: the provider fixes the input), and OpenAI's
client-executed tool search (``{"type": "tool_search", "execution": "client", …}``, whose
calls carry no name and are called ``tool_search``) and its custom tools (``{"type": "custom",
"name": …, "format": …}``, whose calls carry free text: the handler gets it as the argument
``input``). A registry allowlists one like any tool, with a handler, risk and approval
policy, and says which it is::

    memory:
      provider_tool: {provider: anthropic, type: memory_20250818}
      schema_version: memory-v1
      risk: write
      approval: always
      handler: my_tools:memory

Any other key of ``provider_tool`` is part of the declaration and sent as written
(``display_width_px`` for a computer tool, ``description`` and ``parameters`` for a tool
search, ``format`` for a custom tool, whose declaration also carries the tool's own
``description``). The tool is declared only to its own provider, in that provider's shape; to
any other it does not exist. Its ``parameters`` (optional, an object schema; a custom tool's
default is ``{"input": string}``) validate the input of its calls like any tool's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROVIDERS", "ProviderTool", "check_provider_tool"]

#: provider → the types of its client-executed tools a registry may name (a pattern)
PROVIDERS: dict[str, re.Pattern[str]] = {
    "anthropic": re.compile(r"^[a-z][a-z0-9_]*_[0-9]{8}$"),  # memory_20250818, bash_20250124
    "openai": re.compile(r"^(tool_search|custom)$"),
}
#: OpenAI's client tool-search calls carry no name: they are calls to this tool
OPENAI_TOOL_SEARCH = "tool_search"
#: OpenAI's free-text tools: declared with their name, called with text
OPENAI_CUSTOM = "custom"
_RESERVED = frozenset({"provider", "type", "name"})

Problem = tuple[str, str]


@dataclass(frozen=True)
class ProviderTool:
    """Which provider-defined tool a registry tool is, and its extra declaration fields."""

    provider: str
    type: str
    fields: dict[str, Any] = field(default_factory=dict)

    def declaration(self, name: str, description: str = "") -> dict[str, Any]:
        """The tool as its provider declares it."""
        if self.provider == "anthropic":
            return {"type": self.type, "name": name, **self.fields}
        if self.type == OPENAI_CUSTOM:
            said = {"description": description} if description else {}
            return {"type": self.type, "name": name, **said, **self.fields}
        return {"type": self.type, **({"execution": "client"} | self.fields)}


def check_provider_tool(
    name: str, value: Any, where: str
) -> tuple[ProviderTool | None, list[Problem]]:
    """The ``provider_tool`` of tool ``name``, or the problems with it."""
    if not isinstance(value, dict):
        return None, [(where, "must be a mapping with provider and type")]
    problems: list[Problem] = []
    provider, kind = value.get("provider"), value.get("type")
    if provider not in PROVIDERS:
        known = ", ".join(sorted(PROVIDERS))
        problems.append((f"{where}.provider", f"must be one of {known}"))
    elif not isinstance(kind, str) or not PROVIDERS[provider].match(kind):
        what = {
            "anthropic": "a versioned Anthropic tool type such as memory_20250818",
            "openai": "tool_search or custom (OpenAI's client-executed tools toolloop reads)",
        }[provider]
        problems.append((f"{where}.type", f"must be {what}"))
    if "name" in value:
        problems.append((f"{where}.name", "is the tool's own name in the registry: leave it out"))
    if provider == "openai" and kind == OPENAI_TOOL_SEARCH and name != OPENAI_TOOL_SEARCH:
        problems.append((where, f"OpenAI calls its tool search '{OPENAI_TOOL_SEARCH}': name it so"))
    if provider == "openai" and kind == OPENAI_CUSTOM and "execution" in value:
        problems.append((f"{where}.execution", "is not a field of a custom tool: leave it out"))
    elif provider == "openai" and value.get("execution", "client") != "client":
        problems.append((f"{where}.execution", "must be client: a registry runs the tool"))
    if problems:
        return None, problems
    fields = {k: v for k, v in value.items() if k not in _RESERVED}
    return ProviderTool(str(provider), str(kind), fields), []
