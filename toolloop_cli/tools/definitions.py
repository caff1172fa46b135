"""What a loaded registry is: its policy, its tools and their compiled checks.

The records only; reading and checking the YAML that produces them is ``tools.registry``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from jsonschema.protocols import Validator

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.engine.types import ToolSpec
from toolloop_cli.tools.context import ToolContext
from toolloop_cli.tools.provider_tools import ProviderTool
from toolloop_cli.tools.validation import compile_validator, violations

__all__ = ["Approval", "Handler", "Policy", "Registry", "Risk", "ToolDef"]

Handler = Callable[[dict[str, Any], ToolContext], Any]
Risk = Literal["read", "write", "irreversible"]
Approval = Literal["never", "always"]


@dataclass(frozen=True)
class Policy:
    """Who may approve, for how long an approval request stays open, under which revision."""

    revision: str
    approvers: tuple[str, ...]
    approval_ttl_s: int
    forbid_self_approval: bool

    @property
    def policy_sha256(self) -> str:
        """Hash of the canonical policy block (every field, defaults filled in): what an
        approval pins, so an edit without a revision bump is seen (tools/policy.py)."""
        return sha256_of(asdict(self))


@dataclass(frozen=True)
class ToolDef:
    """One allowed tool, its handler already imported and its argument validator compiled."""

    name: str
    schema_version: str
    description: str
    risk: Risk
    timeout_ms: int
    handler: Handler
    handler_path: str
    reconcile: Handler | None
    reconcile_path: str | None
    approval: Approval
    max_result_bytes: int
    max_argument_bytes: int
    parameters: dict[str, Any]
    result_schema: dict[str, Any] | None
    key_fields: tuple[str, ...] | None
    sequential: bool
    sha256: str
    #: set when the tool is one its provider defines (``tools.provider_tools``)
    provider_tool: ProviderTool | None = None
    validator: Validator = field(init=False, compare=False, repr=False)
    result_validator: Validator | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        result = None if self.result_schema is None else compile_validator(self.result_schema)
        object.__setattr__(self, "validator", compile_validator(self.parameters))
        object.__setattr__(self, "result_validator", result)

    @property
    def side_effecting(self) -> bool:
        """Anything but a read can change the world, so it needs an idempotency key."""
        return self.risk != "read"

    def argument_violations(self, arguments: object) -> list[str]:
        """Every violation of the tool's ``parameters`` schema, sorted; ``[]`` when valid."""
        return violations(self.validator, arguments)

    def result_violations(self, value: object) -> list[str]:
        """Every violation of the ``result_schema``; ``[]`` when valid or when there is none."""
        return [] if self.result_validator is None else violations(self.result_validator, value)


@dataclass(frozen=True)
class Registry:
    """A loaded registry: the allowlist, its policy and the hashes that pin its revision."""

    name: str
    revision: str
    path: Path
    policy: Policy
    tools: dict[str, ToolDef]
    sha256: str
    defaults: dict[str, Any]
    #: False when loaded with ``import_handlers=False``: its handlers refuse to run
    imported: bool = True

    def tool_specs(self) -> list[ToolSpec]:
        """The tools as declared to a model, in registry order."""
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            if t.provider_tool is None
            else ToolSpec(
                name=t.name,
                description=t.description,
                parameters=t.parameters,
                provider=t.provider_tool.provider,
                declaration=t.provider_tool.declaration(t.name, t.description),
            )
            for t in self.tools.values()
        ]

    def get(self, name: str) -> ToolDef | None:
        """The tool registered under exactly ``name``; no normalisation, no import."""
        return self.tools.get(name)
