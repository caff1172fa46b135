"""``registry import-mcp``: a registry skeleton from what an MCP server announces.

The skeleton is a starting point an owner reviews, never a grant: every tool is ``risk: write``
and ``approval: always`` until someone decides otherwise, the announced schema becomes the
allowlisted ``parameters``, and its canonical hash is pinned so a later change on the server
is refused at load instead of silently widening what the model may send.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.errors import UsageError
from toolloop_cli.tools.mcp_client import McpConnection, McpUnavailable, ServerConfig
from toolloop_cli.tools.mcp_registry import TOOL_NAME_RULE, callable_name
from toolloop_cli.tools.validation import json_problems, parameters_problem

__all__ = ["server_entry", "skeleton"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def server_entry(stdio: str | None, url: str | None) -> dict[str, Any]:
    """The ``mcp_servers`` entry for ``--stdio "CMD ARGS…"`` or ``--url URL`` (exactly one)."""
    if (stdio is None) == (url is None):
        raise UsageError('give exactly one of --stdio "COMMAND ARGS…" or --url URL')
    if url is not None:
        if not re.match(r"^https?://[^\s/]+", url):
            raise UsageError(f"--url must be an http:// or https:// URL, not {url!r}")
        return {"url": url}
    assert stdio is not None
    try:
        words = shlex.split(stdio)
    except ValueError as exc:
        raise UsageError(f"--stdio is not a command line: {exc}") from None
    if not words:
        raise UsageError("--stdio needs a command")
    return {"command": words[0], "args": words[1:]}


def skeleton(
    name: str, entry: dict[str, Any], approvers: list[str]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Connect to the server, list its tools and write each as a pinned, approval-gated tool.

    Returns the registry document and the tools left out, each with why: a name a handler
    cannot name (``mcp_registry.callable_name``), an input schema a registry does not accept
    (so the skeleton always loads). Each tool's key is its name made safe for a registry;
    names that come out the same get ``_2``, ``_3``… so no tool replaces another.
    """
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$", name):
        raise UsageError(f"--name {name!r} must be letters, digits, _ or - (at most 64)")
    config = ServerConfig(
        name=name,
        command=entry.get("command"),
        args=tuple(entry.get("args", ())),
        url=entry.get("url"),
    )
    try:
        connection = McpConnection.open(config)
    except McpUnavailable as exc:
        raise UsageError(f"MCP server {name!r} could not be reached: {exc}") from None
    try:
        tools = connection.describe_tools()
    except McpUnavailable as exc:
        raise UsageError(str(exc)) from None
    finally:
        connection.close()
    if not tools:
        raise UsageError(f"MCP server {name!r} announces no tools")
    entries: dict[str, Any] = {}
    left_out: list[dict[str, str]] = []
    for tool, (description, schema) in tools.items():
        reason = _unusable(tool, schema)
        if reason is not None:
            left_out.append({"tool": tool, "reason": reason})
            continue
        key = _key(tool, entries)
        digest = sha256_of(schema)
        entries[key] = {
            "schema_version": f"{key}-{digest[7:15]}",
            "description": description.strip() or f"Tool {tool} of MCP server {name}.",
            "risk": "write",
            "approval": "always",
            "timeout_ms": 5000,
            "handler": f"mcp:{name}/{tool}",
            "input_schema_sha256": digest,
            "parameters": schema,
        }
    if not entries:
        first = left_out[0]
        more = f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""
        raise UsageError(
            f"MCP server {name!r} announces no tool toolloop can call: "
            f"{first['tool']!r}: {first['reason']}{more}"
        )
    doc = {
        "registry": name,
        "revision": "imported.1",
        "policy": {"revision": "pol-1", "approvers": approvers},
        "mcp_servers": {name: entry},
        "tools": entries,
    }
    return doc, left_out


def _unusable(tool: str, schema: dict[str, Any]) -> str | None:
    """Why ``tool`` cannot be a tool of the skeleton, or None when it can."""
    if not callable_name(tool):
        return f"no handler can name it ({TOOL_NAME_RULE})"
    not_json = json_problems(schema, "")  # 1e400, 2**60: no canonical form, nothing to pin
    if not_json:
        where, why = not_json[0]
        return f"its inputSchema has no canonical JSON form at {where or '.'}: {why}"
    problem = parameters_problem(schema)
    if problem is not None:
        return f"its inputSchema is refused at {problem[0] or '.'}: {problem[1]}"
    return None


def _key(tool: str, taken: dict[str, Any]) -> str:
    """A registry key for ``tool``: letters, digits, _ and -, at most 64, not yet taken."""
    key = _UNSAFE.sub("_", tool)[:64]
    if not re.match(r"^[A-Za-z_]", key):
        key = f"t_{key}"[:64]
    base, n = key, 1
    while key in taken:
        n += 1
        key = f"{base[: 64 - len(str(n)) - 1]}_{n}"
    return key
