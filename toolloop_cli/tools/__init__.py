"""Tools: the YAML registry (the only allowlist), strict argument checks and the dispatcher.

The names are loaded on first use (PEP 562) so that importing ``toolloop_cli.tools.context``,
or a CLI that merely mentions this package, does not pay for importing jsonschema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolloop_cli.tools.context import Escalate, ToolContext, ToolError
    from toolloop_cli.tools.dispatcher import execute, reconcile
    from toolloop_cli.tools.registry import (
        Policy,
        Registry,
        ToolDef,
        check_registry,
        load_registry,
    )

__all__ = [
    "Escalate",
    "Policy",
    "Registry",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "check_registry",
    "execute",
    "load_registry",
    "reconcile",
]

_HOME = {
    "Escalate": "context",
    "ToolContext": "context",
    "ToolError": "context",
    "execute": "dispatcher",
    "reconcile": "dispatcher",
    "Policy": "registry",
    "Registry": "registry",
    "ToolDef": "registry",
    "check_registry": "registry",
    "load_registry": "registry",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
