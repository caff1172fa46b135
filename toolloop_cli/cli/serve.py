"""``serve``: a loopback fake provider answering from a cassette, for live-mode runs and tests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from . import render
from .exits import run_guarded
from .options import JsonOpt
from .render import dim, line, safe


def serve(
    cassette: Annotated[Path, typer.Argument(help="Cassette whose answers are served.")],
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free).")
    ] = 8080,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="STATUS[:TIMES] (400, 429, 500, 503, 529) or cut:EVENTS; repeatable, "
            "consumed in order, one request each.",
        ),
    ] = None,
    retry_after: Annotated[
        float, typer.Option("--retry-after", min=0, help="retry-after seconds sent with 429.")
    ] = 1.0,
    log: Annotated[
        Path | None, typer.Option("--log", help="Append each request received as a JSON line.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer provider requests from CASSETTE over HTTP on 127.0.0.1 until interrupted.

    With --json, one JSON object is printed once it listens: its url, the provider and API of
    the cassette, and the base-URL variable to set; nothing else goes to stdout.
    """

    def body() -> int:
        # imported when serving, so `toolloop --help` does not pay for the HTTP server
        from toolloop_cli.transcripts import server
        from toolloop_cli.transcripts.transport import cassette_api

        faults = [server.parse_fault(spec) for spec in fault or []]
        handle = server.start(
            cassette,
            port=port,
            faults=faults,
            log=log,
            retry_after=retry_after,
            on_log_error=_log_error,
        )
        provider, api_family = cassette_api(handle.provider.cassette)
        variable = server.BASE_URL_ENV[provider][0]
        if as_json:
            render.emit_json(
                {
                    "url": handle.url,
                    "port": handle.port,
                    "cassette": str(cassette),
                    "provider": provider,
                    "api_family": api_family,
                    "env": {variable: handle.base_url(provider)},
                    "log": None if log is None else str(log),
                }
            )
        render.err.print(safe(f"serving {cassette} ({provider}/{api_family}) on {handle.url}"))
        render.err.print(dim(f"  {variable}={handle.base_url(provider)}"))
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            handle.close()
        return 0

    run_guarded(as_json, body)


def _log_error(message: str) -> None:
    """A request whose log line could not be written: one line, the server keeps serving."""
    render.err.print(line(safe("error: ", "bold red"), safe(message)))
