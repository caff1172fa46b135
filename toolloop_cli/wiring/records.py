"""The one way a new operation's record is made, for ``run`` and for ``replay`` alike.

Each caller decides what differs (the task, where the model turns come from, the guards, the
registry and policy it is pinned to); what every new operation shares is decided here: a new
id, MODEL_REQUESTED, the adapter's revision, zeroed counters and the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from toolloop_cli.adapters import adapter_revision
from toolloop_cli.engine.clock import iso, later
from toolloop_cli.engine.ids import new_operation_id
from toolloop_cli.engine.records import Counters, Guards, OperationRecord
from toolloop_cli.engine.sources import Source
from toolloop_cli.engine.states import OpState
from toolloop_cli.engine.types import ModelSettings
from toolloop_cli.tools.definitions import Registry

__all__ = ["Pins", "new_operation_record"]


@dataclass(frozen=True)
class Pins:
    """The registry and policy an operation is pinned to for its whole life."""

    registry_name: str
    registry_revision: str
    registry_path: str
    registry_sha256: str
    policy_revision: str
    policy_sha256: str | None

    @classmethod
    def of(cls, registry: Registry) -> Pins:
        """A registry file's own pins."""
        return cls(
            registry_name=registry.name,
            registry_revision=registry.revision,
            registry_path=str(registry.path.resolve()),
            registry_sha256=registry.sha256,
            policy_revision=registry.policy.revision,
            policy_sha256=registry.policy.policy_sha256,
        )


def new_operation_record(
    *,
    task: str,
    provider: str,
    api_family: str,
    settings: ModelSettings,
    source: Source,
    pins: Pins,
    guards: Guards,
    tenant: str,
    subject: str,
    now: datetime,
    operation_id: str | None = None,
) -> OperationRecord:
    """A new operation about to make its first model request (nothing is stored yet)."""
    return OperationRecord(
        operation_id=operation_id or new_operation_id(),
        state=OpState.MODEL_REQUESTED,
        task=task,
        provider=provider,
        api_family=api_family,
        model=settings.model,
        adapter_revision=adapter_revision(provider, api_family),
        tenant=tenant,
        subject=subject,
        registry_name=pins.registry_name,
        registry_revision=pins.registry_revision,
        registry_path=pins.registry_path,
        registry_sha256=pins.registry_sha256,
        policy_revision=pins.policy_revision,
        policy_sha256=pins.policy_sha256,
        settings=settings.model_dump(exclude_none=True),
        source=source,
        guards=guards,
        counters=Counters(),
        created_at=iso(now),
        updated_at=iso(now),
        deadline_at=iso(later(now, guards.deadline_s)),
    )
