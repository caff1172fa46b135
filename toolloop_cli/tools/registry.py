"""The tool registry: a YAML file that is the only allowlist of what a model may call.

Everything is checked when the file is loaded, so a bad registry stops a run before any model
turn: every problem is collected with its YAML path (``tools.submit_refund.handler``) rather
than failing on the first one. Handlers are imported here, from the file's ``module:function``
strings, and never from model output; each tool's argument validator is compiled once.

``import_handlers=False`` checks and hashes the same document without importing anything:
``verify`` and the approval hints read registries named by a store, which may not be trusted.
Handler modules are found as ``tools.handler_modules`` says: one in the registry's folder is
loaded from that file, never in front of the standard library.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.engine.clock import MAX_SPAN_S
from toolloop_cli.engine.types import TEXT_INPUT
from toolloop_cli.errors import RegistryError
from toolloop_cli.strict_json import MAX_ARGUMENT_BYTES
from toolloop_cli.tools import http_tool, mcp_registry, strict_yaml
from toolloop_cli.tools.context import ToolContext
from toolloop_cli.tools.definitions import Approval, Handler, Policy, Registry, Risk, ToolDef
from toolloop_cli.tools.handler_modules import import_handler_module
from toolloop_cli.tools.provider_tools import OPENAI_CUSTOM, check_provider_tool
from toolloop_cli.tools.validation import (
    json_problems,
    parameters_problem,
    schema_problem,
)

__all__ = [
    "Approval",
    "Handler",
    "Policy",
    "Registry",
    "Risk",
    "ToolDef",
    "check_registry",
    "load_registry",
]

Problem = tuple[str, str]
Keys = frozenset[str]

_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$", re.ASCII)
_TOP_KEYS = frozenset({"registry", "revision", "policy", "tools", "defaults", "mcp_servers"})
_POLICY_KEYS = frozenset({"revision", "approvers", "approval_ttl_s", "forbid_self_approval"})
_TOOL_KEYS = frozenset(
    "schema_version description risk timeout_ms handler reconcile approval max_result_bytes"
    " max_argument_bytes idempotency parameters result_schema sequential provider_tool"
    " input_schema_sha256 headers_from_env".split()
)
#: ``description`` may be left out or empty, as every provider allows; a provider-defined
#: tool (``provider_tool``) needs no ``parameters``: its provider fixes its input
_TOOL_REQUIRED = frozenset({"schema_version", "risk", "handler", "parameters"})
_PROVIDER_TOOL_REQUIRED = _TOOL_REQUIRED - {"parameters"}
#: what a provider-defined tool's calls are checked against when the registry says nothing
_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_UNPARSED = strict_yaml.NOT_LOADED
#: A registry is a few KiB (10,000 tools are 2.6 MB); anything larger is refused unread.
MAX_REGISTRY_BYTES = 16 * 1024 * 1024


def load_registry(path: str | Path, *, import_handlers: bool = True) -> Registry:
    """Load and check a registry; raise ``RegistryError`` listing every problem found.

    Without ``import_handlers`` nothing is imported or executed: the handler strings are
    checked for form only, and the handlers of the result raise instead of running.
    """
    registry, problems = _analyse(Path(path), import_handlers)
    if registry is None:
        raise RegistryError(str(path), problems)
    return registry


def check_registry(path: str | Path, *, import_handlers: bool = True) -> list[Problem]:
    """Every problem in a registry file as ``(yaml_path, message)``; ``[]`` when it is usable."""
    return _analyse(Path(path), import_handlers)[1]


def _analyse(path: Path, import_handlers: bool) -> tuple[Registry | None, list[Problem]]:
    doc, problems = _read_document(path)
    if doc is _UNPARSED:
        return None, problems
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else f"a {type(doc).__name__}"
        return None, [("", f"the document must be a mapping, but it is {kind}")]
    _check_keys(doc, "", _TOP_KEYS, _TOP_KEYS - {"defaults", "mcp_servers"}, problems)
    name = _get(doc, "registry", "", problems, "str", "")
    revision = _get(doc, "revision", "", problems, "str", "")
    policy = _check_policy(doc.get("policy"), "policy" in doc, problems)
    folder = path.parent if import_handlers else None
    servers = mcp_registry.check_servers(doc.get("mcp_servers"), path.parent, problems)
    remote = _Remote(folder, mcp_registry.McpTools(servers, connect=import_handlers))
    tools = _check_tools(doc.get("tools"), "tools" in doc, remote, problems)
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(("defaults", "must be a mapping"))
    else:
        declared = doc.get("tools")
        _check_defaults(defaults, set(declared) if isinstance(declared, dict) else set(), problems)
    needing = [t.name for t in tools.values() if t.approval == "always"]
    approvers_wrong = any(path == "policy.approvers" for path, _ in problems)
    if needing and not policy.approvers and "policy" in doc and not approvers_wrong:
        verb = "needs" if len(needing) == 1 else "need"
        problems.append(("policy.approvers", f"is empty, but {', '.join(needing)} {verb} approval"))
    if problems or not isinstance(defaults, dict):
        return None, problems
    resolved = path.resolve()
    registry = Registry(
        name, revision, resolved, policy, tools, sha256_of(doc), defaults, import_handlers
    )
    return registry, []


def _check_defaults(value: dict[Any, Any], tools: set[Any], out: list[Problem]) -> None:
    """The guards a registry sets for its operations, checked as a run would take them:
    known names, values the guards accept, per-tool limits only for this registry's tools."""
    from pydantic import ValidationError

    from toolloop_cli.engine.records import Guards

    known = {k: v for k, v in value.items() if k in Guards.model_fields}
    names = ", ".join(sorted(Guards.model_fields))
    for k in value:
        if k not in known:
            out.append((f"defaults.{k}", f"unknown guard (known: {names})"))
    try:
        Guards(**known)
    except ValidationError as exc:
        for err in exc.errors():
            out.append(("defaults." + ".".join(str(p) for p in err["loc"]), err["msg"]))
    per_tool = known.get("max_calls_per_tool")
    if isinstance(per_tool, dict):
        out.extend(
            (f"defaults.max_calls_per_tool.{name}", "not a tool of this registry")
            for name in per_tool
            if name not in tools
        )


def _check_policy(value: object, present: bool, problems: list[Problem]) -> Policy:
    fallback = Policy("", (), 3600, True)
    if not isinstance(value, dict):
        if present:
            problems.append(("policy", "must be a mapping"))
        return fallback
    _check_keys(value, "policy", _POLICY_KEYS, frozenset({"revision", "approvers"}), problems)
    return Policy(
        revision=_get(value, "revision", "policy", problems, "str", ""),
        approvers=tuple(_get(value, "approvers", "policy", problems, "names", [])),
        approval_ttl_s=_get(value, "approval_ttl_s", "policy", problems, "span", 3600),
        forbid_self_approval=_get(value, "forbid_self_approval", "policy", problems, "bool", True),
    )


@dataclass(frozen=True)
class _Remote:
    """Where handlers come from: the registry's folder (None: import nothing) and its servers."""

    folder: Path | None
    mcp: mcp_registry.McpTools


def _check_tools(
    value: object, present: bool, folder: _Remote, problems: list[Problem]
) -> dict[str, ToolDef]:
    if not isinstance(value, dict) or not value:
        if present:
            problems.append(("tools", "must be a non-empty mapping of tool names to tools"))
        return {}
    tools: dict[str, ToolDef] = {}
    for name, body in value.items():
        path = _join("tools", str(name))
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            problems.append((path, f"tool name must match {_TOOL_NAME.pattern}"))
        if not isinstance(body, dict):
            problems.append((path, "must be a mapping"))
            continue
        tool = _check_tool(str(name), body, path, folder, problems)
        if tool is not None:
            tools[tool.name] = tool
    return tools


def _check_tool(
    name: str, body: dict[Any, Any], path: str, folder: _Remote, problems: list[Problem]
) -> ToolDef | None:
    """Check one tool mapping; a ``ToolDef`` only when the tool itself has no problem."""
    before = len(problems)
    provider_tool = None
    if "provider_tool" in body:
        provider_tool, found = check_provider_tool(
            name, body["provider_tool"], _join(path, "provider_tool")
        )
        problems.extend(found)
    required = _TOOL_REQUIRED if "provider_tool" not in body else _PROVIDER_TOOL_REQUIRED
    _check_keys(body, path, _TOOL_KEYS, required, problems)
    parameters = _check_schema(body, "parameters", path, problems, object_required=True)
    if parameters is None and "parameters" not in body and "provider_tool" in body:
        text = provider_tool is not None and provider_tool.type == OPENAI_CUSTOM
        parameters = copy.deepcopy(TEXT_INPUT) if text else dict(_ANY_OBJECT)
    result_schema = _check_schema(body, "result_schema", path, problems, object_required=False)
    handler = _resolve(body, "handler", path, folder, problems)
    reconcile = _resolve(body, "reconcile", path, folder, problems)
    key_fields = _check_key_fields(body, path, parameters, problems)
    tool_fields = {
        "schema_version": _get(body, "schema_version", path, problems, "str", ""),
        "description": _get(body, "description", path, problems, "description", None) or "",
        "risk": _get(body, "risk", path, problems, "risk", "read"),
        "approval": _get(body, "approval", path, problems, "approval", "never"),
        "timeout_ms": _get(body, "timeout_ms", path, problems, "count", 5000),
        "max_result_bytes": _get(body, "max_result_bytes", path, problems, "count", 65536),
        "max_argument_bytes": _get(
            body, "max_argument_bytes", path, problems, "argument_cap", 65536
        ),
        "sequential": _get(body, "sequential", path, problems, "bool", False),
    }
    if len(problems) > before or handler is None or parameters is None:
        return None
    return ToolDef(
        name=name,
        handler=handler,
        handler_path=body["handler"],
        reconcile=reconcile,
        reconcile_path=body.get("reconcile"),
        parameters=parameters,
        result_schema=result_schema,
        key_fields=key_fields,
        sha256=sha256_of(body),
        provider_tool=provider_tool,
        **tool_fields,
    )


def _check_schema(
    body: dict[Any, Any], key: str, path: str, problems: list[Problem], *, object_required: bool
) -> dict[str, Any] | None:
    """A JSON Schema from the file, checked against the 2020-12 metaschema."""
    if key not in body:
        return None
    where = _join(path, key)
    schema = body[key]
    if not isinstance(schema, dict):
        problems.append((where, "must be a mapping (a JSON Schema)"))
        return None
    problem = parameters_problem(schema) if object_required else schema_problem(schema)
    if problem is not None:
        problems.append((where + problem[0], problem[1]))
        return None
    return schema


def _check_key_fields(
    body: dict[Any, Any], path: str, parameters: dict[str, Any] | None, problems: list[Problem]
) -> tuple[str, ...] | None:
    """``idempotency.key_fields``: the declared intent fields an idempotency key is made of."""
    if "idempotency" not in body:
        return None
    where = _join(path, "idempotency")
    value = body["idempotency"]
    if not isinstance(value, dict):
        problems.append((where, "must be a mapping with key_fields"))
        return None
    _check_keys(value, where, frozenset({"key_fields"}), frozenset({"key_fields"}), problems)
    fields: list[str] = _get(value, "key_fields", where, problems, "names", [])
    if value.get("key_fields") == []:
        problems.append((_join(where, "key_fields"), "must list at least one field"))
    declared = {} if parameters is None else parameters.get("properties")
    for index, name in enumerate(fields if parameters is not None else []):  # else: reported
        if not isinstance(declared, dict) or name not in declared:
            message = f"'{name}' is not a declared property in parameters"
            problems.append((f"{where}.key_fields[{index}]", message))
    return tuple(fields) or None


def _resolve(
    body: dict[Any, Any], key: str, path: str, remote: _Remote, problems: list[Problem]
) -> Handler | None:
    """Import ``module:function`` named by the file (never by a model) and check it is callable.

    ``folder`` is None when nothing may be imported: the string is checked for form only.
    """
    if key not in body:
        return None
    where = _join(path, key)
    spec = body[key]
    if key == "handler" and "input_schema_sha256" in body and not mcp_registry.is_mcp(spec):
        problems.append((_join(path, "input_schema_sha256"), "is only for mcp: handlers"))
    if key == "handler" and "headers_from_env" in body and not http_tool.is_http(spec):
        problems.append((_join(path, "headers_from_env"), "is only for http: handlers"))
    if mcp_registry.is_mcp(spec):
        return cast(Handler | None, remote.mcp.resolve(spec, body, where, problems))
    if http_tool.is_http(spec):
        run = remote.folder is not None
        return cast(Handler | None, http_tool.resolve(spec, body, where, run, problems))
    folder = remote.folder
    if not isinstance(spec, str) or not _IMPORT_PATH.match(spec):
        problems.append((where, "must be an import path 'module:function'"))
        return None
    if folder is None:
        return _not_imported(spec)
    module_name, function_name = spec.split(":")
    module, error = import_handler_module(module_name, folder)
    if module is None:
        problems.append((where, error))
        return None
    target = getattr(module, function_name, None)
    if not callable(target):
        missing = target is None and not hasattr(module, function_name)
        message = f"module '{module_name}' has no function '{function_name}'"
        problems.append((where, message if missing else f"'{spec}' is not callable"))
        return None
    return cast(Handler, target)


def _not_imported(spec: str) -> Handler:
    """The handler of a registry loaded without imports: it refuses to run."""

    def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        raise RuntimeError(f"handler {spec} was not imported (registry loaded without imports)")

    return handler


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # kind: (test, what it must be)
    "str": (_text, "a non-empty string"),
    "description": (lambda v: v is None or isinstance(v, str), "a string (it may be empty)"),
    "count": (lambda v: type(v) is int and v > 0, "a positive integer"),
    "span": (
        lambda v: type(v) is int and 0 < v <= MAX_SPAN_S,
        f"a positive integer of at most {MAX_SPAN_S} (seconds: 10 years)",
    ),
    "argument_cap": (
        lambda v: type(v) is int and 0 < v <= MAX_ARGUMENT_BYTES,
        f"a positive integer of at most {MAX_ARGUMENT_BYTES} (1 MiB)",
    ),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "risk": (lambda v: v in ("read", "write", "irreversible"), "one of read, write, irreversible"),
    "approval": (lambda v: v in ("never", "always"), "one of never, always"),
    "names": (
        lambda v: isinstance(v, list) and all(map(_text, v)) and len(set(v)) == len(v),
        "a list of distinct non-empty strings",
    ),
}


def _get(
    m: dict[Any, Any], key: str, path: str, problems: list[Problem], kind: str, default: Any
) -> Any:
    """``m[key]`` when it is of ``kind``; else record a problem. Absent keys give ``default``."""
    test, expected = _KINDS[kind]
    if key in m and not test(m[key]):
        problems.append((_join(path, key), f"must be {expected}"))
    return m[key] if key in m and test(m[key]) else default


def _check_keys(
    m: dict[Any, Any], path: str, allowed: Keys, required: Keys, out: list[Problem]
) -> None:
    out.extend((_join(path, str(k)), "unknown key") for k in m if k not in allowed)
    out.extend((_join(path, k), "required key is missing") for k in sorted(required - m.keys()))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _read_document(path: Path) -> tuple[Any, list[Problem]]:
    """The document (``NOT_LOADED`` if unusable) and its problems, duplicate keys included.

    Aliases and nesting deeper than ``strict_yaml.MAX_DEPTH`` are refused before the document
    is built, so neither a billion-laughs tree nor 20,000 brackets costs more than one walk.
    """
    try:
        text = strict_yaml.read_capped(path, MAX_REGISTRY_BYTES)
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or over the size limit
        return _UNPARSED, [("", f"cannot read the registry file: {exc}")]
    try:
        doc, problems = strict_yaml.load(text, strict_yaml.TextDatesLoader)
    except yaml.YAMLError as exc:
        return _UNPARSED, [("", f"invalid YAML{strict_yaml.describe(exc)}")]
    if doc is _UNPARSED:
        return _UNPARSED, problems
    not_json = json_problems(doc, "")
    return (_UNPARSED if not_json else doc), problems + not_json
