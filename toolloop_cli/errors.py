"""The exceptions toolloop raises, as one tree.

Every error an operator can cause or meet is a ``ToolloopError``; the CLI turns
each into exit code 2 and one line on stderr. Anything else escaping is a bug.

    ToolloopError
      UsageError                 bad flags, paths or ids
      RegistryError              .problems: list of (yaml_path, message)
      TranscriptError            malformed cassette, unknown provider URI, exhausted recording
        NestedTooDeep            a recorded body nested deeper than toolloop reads provider JSON
      AdapterError               .provider, .status, .retryable; raised ``from`` the foreign error
        MalformedProviderPayload a provider answer that does not have the documented shape
        DeadlineExceeded         a request still in flight when the operation's time ran out
      IllegalTransition          the state machine refused from -> to
      StoreError                 the store cannot be opened or written
        TamperedStore            a stored value no longer matches its hash; never repaired
        StoreBusy                another process held a lock past lock_timeout; nothing written
      ApprovalError              expired, wrong approver, already decided, digest or policy mismatch
        AlreadyDecided           a second decision on the same approval
      RegistryDrift              a tool changed or was removed since a call of it was allowed
      OperationNotFound          no such operation (or approval) for this tenant
      OperationTerminal          the operation is terminal: nothing to step or resume
      OperationBusy              another live process holds the operation's lease
      CanonicalJSONError         a value with no canonical JSON form, so no hash
      ExportFailed               the OpenTelemetry collector did not take the spans

Every class is defined here, whichever layer raises it; the modules that used to define
``OperationTerminal`` (engine/loop.py), ``OperationBusy`` (store/lease.py) and
``CanonicalJSONError`` (audit/canonical.py) re-export it under its old name.

Control-flow signals raised by tool handlers (``ToolError``) are not part of this
tree: they are a handler's way to report a business error to the model.
"""

from __future__ import annotations

__all__ = [
    "AdapterError",
    "AlreadyDecided",
    "ApprovalError",
    "CanonicalJSONError",
    "DeadlineExceeded",
    "ExportFailed",
    "IllegalTransition",
    "MalformedProviderPayload",
    "OperationBusy",
    "OperationNotFound",
    "OperationTerminal",
    "RegistryDrift",
    "RegistryError",
    "StoreBusy",
    "StoreError",
    "TamperedStore",
    "ToolloopError",
    "TranscriptError",
    "NestedTooDeep",
    "UsageError",
]


class ToolloopError(Exception):
    """Base of every error toolloop reports to an operator."""


class UsageError(ToolloopError):
    """Bad flags, paths, ids or option values."""


class RegistryError(ToolloopError):
    """A registry file that cannot be used; ``problems`` lists each one with its YAML path."""

    def __init__(self, path: str, problems: list[tuple[str, str]]) -> None:
        self.path = path
        self.problems = problems
        where, what = problems[0] if problems else ("", "invalid registry")
        first = f"{where}: {what}" if where else what  # a problem of the whole file has no path
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"registry {path}: {first}{more}")


class TranscriptError(ToolloopError):
    """A cassette that cannot be read, or a recording that ran out of responses."""


class NestedTooDeep(TranscriptError):
    """A recorded body nested deeper than ``strict_json.MAX_DEPTH`` levels: toolloop reads
    no provider JSON that deep (an answer that deep is refused the same way)."""


class AdapterError(ToolloopError):
    """A provider exchange that failed; carries what an operator needs to judge it."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        self.provider = provider
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class MalformedProviderPayload(AdapterError):
    """A provider answer that does not have the documented shape; never retried, never repaired."""


class DeadlineExceeded(AdapterError):
    """The request ran out of the time it was given (the operation's deadline); never retried.

    The engine ends the operation BUDGET_EXHAUSTED: it is the deadline guard tripping mid-request.
    """


class IllegalTransition(ToolloopError):
    """The state machine refused a transition that is not in its table."""

    def __init__(self, kind: str, source: str, target: str) -> None:
        self.kind = kind
        self.source = source
        self.target = target
        super().__init__(f"illegal {kind} transition {source} -> {target}")


class StoreError(ToolloopError):
    """The store cannot be opened, migrated or written."""


class TamperedStore(StoreError):
    """A stored value no longer matches the hash it was committed with."""


class StoreBusy(StoreError):
    """A PostgreSQL statement waited for another process's lock past ``lock_timeout``; its
    transaction was rolled back, so nothing of it was written."""


class ApprovalError(ToolloopError):
    """An approval decision that is not allowed: wrong approver, expired, mismatched."""


class AlreadyDecided(ApprovalError):
    """The approval already has a decision; the first one stands."""


class RegistryDrift(ToolloopError):
    """A tool's definition changed (or it left the registry) after a call of it was allowed.

    Nothing runs under a definition the call was not checked (or approved) against; restoring
    the registry lets the operation continue.
    """


class OperationNotFound(ToolloopError):
    """No operation or approval with that id is visible to this tenant."""


class OperationTerminal(ToolloopError):
    """The operation is in a terminal state: there is nothing to step or resume."""


class OperationBusy(ToolloopError):
    """Another live process holds the operation's lease (or took it over from this one)."""


class CanonicalJSONError(ToolloopError):
    """A value that has no canonical JSON form (NaN, infinity, huge ints, non-JSON types)."""


class ExportFailed(ToolloopError):
    """The collector did not take the spans (unreachable, refused, or an error answer)."""
