"""Call binding: which result belongs to which call, under whose authority, provably.

``result_sha256`` hashes both projections of a call's result (``model_result``, what the
model is shown, and ``protected_audit``, what only the store keeps). ``call_binding_sha256``
hashes one document that ties that result to everything it was produced under:

- producer: provider, API family, model, adapter revision; response id, call id, turn;
- operation: operation id, tenant, subject, registry hash and policy revision (and the
  policy block's hash, for operations started since it is pinned);
- intent: tool name, tool hash (its definition and handler), idempotency key, approval id,
  the exact argument text the model sent and the canonical arguments' digest;
- outcome: the call state and ``result_sha256``.

Both are recomputed from trusted context (the stored call and its operation), never read
back as given: ``check_result_set`` does so before results are sent to a model, and
``audit.verify`` for every stored call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .canonical import fast_sha256_of, sha256_hex


class ResultForModel(Protocol):
    """One result about to go back to a model (the engine's ``ResultForModel`` fits)."""

    @property
    def response_id(self) -> str: ...

    @property
    def call_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def is_error(self) -> bool: ...

    @property
    def content(self) -> dict[str, Any]: ...


__all__ = [
    "CALL_FIELDS",
    "OP_FIELDS",
    "OP_PINNED_FIELDS",
    "binding_document",
    "call_binding_sha256",
    "check_result_set",
    "result_sha256",
]

#: Fields of the operation a binding includes.
OP_FIELDS = (
    "operation_id",
    "provider",
    "api_family",
    "model",
    "adapter_revision",
    "tenant",
    "subject",
    "registry_sha256",
    "policy_revision",
)

#: Fields of the operation a binding includes when set (stores from before they were
#: pinned have none, and their bindings recompute as they were written).
OP_PINNED_FIELDS = ("policy_sha256",)

#: Fields of the call a binding includes (``raw_arguments`` enters as its digest).
CALL_FIELDS = (
    "turn_idx",
    "response_id",
    "call_id",
    "name",
    "state",
    "idempotency_key",
    "arguments_sha256",
    "tool_sha256",
    "approval_id",
)


def result_sha256(model_result: Any, protected_audit: Any) -> str:
    """The hash of a call's result, both projections."""
    return fast_sha256_of({"model_result": model_result, "protected_audit": protected_audit})


def binding_document(
    op: Mapping[str, Any], call: Mapping[str, Any], result_sha: str
) -> dict[str, Any]:
    """The document ``call_binding_sha256`` hashes (values as plain JSON)."""
    doc: dict[str, Any] = {"v": 1, "result_sha256": result_sha}
    for name in OP_FIELDS:
        doc[name] = op[name]
    for name in OP_PINNED_FIELDS:
        if op.get(name) is not None:
            doc[name] = op[name]
    for name in CALL_FIELDS:
        value = call[name]
        doc[name] = value if value is None or type(value) in (int, str) else str(value)
    doc["raw_arguments_sha256"] = sha256_hex(str(call["raw_arguments"]).encode("utf-8"))
    return doc


def call_binding_sha256(op: Mapping[str, Any], call: Mapping[str, Any], result_sha: str) -> str:
    """Hash of ``binding_document``: the result ``result_sha`` bound to this call and op."""
    return fast_sha256_of(binding_document(op, call, result_sha))


def check_result_set(
    op: Mapping[str, Any],
    calls: Sequence[Mapping[str, Any]],
    results: Sequence[ResultForModel],
) -> list[str]:
    """Why ``results`` may not go back to the model as the answer to ``calls`` ([] if it may).

    ``calls`` is the trusted table of the turn (each with its committed ``model_result``,
    ``protected_audit``, ``result_sha256`` and ``call_binding_sha256``). ``results`` must be
    a bijection onto it keyed by (response_id, call_id) — order may change, identity may
    not — and each result's content must re-bind to the call it answers.
    """
    problems: list[str] = []
    table: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in calls:
        key = (str(row["response_id"]), str(row["call_id"]))
        if key in table:
            problems.append(f"call {key[1]} of response {key[0]} is recorded twice")
        table[key] = row
    answered: set[tuple[str, str]] = set()
    for result in results:
        key = (result.response_id, result.call_id)
        call = table.get(key)
        if call is None:
            problems.append(
                f"result for unknown call {result.call_id} (response {result.response_id})"
            )
        elif key in answered:
            problems.append(f"two results for call {result.call_id}")
        else:
            answered.add(key)
            problem = _rebind(op, call, result)
            if problem:
                problems.append(problem)
    for key in table:
        if key not in answered:
            problems.append(f"no result for call {key[1]} (response {key[0]})")
    return problems


def _rebind(op: Mapping[str, Any], call: Mapping[str, Any], result: ResultForModel) -> str | None:
    """Recompute the binding of ``result`` as the answer to ``call``; a reason if it fails."""
    who = f"call {call['call_id']}"
    if call["model_result"] is None:
        return f"{who} has no committed result"
    if result.name != call["name"]:
        return f"result for {who} names tool {result.name!r}, the call is {call['name']!r}"
    recomputed = result_sha256(result.content, call["protected_audit"])
    if recomputed != call["result_sha256"]:
        return f"result for {who} is not the result committed for it (result_sha256 differs)"
    if call_binding_sha256(op, call, recomputed) != call["call_binding_sha256"]:
        return f"result for {who} is bound to another call or context (call_binding_sha256 differs)"
    return None
