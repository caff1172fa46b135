"""Workers on PostgreSQL: operations and tool calls per second for 1, 2 and 4 workers.

    .venv/bin/python bench/workers.py --url URL --workers N [--ops 60 --turns 10 --calls 3]

prints one JSON line (``seconds``, ``ops``, ``calls``, ``state``). ``URL`` names a server on
which a fresh database is created for the run; ``run.py`` starts one with ``pgserver`` (the
dev extra's private PostgreSQL) or uses ``TOOLLOOP_BENCH_POSTGRES``. The operations are
submitted first (``run --detach``'s library call); the time runs from starting ``N``
``toolloop worker --drain`` processes to the last one's exit, so it includes their start.
Figures only: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import workload

#: an existing server to measure on (a URL whose role may CREATE DATABASE)
SERVER_ENV = "TOOLLOOP_BENCH_POSTGRES"
TOOLLOOP = str(Path(sys.executable).parent / "toolloop")


@contextmanager
def server(folder: Path) -> Iterator[str]:
    """``TOOLLOOP_BENCH_POSTGRES``, else a private server in ``folder`` for the block."""
    import os

    named = os.environ.get(SERVER_ENV)
    if named:
        yield named
        return
    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR in a bare shell
        warnings.simplefilter("ignore")
        import pgserver

        pg = pgserver.get_server(str(folder), cleanup_mode="stop")
    try:
        yield pg.get_uri()
    finally:
        pg.cleanup()


def fresh_database(url: str) -> str:
    """A new, empty database on the server ``url`` names: its URL."""
    import psycopg

    name = f"bench_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def throughput(url: str, workers: int, ops: int, turns: int, calls: int) -> dict[str, object]:
    from toolloop_cli.service import operations
    from toolloop_cli.store import open_store

    store_url = fresh_database(url)
    with tempfile.TemporaryDirectory(prefix="toolloop-bench-") as tmp:
        cassette = workload.write_cassette("openai", turns, calls, Path(tmp) / "workload.yaml")
        options = operations.RunOptions(
            task=workload.TASK,
            registry=workload.REGISTRY,
            transcript=cassette,
            guard_overrides=workload.guard_overrides(turns, calls),
        )
        store = open_store(store_url)
        ids = [operations.submit(store, options).operation_id for _ in range(ops)]
        command = [TOOLLOOP, "worker", "--store", store_url, "--drain", "--poll", "0.2"]
        started = time.perf_counter()
        procs = [
            subprocess.Popen([*command, "--json"], stdout=subprocess.DEVNULL)
            for _ in range(workers)
        ]
        codes = [p.wait() for p in procs]
        seconds = time.perf_counter() - started
        states = {store.get_operation(op).state.value for op in ids}
        store.close()
    state = "COMPLETED" if states == {"COMPLETED"} and set(codes) == {0} else f"{states} {codes}"
    return {"seconds": seconds, "ops": ops, "calls": ops * turns * calls, "state": state}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a server to create the run's database on")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--ops", type=int, default=60)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(throughput(args.url, args.workers, args.ops, args.turns, args.calls)))


if __name__ == "__main__":
    main()
