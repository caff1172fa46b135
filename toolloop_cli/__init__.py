"""toolloop: run LLM tool-calling loops as a persisted finite state machine.

The library API (the CLI is a thin layer over it)::

    from toolloop_cli import RunOptions, open_store, start, approve, resume

    store = open_store(".toolloop/store.db")
    result = start(store, RunOptions(task="...", registry=Path("registries/refunds.yaml"),
                                     transcript=Path("transcripts/refund-openai.yaml")))
    if result.waiting:                       # WAITING_APPROVAL: nothing is held in memory
        apr = store.pending_approvals()[0]
        approve(store, apr.approval_id, "ops-lead")
        result = resume(store, result.operation.operation_id)

Names are imported on first use, so ``import toolloop_cli`` (and ``toolloop --help``) stays
cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from toolloop_cli.engine.loop import StepResult
    from toolloop_cli.engine.records import Guards
    from toolloop_cli.engine.states import CallState, OpState
    from toolloop_cli.errors import (
        AdapterError,
        AlreadyDecided,
        ApprovalError,
        IllegalTransition,
        MalformedProviderPayload,
        OperationNotFound,
        OperationTerminal,
        RegistryError,
        StoreError,
        TamperedStore,
        ToolloopError,
        TranscriptError,
        UsageError,
    )
    from toolloop_cli.service.approvals import approve
    from toolloop_cli.service.operations import RunOptions, resume, start, step
    from toolloop_cli.service.views import operation_view
    from toolloop_cli.store import Store, open_store
    from toolloop_cli.tools.context import Escalate, ToolContext, ToolError
    from toolloop_cli.tools.registry import Registry, load_registry

_HOME: dict[str, str] = {
    "AdapterError": "toolloop_cli.errors",
    "AlreadyDecided": "toolloop_cli.errors",
    "ApprovalError": "toolloop_cli.errors",
    "CallState": "toolloop_cli.engine.states",
    "Escalate": "toolloop_cli.tools.context",
    "Guards": "toolloop_cli.engine.records",
    "IllegalTransition": "toolloop_cli.errors",
    "MalformedProviderPayload": "toolloop_cli.errors",
    "OpState": "toolloop_cli.engine.states",
    "OperationNotFound": "toolloop_cli.errors",
    "OperationTerminal": "toolloop_cli.errors",
    "Registry": "toolloop_cli.tools.registry",
    "RegistryError": "toolloop_cli.errors",
    "RunOptions": "toolloop_cli.service.operations",
    "StepResult": "toolloop_cli.engine.loop",
    "Store": "toolloop_cli.store",
    "StoreError": "toolloop_cli.errors",
    "TamperedStore": "toolloop_cli.errors",
    "ToolContext": "toolloop_cli.tools.context",
    "ToolError": "toolloop_cli.tools.context",
    "ToolloopError": "toolloop_cli.errors",
    "TranscriptError": "toolloop_cli.errors",
    "UsageError": "toolloop_cli.errors",
    "approve": "toolloop_cli.service.approvals",
    "load_registry": "toolloop_cli.tools.registry",
    "open_store": "toolloop_cli.store",
    "operation_view": "toolloop_cli.service.views",
    "resume": "toolloop_cli.service.operations",
    "start": "toolloop_cli.service.operations",
    "step": "toolloop_cli.service.operations",
}

__all__ = [
    "AdapterError",
    "AlreadyDecided",
    "ApprovalError",
    "CallState",
    "Escalate",
    "Guards",
    "IllegalTransition",
    "MalformedProviderPayload",
    "OpState",
    "OperationNotFound",
    "OperationTerminal",
    "Registry",
    "RegistryError",
    "RunOptions",
    "StepResult",
    "Store",
    "StoreError",
    "TamperedStore",
    "ToolContext",
    "ToolError",
    "ToolloopError",
    "TranscriptError",
    "UsageError",
    "approve",
    "load_registry",
    "open_store",
    "operation_view",
    "resume",
    "start",
    "step",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'toolloop_cli' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
