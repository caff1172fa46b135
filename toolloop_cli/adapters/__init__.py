"""Provider adapters, one module per API family, all behind ``engine.ports.ModelAdapter``.

Modules are imported only when their adapter is asked for, so the CLI starts without them.
The provider table (``providers.PROVIDERS``) is the only way in: an adapter is never looked up
from model output.
"""

from __future__ import annotations

import importlib
from typing import Any

from toolloop_cli.engine.ports import ModelAdapter
from toolloop_cli.errors import UsageError

from .providers import ADAPTERS, PROVIDERS, ProviderSpec

__all__ = ["ADAPTERS", "PROVIDERS", "ProviderSpec", "adapter_revision", "get_adapter"]


def _adapter_class(provider: str, api_family: str) -> Any:
    entry = ADAPTERS.get((provider, api_family))
    if entry is None:
        known = ", ".join(f"{p}/{a}" for p, a in sorted(ADAPTERS))
        raise UsageError(f"no adapter for {provider}/{api_family} (known: {known})")
    module_name, class_name = entry
    return getattr(importlib.import_module(module_name), class_name)


def get_adapter(provider: str, api_family: str, *, base_url: str | None = None) -> ModelAdapter:
    """The adapter for a provider API family; ``base_url`` overrides the provider's default."""
    adapter_class = _adapter_class(provider, api_family)
    adapter: ModelAdapter = adapter_class() if base_url is None else adapter_class(base_url)
    return adapter


def adapter_revision(provider: str, api_family: str) -> str:
    """The revision of a family's adapter, read from its class (nothing is instantiated)."""
    revision = _adapter_class(provider, api_family).revision
    assert isinstance(revision, str)
    return revision
