"""Provider adapters, one module per API family, all behind ``engine.ports.ModelAdapter``.

Modules are imported only when their adapter is asked for, so the CLI starts without them.
The table below is the only way in: an adapter is never looked up from model output.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from toolloop_cli.engine.ports import ModelAdapter
from toolloop_cli.errors import UsageError

__all__ = ["ADAPTERS", "get_adapter"]

#: (provider, api_family) → (module, class). Literal on purpose: no name comes from input.
ADAPTERS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("openai", "responses"): ("toolloop_cli.adapters.openai_responses", "OpenAIResponsesAdapter"),
    ("scripted", "scripted"): ("toolloop_cli.adapters.scripted", "ScriptedAdapter"),
    ("anthropic", "messages"): (
        "toolloop_cli.adapters.anthropic_messages",
        "AnthropicMessagesAdapter",
    ),
    ("gemini", "interactions"): (
        "toolloop_cli.adapters.gemini_interactions",
        "GeminiInteractionsAdapter",
    ),
    ("gemini", "generate_content"): (
        "toolloop_cli.adapters.gemini_generate",
        "GeminiGenerateAdapter",
    ),
}


def get_adapter(provider: str, api_family: str, *, base_url: str | None = None) -> ModelAdapter:
    """The adapter for a provider API family; ``base_url`` overrides the provider's default."""
    entry = ADAPTERS.get((provider, api_family))
    if entry is None:
        known = ", ".join(f"{p}/{a}" for p, a in sorted(ADAPTERS))
        raise UsageError(f"no adapter for {provider}/{api_family} (known: {known})")
    module_name, class_name = entry
    adapter_class = getattr(importlib.import_module(module_name), class_name)
    adapter: ModelAdapter = adapter_class() if base_url is None else adapter_class(base_url)
    return adapter
