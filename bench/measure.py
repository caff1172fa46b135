"""One measurement in a fresh process: a variant runs the workload once and prints one JSON line.

    python bench/measure.py floor|toolloop|toolloop-cassette --api openai \
        --turns 200 --calls 3

Printed: ``seconds`` (wall time of the run: from the first request to the final text, every
commit included), ``calls``, ``store_bytes`` (every file of the store after it is closed) and
``state``. Imports and the generation of the workload happen before the clock starts; reading
a recording from disk is timed only in ``toolloop-cassette``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402


def store_bytes(folder: Path, stem: str) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(stem))


def run_floor(api: str, turns: int, calls: int, folder: Path) -> dict[str, Any]:
    from floor import Floor

    responses = workload.answers(api, turns, calls)
    loop = Floor(
        api,
        folder / "floor.db",
        workload.REGISTRY,
        workload.MODELS[api],
        workload.TASK,
    )
    started = time.perf_counter()
    text = loop.run(responses)
    seconds = time.perf_counter() - started
    loop.close()
    state = "COMPLETED" if text == workload.FINAL_TEXT else f"unexpected text {text!r}"
    return {"seconds": seconds, "state": state, "store_bytes": store_bytes(folder, "floor.db")}


def _warm(api: str) -> None:
    """Import what the run will import, so the clock measures the loop, not module loading."""
    for name in (
        "toolloop_cli.service.operations",
        "toolloop_cli.tools.validation",
        "toolloop_cli.tools.dispatcher",
        "toolloop_cli.transcripts.transport",
        f"toolloop_cli.adapters.{'openai_responses' if api == 'openai' else 'anthropic_messages'}",
        "jsonschema",
    ):
        importlib.import_module(name)


def run_toolloop(
    api: str, turns: int, calls: int, folder: Path, from_file: bool, store_url: str | None = None
) -> dict[str, Any]:
    """The workload through the library API: ``operations.start`` with a store on disk.

    ``from_file``: the recording is read by the run itself (``RunOptions.transcript``), as
    ``toolloop run --transcript`` does. Otherwise the same recording, already loaded, is handed
    in as the transport, so the figure is the loop's own cost. ``store_url``: a PostgreSQL
    store instead of the SQLite file (its bytes are not measured: reported as 0).
    """
    _warm(api)
    from toolloop_cli.service import operations
    from toolloop_cli.store import open_store
    from toolloop_cli.transcripts.cassette import load_cassette
    from toolloop_cli.transcripts.transport import ReplayTransport

    cassette_path = workload.write_cassette(api, turns, calls, folder / "workload.yaml")
    store = open_store(store_url or folder / "store.db")
    guards = workload.guard_overrides(turns, calls)
    options = operations.RunOptions(
        task=workload.TASK, registry=workload.REGISTRY, guard_overrides=guards
    )
    transport = None
    if from_file:
        options.transcript = cassette_path
    else:
        options.provider, options.model = api, workload.MODELS[api]
        transport = ReplayTransport(load_cassette(cassette_path))
    started = time.perf_counter()
    result = operations.start(store, options, transport=transport)
    seconds = time.perf_counter() - started
    store.close()
    state = result.target.value
    if state != "COMPLETED":
        state += f" ({result.operation.reason})"
    size = 0 if store_url else store_bytes(folder, "store.db")
    return {"seconds": seconds, "state": state, "store_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=["floor", "toolloop", "toolloop-cassette"])
    parser.add_argument("--api", choices=sorted(workload.URIS), default="openai")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--store-url", help="a PostgreSQL store URL (toolloop variants)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolloop-bench-") as tmp:
        folder = Path(tmp)
        if args.variant == "floor":
            out = run_floor(args.api, args.turns, args.calls, folder)
        else:
            from_file = args.variant == "toolloop-cassette"
            out = run_toolloop(args.api, args.turns, args.calls, folder, from_file, args.store_url)
    out.update(calls=args.turns * args.calls, variant=args.variant, api=args.api)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
