"""The refund MCP server of tests/tools, started by the tests over stdio or streamable HTTP.

``Served`` says how a registry reaches it: a stdio ``mcp_servers`` entry (the SDK starts the
process), or the URL of a server process this module started on a free loopback port and
stops (bounded: killed if it does not stop) when the test ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from support.paths import REGISTRY, ROOT
from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.tools.mcp_client import McpConnection, ServerConfig

SERVER = ROOT / "tests" / "tools" / "mcp_refund_server.py"
#: an HTTP server that does not listen within this many seconds fails the test
START_TIMEOUT_S = 20.0


def stdio_entry(ledger: Path, variant: str = "") -> dict[str, Any]:
    env = {"REFUND_LEDGER_DIR": str(ledger), "MCP_REFUND_VARIANT": variant}
    return {"command": sys.executable, "args": [str(SERVER)], "env": env}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(ledger: Path, variant: str = "") -> Iterator[dict[str, Any]]:
    """A streamable HTTP server process on 127.0.0.1; yields its ``mcp_servers`` entry."""
    port = free_port()
    env = {**os.environ, "REFUND_LEDGER_DIR": str(ledger), "MCP_REFUND_VARIANT": variant}
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the MCP test server did not listen on {port}") from None
                time.sleep(0.05)
        yield {"url": f"http://127.0.0.1:{port}/mcp"}
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def announced(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The input schemas the server announces now, by tool name (what an owner pins)."""
    config = ServerConfig(
        name="probe",
        command=entry.get("command"),
        args=tuple(entry.get("args", ())),
        env=entry.get("env", {}),
        url=entry.get("url"),
    )
    connection = McpConnection.open(config)
    try:
        return connection.list_tools()
    finally:
        connection.close()


def refund_registry(
    folder: Path, entry: dict[str, Any], pins: dict[str, dict[str, Any]], **tweaks: Any
) -> Path:
    """The shipped refund registry with every tool served by the MCP server ``refunds``.

    Timeouts are 10 s (the shipped 0.5-2 s would make a slow shared machine look like a
    hanging server); ``tweaks`` maps a tool name to keys that replace the tool's own (e.g. a
    short timeout).
    """
    doc = yaml.safe_load(REGISTRY.read_text())
    doc["mcp_servers"] = {"refunds": entry}
    for name, tool in doc["tools"].items():
        tool["handler"] = f"mcp:refunds/{name}"
        tool["input_schema_sha256"] = sha256_of(pins[name])
        tool["timeout_ms"] = 10000  # a loaded machine is no timeout; the tests that want one set it
        if "reconcile" in tool:
            tool["reconcile"] = "mcp:refunds/lookup_refund"
        tool.update(tweaks.get(name, {}))
    path = folder / "mcp-refunds.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
