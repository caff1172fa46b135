"""Coverage-guided fuzzing of the provider adapters with atheris (plan item 8b).

    python fuzz/fuzz_adapters.py openai/responses -max_total_time=600 fuzz/corpus/openai

Bytes become a provider answer (JSON or, when the first byte is odd, an SSE stream cut into
chunks) and go through ``adapter.parse_response``; the only exception allowed out is the
declared ``AdapterError`` (``MalformedProviderPayload`` included). Anything else, or an
input taking over a second, is a crash: atheris writes it as ``crash-*`` in the working
folder; turn it into a regression test in tests/reliability/test_adapter_fuzz.py. See fuzz/README.md.
"""

from __future__ import annotations

import importlib
import sys
import time

import atheris

with atheris.instrument_imports():
    from toolloop_cli.adapters import ADAPTERS, get_adapter
    from toolloop_cli.engine.types import HttpResponse
    from toolloop_cli.errors import AdapterError

    # get_adapter imports its module lazily: import them all here, so they are instrumented
    for _module, _ in ADAPTERS.values():
        importlib.import_module(_module)

SLOW_S = 1.0


def target(api: tuple[str, str]):  # type: ignore[no-untyped-def]
    adapter = get_adapter(*api)

    def one_input(data: bytes) -> None:
        stream = bool(data) and data[0] % 2 == 1
        body = data[1:]
        if stream:
            size = 1 + (data[0] >> 1)
            pieces = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
            response = HttpResponse(200, {"content-type": "text/event-stream"}, chunks=iter(pieces))
        else:
            response = HttpResponse(200, {"content-type": "application/json"}, body=body)
        started = time.monotonic()
        try:
            adapter.parse_response(response)
        except AdapterError:
            pass
        if time.monotonic() - started > SLOW_S:
            raise RuntimeError(f"one input took over {SLOW_S} s")

    return one_input


def main() -> None:
    if len(sys.argv) < 2 or tuple(sys.argv[1].split("/")) not in ADAPTERS:
        known = ", ".join("/".join(api) for api in sorted(ADAPTERS))
        sys.exit(f"usage: fuzz_adapters.py PROVIDER/API [atheris options] [corpus]; one of {known}")
    api = tuple(sys.argv[1].split("/"))
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target(api))  # type: ignore[arg-type]
    atheris.Fuzz()


if __name__ == "__main__":
    main()
