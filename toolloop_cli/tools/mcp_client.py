"""One MCP server connection, used from synchronous tool handlers.

The official ``mcp`` SDK is asynchronous and its sessions belong to one event loop, while the
dispatcher runs each handler in a worker thread of its own. So each server gets one daemon
thread running an event loop that holds the SDK ``Client`` open; handlers submit requests to it
and wait. A request that outlives its timeout is cancelled inside that loop, which makes the SDK
send ``notifications/cancelled``; the handler then raises ``HandlerTimeout`` (a timeout, never a
failure). A server that has died is not restarted in this process: a server that crashed during
a side effect is no witness to what that side effect did, so its calls and its reconcile lookups
fail with the reason until a new process (a resume) starts it again.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from toolloop_cli.tools.context import HandlerTimeout

__all__ = ["McpConnection", "McpUnavailable", "ServerConfig", "close_all"]

T = TypeVar("T")
#: how long starting a server and its initialize handshake may take
CONNECT_TIMEOUT_S = 20.0
#: pages of a ``tools/list`` read before the listing is taken for one that never ends
MAX_LIST_PAGES = 1000
#: how much of the reason a server's message could not be read is shown
MAX_REASON_CHARS = 300
#: JSON-RPC error code the SDK gives every request pending when the connection closed
_CONNECTION_CLOSED = -32000
_OPEN: list[McpConnection] = []
_OPEN_LOCK = threading.Lock()


@dataclass(frozen=True)
class ServerConfig:
    """How to reach one server: a command over stdio, or a streamable HTTP URL."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


class McpUnavailable(Exception):
    """The server cannot be reached: it did not start, or its connection is gone."""


class McpConnection:
    """A live client session to one server, on its own event-loop thread."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._client: Any = None
        self._errlog = open(os.devnull, "w")
        self._error: str | None = None
        #: when the server last sent a message the SDK could not read, and why
        self._unreadable: tuple[float, str] | None = None
        self._thread = threading.Thread(
            target=self._run,
            name=f"toolloop-mcp-{config.name}",
            daemon=True,
        )

    @classmethod
    def open(cls, config: ServerConfig) -> McpConnection:
        """Start the server (or connect to it) and finish the handshake, or raise."""
        connection = cls(config)
        connection._thread.start()
        if not connection._ready.wait(CONNECT_TIMEOUT_S):
            connection.close()
            raise McpUnavailable(f"did not answer the handshake within {CONNECT_TIMEOUT_S:g} s")
        if connection._error is not None:
            raise McpUnavailable(connection._error)
        with _OPEN_LOCK:
            _OPEN.append(connection)
        return connection

    def list_tools(self) -> dict[str, dict[str, Any]]:
        """Every tool the server announces, by name, with its input schema."""
        return {name: schema for name, (_, schema) in self.describe_tools().items()}

    def describe_tools(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every announced tool by name: its description and input schema, in server order.

        A server may page its listing (``nextCursor``): every page is read, within one
        ``CONNECT_TIMEOUT_S`` for the whole listing. A name announced twice, a cursor given
        again (a listing that would never end) or more than ``MAX_LIST_PAGES`` pages make the
        server unusable: which of two schemas a call would be checked against is not known.
        """
        name = self.config.name

        async def listing() -> dict[str, tuple[str, dict[str, Any]]]:
            tools: dict[str, tuple[str, dict[str, Any]]] = {}
            cursor: str | None = None
            cursors: set[str] = set()
            for _ in range(MAX_LIST_PAGES):
                result = await self._client.list_tools(cursor=cursor)
                for tool in result.tools:
                    if tool.name in tools:
                        raise McpUnavailable(
                            f"MCP server '{name}': tools/list announces '{tool.name}' twice"
                        )
                    tools[tool.name] = (tool.description or "", dict(tool.input_schema))
                cursor = result.next_cursor
                if cursor is None:
                    return tools
                if cursor in cursors:
                    raise McpUnavailable(
                        f"MCP server '{name}': tools/list gives cursor {cursor[:80]!r} again"
                    )
                cursors.add(cursor)
            raise McpUnavailable(
                f"MCP server '{name}': tools/list has more than {MAX_LIST_PAGES} pages"
            )

        try:
            return self._submit(listing(), CONNECT_TIMEOUT_S, "tools/list")
        except HandlerTimeout as exc:  # no call's timeout: the server cannot be used at all
            raise McpUnavailable(str(exc)) from exc

    def call_tool(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any], timeout_s: float
    ) -> Any:
        """``tools/call``; cancelled (and ``HandlerTimeout``) after ``timeout_s`` seconds."""

        async def calling() -> Any:
            return await self._client.call_tool(name, arguments, meta=meta)

        return self._submit(calling(), timeout_s, f"tools/call {name}")

    def _submit(self, work: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
        if self._error is not None or self._client is None:
            work.close()
            raise McpUnavailable(f"MCP server '{self.config.name}': {self._error or 'closed'}")

        async def bounded() -> T:
            return await asyncio.wait_for(work, timeout_s)

        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(bounded(), self._loop)
        try:
            # the loop enforces the timeout (and cancels); this wait only guards a stuck loop
            return future.result(timeout_s + 5)
        except TimeoutError as exc:
            future.cancel()
            message = f"MCP server '{self.config.name}': {what} cancelled after {timeout_s:g} s"
            unreadable = self._unreadable
            if unreadable is not None and unreadable[0] >= started:
                message += f"; meanwhile it sent a message that could not be read: {unreadable[1]}"
            raise HandlerTimeout(message) from exc
        except McpUnavailable:
            raise
        except Exception as exc:
            if getattr(exc, "code", None) == _CONNECTION_CLOSED and self._error is None:
                self._error = "the server closed the connection (it exited or crashed)"
            reason = self._error or f"{type(exc).__name__}: {exc}"
            raise McpUnavailable(
                f"MCP server '{self.config.name}': {what} failed: {reason}"
            ) from exc

    def close(self) -> None:
        """End the session (the SDK stops a stdio server) and the loop's thread.

        A handshake still under way is cancelled: waiting for it to end on its own would
        leave a server that never answers running after this process exits.
        """
        stop, task = self._stop, self._main_task
        if self._loop.is_running():
            if not self._ready.is_set() and task is not None:
                self._loop.call_soon_threadsafe(task.cancel)
            elif stop is not None:
                self._loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        try:
            self._main_task = self._loop.create_task(self._main())
            self._loop.run_until_complete(self._main_task)
        except asyncio.CancelledError:  # close() during the handshake
            pass
        finally:
            self._loop.close()

    async def _main(self) -> None:
        from mcp import Client

        _quiet_sdk_logging()
        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack)
                self._client = await stack.enter_async_context(
                    Client(transport, message_handler=self._on_message)
                )
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # every way a session ends is a reason
            self._error = self._error or _reason(exc)
        finally:
            self._errlog.close()
            self._client = None
            self._error = self._error or "the connection was closed"
            self._ready.set()

    async def _on_message(self, message: Any) -> None:
        """Keep what made the last message from the server unreadable: the SDK drops such a
        message, so a request whose answer it was would otherwise only time out, unexplained."""
        if isinstance(message, Exception):
            self._unreadable = (time.monotonic(), _unreadable_reason(message))

    async def _transport(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            timeout = httpx2.Timeout(30.0, read=300.0)
            http = httpx2.AsyncClient(headers=config.headers, timeout=timeout)
            await stack.enter_async_context(http)
            return streamable_http_client(config.url, http_client=http)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert config.command is not None
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=config.env, cwd=config.cwd
        )
        return stdio_client(params, errlog=self._errlog)


def _reason(exc: BaseException) -> str:
    """The innermost message of an SDK failure (they arrive wrapped in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _unreadable_reason(exc: Exception) -> str:
    """Why a server's message could not be read, on one line (the SDK's parse and validation
    failures are pydantic errors whose text spans several lines and quotes the input)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return str(first.get("msg", ""))[:MAX_REASON_CHARS] or type(exc).__name__
        except Exception:  # not pydantic's errors(): fall back to the exception's own text
            pass
    return _reason(exc).splitlines()[0][:MAX_REASON_CHARS]


def _quiet_sdk_logging() -> None:
    """The SDK logs what it cannot parse, with tracebacks; toolloop reports failures itself
    (one line on stderr), so the SDK's records go nowhere unless an application routes them."""
    sdk = logging.getLogger("mcp")
    if not sdk.handlers:
        sdk.addHandler(logging.NullHandler())
        sdk.propagate = False


def close_all() -> None:
    """Close every connection this process opened (at exit, and between tests)."""
    with _OPEN_LOCK:
        opened = list(_OPEN)
        _OPEN.clear()
    for connection in opened:
        connection.close()


atexit.register(close_all)
