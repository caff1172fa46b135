"""The registry's MCP side: the ``mcp_servers:`` section and tools handled by ``mcp:SERVER/TOOL``.

A server is only a place the registry's tools run: the registry still names every tool, its
schema, risk and approval. At load each server is asked for its tool list once; a tool whose
announced input schema does not hash to the registry's ``input_schema_sha256`` is refused (the
server changed what the owner reviewed), and tools the server has but the registry lacks are
never looked at, so they are never offered to a model.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.tools.context import ToolContext, ToolError
from toolloop_cli.tools.mcp_client import McpConnection, McpUnavailable, ServerConfig

__all__ = [
    "McpTools",
    "check_servers",
    "headers_from_env",
    "callable_name",
    "is_mcp",
    "mcp_result",
    "request_meta",
]

Problem = tuple[str, str]
#: ``mcp:SERVER/TOOL``: the server's name as in ``mcp_servers``, then the tool's name as the
#: server announces it (MCP asks for ``[A-Za-z0-9_.-]``, some servers use spaces, slashes
#: or other letters): 1 to 128 characters, no control characters, no space at either end
_SPEC = re.compile(
    r"^mcp:([A-Za-z_][A-Za-z0-9_-]{0,63})/(?=\S)([^\x00-\x1f\x7f-\x9f]{1,128})(?<=\S)$"
)
_SERVER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STDIO_KEYS = frozenset({"command", "args", "env", "cwd"})
_HTTP_KEYS = frozenset({"url", "headers_from_env"})
TOOL_NAME_RULE = "a tool's name is 1 to 128 characters, with no control characters"


def callable_name(tool: str) -> bool:
    """True when ``mcp:SERVER/<tool>`` names a tool a registry can use."""
    return _SPEC.match(f"mcp:s/{tool}") is not None


#: an error text from a server, as told to the model, is cut to this many characters
MAX_ERROR_CHARS = 2000
META_PREFIX = "toolloop/"


def is_mcp(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith("mcp:")


def check_servers(value: object, folder: Path | None, problems: list[Problem]) -> dict[str, Any]:
    """The ``mcp_servers`` mapping checked for form: name → ``ServerConfig``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(("mcp_servers", "must be a mapping of server names to servers"))
        return {}
    servers: dict[str, ServerConfig] = {}
    for name, body in value.items():
        where = f"mcp_servers.{name}"
        if not isinstance(name, str) or not _SERVER_NAME.match(name):
            problems.append((where, f"server name must match {_SERVER_NAME.pattern}"))
            continue
        config = _check_server(name, body, where, folder, problems)
        if config is not None:
            servers[name] = config
    return servers


def _check_server(
    name: str, body: object, where: str, folder: Path | None, problems: list[Problem]
) -> ServerConfig | None:
    if not isinstance(body, dict):
        problems.append((where, "must be a mapping with either command (stdio) or url (HTTP)"))
        return None
    before = len(problems)
    stdio, http = "command" in body, "url" in body
    if stdio == http:
        problems.append((where, "needs exactly one of command (stdio) or url (streamable HTTP)"))
        return None
    allowed = _STDIO_KEYS if stdio else _HTTP_KEYS
    for key in sorted(set(map(str, body)) - allowed):
        problems.append((f"{where}.{key}", "is not a known key for this kind of server"))
    if http:
        url = body["url"]
        if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
            problems.append((f"{where}.url", "must be an http:// or https:// URL"))
        headers = headers_from_env(
            body.get("headers_from_env", {}), f"{where}.headers_from_env", problems
        )
        if len(problems) > before:
            return None
        return ServerConfig(name=name, url=url, headers=headers)
    command, args = body["command"], body.get("args", [])
    env, cwd = body.get("env", {}), body.get("cwd")
    if not isinstance(command, str) or not command.strip():
        problems.append((f"{where}.command", "must be a non-empty string"))
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        problems.append((f"{where}.args", "must be a list of strings"))
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str) for k, v in env.items()
    ):
        problems.append((f"{where}.env", "must map variable names to strings"))
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        problems.append((f"{where}.cwd", "must be a folder (relative to the registry's)"))
    if len(problems) > before:
        return None
    folder_cwd = None if cwd is None else str((folder or Path(".")) / cwd)
    return ServerConfig(name=name, command=command, args=tuple(args), env=env, cwd=folder_cwd)


def headers_from_env(value: object, where: str, problems: list[Problem]) -> dict[str, str]:
    """Header values read from environment variables, so no secret is written in the file."""
    if not isinstance(value, dict):
        problems.append((where, "must map header names to environment variable names"))
        return {}
    headers: dict[str, str] = {}
    for header, variable in value.items():
        if not isinstance(variable, str) or not _ENV_NAME.match(variable):
            problems.append((f"{where}.{header}", "must name an environment variable"))
        elif variable not in os.environ:
            problems.append((f"{where}.{header}", f"environment variable {variable} is not set"))
        else:
            headers[str(header)] = os.environ[variable]
    return headers


class McpTools:
    """One registry load's servers: connected lazily, each listed once, for its ``mcp:`` tools."""

    def __init__(self, servers: dict[str, ServerConfig], connect: bool) -> None:
        self.servers = servers
        self.connect = connect
        self._connections: dict[str, McpConnection] = {}
        self._announced: dict[str, dict[str, dict[str, Any]]] = {}
        self._failed: dict[str, str] = {}

    def resolve(self, spec: str, body: dict[Any, Any], where: str, problems: list[Problem]) -> Any:
        """The handler for ``mcp:SERVER/TOOL``, or ``None`` with the problem recorded.

        ``handler`` needs ``input_schema_sha256`` and must match the server's announcement;
        a ``reconcile`` tool must exist on the server (its arguments are the tool's own).
        """
        match = _SPEC.match(spec)
        if match is None:
            problems.append((where, f"must be 'mcp:SERVER/TOOL' ({TOOL_NAME_RULE})"))
            return None
        server, tool = match.groups()
        pinned = body.get("input_schema_sha256")
        is_handler = where.endswith(".handler")
        if server not in self.servers:
            problems.append((where, f"names server '{server}', which is not in mcp_servers"))
            return None
        pin_where = where.rsplit(".", 1)[0] + ".input_schema_sha256"
        if is_handler and (not isinstance(pinned, str) or not _HASH.match(pinned)):
            problems.append((pin_where, "an mcp: tool needs its pinned 'sha256:<64 hex>'"))
            return None
        if not self.connect:
            return _not_connected(spec)
        announced = self._tools_of(server, problems)
        if announced is None:
            return None
        if tool not in announced:
            problems.append((where, f"server '{server}' does not offer a tool named '{tool}'"))
            return None
        actual = sha256_of(announced[tool])
        if is_handler and actual != pinned:
            problems.append(
                (
                    pin_where,
                    f"server '{server}' announces tool '{tool}' with input schema {actual}, "
                    f"not the pinned {pinned}: review the change, then re-pin",
                )
            )
            return None
        timeout_ms = body.get("timeout_ms", 5000)
        timeout = timeout_ms if type(timeout_ms) is int and timeout_ms > 0 else 5000
        return _handler(self._connections[server], tool, timeout, reconcile=not is_handler)

    def announced(self, server: str) -> dict[str, dict[str, Any]]:
        """What ``server`` announced at load (empty before it was listed)."""
        return self._announced.get(server, {})

    def _tools_of(self, server: str, problems: list[Problem]) -> dict[str, dict[str, Any]] | None:
        if server in self._failed:
            return None
        if server not in self._announced:
            try:
                connection = McpConnection.open(self.servers[server])
                self._connections[server] = connection
                self._announced[server] = connection.list_tools()
            except McpUnavailable as exc:
                self._failed[server] = str(exc)
                problems.append((f"mcp_servers.{server}", f"cannot list its tools: {exc}"))
                return None
        return self._announced[server]


def request_meta(context: ToolContext) -> dict[str, Any]:
    """What the server is told in ``_meta``: the key that makes a retried effect safe."""
    return {
        f"{META_PREFIX}idempotency_key": context.idempotency_key,
        f"{META_PREFIX}operation_id": context.operation_id,
        f"{META_PREFIX}call_id": context.call_id,
    }


def mcp_result(result: Any, *, reconcile: bool) -> Any:
    """A ``CallToolResult`` as toolloop's value: ``isError`` is a business error (``ToolError``),
    ``structuredContent`` the value when present, else the content blocks as JSON. A reconcile
    tool's ``{"result": X}`` (how the SDK wraps a ``T | None`` return) is read as X, and an
    empty answer or a null X means the downstream has no record of the key."""
    blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]
    if result.is_error:
        text = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        raise ToolError((text or "the MCP tool reported an error")[:MAX_ERROR_CHARS])
    structured = result.structured_content
    if not reconcile:
        return structured if structured is not None else blocks
    if isinstance(structured, dict) and set(structured) == {"result"}:
        structured = structured["result"]  # the SDK's wrapping of a ``T | None`` return
    if structured is None and not (result.structured_content is None and blocks):
        return None
    return structured if structured is not None else blocks


def _handler(connection: McpConnection, tool: str, timeout_ms: int, *, reconcile: bool) -> Any:
    def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        budget_ms = min(timeout_ms, context.timeout_ms or timeout_ms)
        result = connection.call_tool(tool, arguments, request_meta(context), budget_ms / 1000)
        return mcp_result(result, reconcile=reconcile)

    handler.__qualname__ = f"mcp:{connection.config.name}/{tool}"
    return handler


def _not_connected(spec: str) -> Any:
    def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        raise RuntimeError(f"handler {spec} was not connected (registry loaded without imports)")

    return handler
