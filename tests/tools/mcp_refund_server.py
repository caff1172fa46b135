"""A real MCP server (the SDK's ``MCPServer``) serving the refund example's tools.

The tools are the example's handlers over its SQLite ledger, kept in the folder named by
``REFUND_LEDGER_DIR``; the idempotency key comes from the request's ``_meta``, as toolloop
sends it. ``MCP_REFUND_VARIANT`` stages a misbehaving server: ``changed_schema`` (get_order
takes one more argument), ``extra_tool`` (a tool the registry does not name), ``hang_submit``
(submit_refund commits, then never answers), ``crash_submit`` (submit_refund commits, then the
process dies). Run with no argument for stdio, or ``--http PORT`` for streamable HTTP.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as McpToolError

from toolloop_cli.examples import refunds
from toolloop_cli.tools.context import ToolContext, ToolError

VARIANT = os.environ.get("MCP_REFUND_VARIANT", "")
LEDGER = Path(os.environ.get("REFUND_LEDGER_DIR", "."))
app = MCPServer("refunds")


def _context(ctx: Context, tool: str) -> ToolContext:
    meta = dict(ctx.request_context.meta or {})
    return ToolContext(
        operation_id=str(meta.get("toolloop/operation_id", "")),
        call_id=str(meta.get("toolloop/call_id", "")),
        idempotency_key=str(meta.get("toolloop/idempotency_key", "")),
        tenant="",
        subject="",
        deadline=time.time() + 60,
        tool=tool,
        data_dir=LEDGER,
    )


def _run(handler: Any, arguments: dict[str, Any], ctx: Context, tool: str) -> Any:
    try:
        return handler(arguments, _context(ctx, tool))
    except ToolError as exc:
        raise McpToolError(exc.message) from exc


if VARIANT == "changed_schema":

    @app.tool(name="get_order")
    def get_order_v2(order_id: str, include_card: bool, ctx: Context) -> dict[str, Any]:
        """Look up an order (this version also wants a card flag)."""
        return dict(_run(refunds.get_order, {"order_id": order_id}, ctx, "get_order"))

else:

    @app.tool()
    def get_order(order_id: str, ctx: Context) -> dict[str, Any]:
        """Look up an order by its id."""
        return dict(_run(refunds.get_order, {"order_id": order_id}, ctx, "get_order"))


@app.tool()
def create_refund_draft(
    order_id: str, amount_cents: int, ctx: Context, reason: str | None = None
) -> dict[str, Any]:
    """Open a refund draft for an order."""
    arguments: dict[str, Any] = {"order_id": order_id, "amount_cents": amount_cents}
    if reason is not None:
        arguments["reason"] = reason
    return dict(_run(refunds.create_refund_draft, arguments, ctx, "create_refund_draft"))


@app.tool()
async def submit_refund(order_id: str, amount_cents: int, ctx: Context) -> dict[str, Any]:
    """Submit the refund of an open draft, at most once per idempotency key."""
    arguments = {"order_id": order_id, "amount_cents": amount_cents}
    result = dict(_run(refunds.submit_refund, arguments, ctx, "submit_refund"))
    if VARIANT == "hang_submit":
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            # the client's notifications/cancelled arrived: leave a mark the test can read
            (LEDGER / "cancelled").write_text(str(ctx.request_context.meta or {}))
            raise
    if VARIANT == "crash_submit":
        os._exit(7)
    return result


@app.tool()
def lookup_refund(order_id: str, amount_cents: int, ctx: Context) -> dict[str, Any] | None:
    """The saved result of the refund made under the request's idempotency key, if any."""
    arguments = {"order_id": order_id, "amount_cents": amount_cents}
    found = _run(refunds.lookup_refund, arguments, ctx, "lookup_refund")
    return None if found is None else dict(found)


if VARIANT == "extra_tool":

    @app.tool()
    def refund_everything(confirm: bool) -> str:
        """A tool the registry never named."""
        return "refunded everything"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
