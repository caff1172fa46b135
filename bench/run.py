"""``make bench``: every figure in one table, each the median of fresh processes, interleaved.

    .venv/bin/python bench/run.py [--repeats 5] [--peers] [--quick]

Rows: per-call overhead against the hand-written floor (``floor.py``), the same in the
Anthropic shape, scaling with the run's length, store bytes per call, cold start, verify
throughput (``verify_speed.py``, when present), parallel speedup (``parallel.py``), and
workers on PostgreSQL (``workers.py``: operations and calls per second for 1, 2 and 4
workers; one run's per-call cost on SQLite and on PostgreSQL; ``--no-postgres`` skips them).
``--peers`` adds pydantic-ai, the OpenAI Agents SDK and LangGraph, run by ``peers.py`` in
``bench/.peers-venv`` (``make bench-peers`` creates it). Figures only: nothing here asserts.
Every variant of a section runs once per round, rounds repeated, so drift in the machine's
load spreads over all variants rather than landing on one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
TOOLLOOP = str(Path(PY).parent / "toolloop")
PEERS_PY = HERE / ".peers-venv" / "bin" / "python"
PEERS = ("langgraph", "pydantic-ai", "openai-agents")


@dataclass
class Row:
    """One line of the table: a variant's samples and what it is compared with."""

    section: str
    variant: str
    unit: str
    samples: list[float] = field(default_factory=list)
    baseline: Row | None = None
    target: str = ""
    #: ratio of this row to its baseline that meets the target (None: no target)
    limit: float | None = None
    #: True when a larger value is better (throughput, speedup)
    higher_is_better: bool = False
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def ratio(self) -> float | None:
        if self.baseline is None or not self.samples or not self.baseline.samples:
            return None
        return self.median / self.baseline.median

    def verdict(self) -> str:
        ratio = self.ratio()
        if self.limit is None or ratio is None:
            return ""
        met = ratio >= self.limit if self.higher_is_better else ratio <= self.limit
        return "met" if met else "MISSED"


def run_json(command: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Run one measurement process; its last stdout line is a JSON object."""
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=1800
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(variant: str, api: str, turns: int, calls: int) -> dict[str, object]:
    command = [PY, str(HERE / "measure.py"), variant, "--api", api, "--turns", str(turns)]
    return run_json([*command, "--calls", str(calls)])


def per_call_us(result: dict[str, object]) -> float:
    return float(result["seconds"]) / float(result["calls"]) * 1e6  # type: ignore[arg-type]


def bytes_per_call(result: dict[str, object]) -> float:
    return float(result["store_bytes"]) / float(result["calls"])  # type: ignore[arg-type]


def check_state(result: dict[str, object], what: str) -> None:
    if result.get("state") != "COMPLETED":
        raise SystemExit(f"{what} did not complete: {result.get('state')}")


def interleave(repeats: int, jobs: list[Callable[[], None]]) -> None:
    """Run every job once per round, ``repeats`` rounds, printing progress to stderr."""
    for round_no in range(repeats):
        print(f"  round {round_no + 1}/{repeats}", file=sys.stderr, flush=True)
        for job in jobs:
            job()


def loop_rows(repeats: int, calls: int, big: int, peers: bool) -> list[Row]:
    """Per-call overhead, scaling, store size: one interleaved set of fresh processes."""
    sizes = tuple(sorted({20, 200, big}))
    floor = {t: Row("scaling (floor)", f"floor T={t}", "µs/call") for t in sizes}
    tool = {t: Row("scaling (toolloop)", f"toolloop T={t}", "µs/call") for t in sizes}
    floor_b = {t: Row("store size", f"floor T={t}", "B/call") for t in sizes}
    tool_b = {t: Row("store size", f"toolloop T={t}", "B/call") for t in sizes}
    cassette = Row("per-call overhead T=200", "toolloop, reads the cassette file", "µs/call")
    a_floor = Row("per-call overhead T=200", "floor, Anthropic shape", "µs/call")
    a_tool = Row("per-call overhead T=200", "toolloop, Anthropic shape", "µs/call")
    peer_rows = {p: Row("peers T=200", p, "µs/call") for p in PEERS}
    peer_bytes = {p: Row("store size", f"{p} T=200", "B/call") for p in PEERS}
    jobs: list[Callable[[], None]] = []

    def job(row: Row, variant: str, api: str, turns: int, size_row: Row | None = None) -> None:
        def run() -> None:
            result = measure(variant, api, turns, calls)
            check_state(result, f"{variant} {api} T={turns}")
            row.samples.append(per_call_us(result))
            if size_row is not None:
                size_row.samples.append(bytes_per_call(result))

        jobs.append(run)

    for t in sizes:
        job(floor[t], "floor", "openai", t, floor_b[t])
        job(tool[t], "toolloop", "openai", t, tool_b[t])
    job(cassette, "toolloop-cassette", "openai", 200)
    job(a_floor, "floor", "anthropic", 200)
    job(a_tool, "toolloop", "anthropic", 200)
    if peers:
        for peer in PEERS:
            jobs.append(_peer_job(peer_rows[peer], peer_bytes[peer], 200, calls))
    interleave(repeats, jobs)

    head = Row("per-call overhead T=200", "hand-written floor", "µs/call", floor[200].samples)
    main = Row(
        "per-call overhead T=200",
        "toolloop (library API, store on disk)",
        "µs/call",
        tool[200].samples,
        head,
        "≤ 2× floor",
        2.0,
    )
    cassette.baseline, a_tool.baseline = head, a_floor
    a_tool.target, a_tool.limit = "≤ 2× floor", 2.0
    rows = [head, main, cassette, a_floor, a_tool]
    if peers:
        durable = [row for name, row in peer_rows.items() if name != "pydantic-ai"]
        fastest = min(durable, key=lambda r: r.median)
        for name, peer in peer_rows.items():
            peer.baseline = main
            notes = ["in memory, no store"] if name == "pydantic-ai" else []
            notes += ["fastest durable"] if peer is fastest else []
            peer.note = ", ".join(notes)
        fastest.target, fastest.limit, fastest.higher_is_better = "≥ 10× toolloop", 10.0, True
        rows += list(peer_rows.values())
    for t in sizes:
        floor[t].baseline, tool[t].baseline = floor[20], tool[20]
        floor_b[t].baseline = None
        tool_b[t].baseline = floor_b[t]
    tool[big].target, tool[big].limit = "≤ 1.5× T=20", 1.5
    for t in (200, big):
        tool_b[t].target, tool_b[t].limit = "≤ 2× floor", 2.0
    rows += [tool[t] for t in sizes] + [floor[t] for t in sizes]
    rows += [r for t in sorted({200, big}) for r in (floor_b[t], tool_b[t])]
    if peers:
        for row in peer_bytes.values():
            row.baseline = floor_b[200]
        rows += [row for name, row in peer_bytes.items() if name != "pydantic-ai"]
    return rows


def _peer_job(row: Row, size_row: Row, turns: int, calls: int) -> Callable[[], None]:
    def run() -> None:
        command = [str(PEERS_PY), str(HERE / "peers.py"), row.variant, "--turns", str(turns)]
        result = run_json([*command, "--calls", str(calls)])
        check_state(result, row.variant)
        row.samples.append(per_call_us(result))
        size_row.samples.append(bytes_per_call(result))

    return run


def wall_ms(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, cwd=ROOT, check=True)
    return (time.perf_counter() - started) * 1000


def cold_start_rows(repeats: int) -> list[Row]:
    base = Row("cold start", "python -c 'import typer, rich, pydantic, sqlite_utils, yaml'", "ms")
    helps = Row("cold start", "toolloop --help", "ms", baseline=base)
    version = Row("cold start", "toolloop --version", "ms", baseline=base)
    for row in (helps, version):
        row.target, row.limit = "≤ 1.3×", 1.3
    commands = [
        (base, [PY, "-c", "import typer, rich, pydantic, sqlite_utils, yaml"]),
        (helps, [TOOLLOOP, "--help"]),
        (version, [TOOLLOOP, "--version"]),
    ]
    for _, command in commands:  # warm the OS file cache and .pyc files first
        wall_ms(command)
    for _ in range(max(repeats, 7)):
        for row, command in commands:
            row.samples.append(wall_ms(command))
    return [base, helps, version]


def parallel_rows(repeats: int) -> list[Row]:
    code = (
        "import sys; sys.path.insert(0, 'bench'); import json, parallel; "
        "print(json.dumps({{'seconds': parallel.one_run({})}}))"
    )
    seq = Row("parallel 8 × 200 ms calls", "--max-parallel 1 (sequential)", "s")
    par = Row(
        "parallel 8 × 200 ms calls",
        "--max-parallel 8",
        "s",
        baseline=seq,
        note="ideal ratio 0.125×",
    )
    for _ in range(repeats):
        for row, n in ((seq, 1), (par, 8)):
            row.samples.append(float(run_json([PY, "-c", code.format(n)])["seconds"]))  # type: ignore[arg-type]
    return [seq, par]


#: the worker bench: operations submitted, each T turns × C calls (bench/workers.py)
WORKER_OPS, WORKER_TURNS, WORKER_CALLS = 60, 10, 3


def worker_rows(repeats: int, calls: int) -> list[Row]:
    """Workers on PostgreSQL (1, 2, 4 processes), and one run's per-call cost by store."""
    import tempfile

    sys.path.insert(0, str(HERE))
    import workers

    shape = f"{WORKER_OPS} ops × {WORKER_TURNS} turns × {WORKER_CALLS} calls"
    ops = {n: Row(f"workers, PostgreSQL ({shape})", f"{n} worker(s)", "ops/s") for n in (1, 2, 4)}
    tools = {n: Row("workers, tool calls", f"{n} worker(s)", "calls/s") for n in (1, 2, 4)}
    sqlite = Row("per-call overhead T=200, by store", "toolloop, SQLite file", "µs/call")
    pg = Row(
        "per-call overhead T=200, by store", "toolloop, PostgreSQL", "µs/call", baseline=sqlite
    )
    for n in (2, 4):
        for row in (ops[n], tools[n]):
            row.baseline, row.higher_is_better = (ops if row in ops.values() else tools)[1], True
    ops[4].note = f"{os.cpu_count()} CPUs, server included"
    with tempfile.TemporaryDirectory(prefix="toolloop-bench-pg-") as folder:
        with workers.server(Path(folder)) as url:
            for round_no in range(repeats):
                print(f"  round {round_no + 1}/{repeats}", file=sys.stderr, flush=True)
                for n in (1, 2, 4):
                    command = [PY, str(HERE / "workers.py"), "--url", url, "--workers", str(n)]
                    sizes = ["--ops", str(WORKER_OPS), "--turns", str(WORKER_TURNS)]
                    result = run_json([*command, *sizes, "--calls", str(WORKER_CALLS)])
                    check_state(result, f"{n} worker(s)")
                    seconds = float(result["seconds"])  # type: ignore[arg-type]
                    ops[n].samples.append(float(result["ops"]) / seconds)  # type: ignore[arg-type]
                    tools[n].samples.append(float(result["calls"]) / seconds)  # type: ignore[arg-type]
                sqlite.samples.append(per_call_us(_measured("toolloop", 200, calls)))
                pg_url = workers.fresh_database(url)
                pg.samples.append(per_call_us(_measured("toolloop", 200, calls, pg_url)))
    return [*ops.values(), *tools.values(), sqlite, pg]


def _measured(variant: str, turns: int, calls: int, url: str | None = None) -> dict[str, object]:
    command = [PY, str(HERE / "measure.py"), variant, "--turns", str(turns), "--calls", str(calls)]
    result = run_json([*command, *(["--store-url", url] if url else [])])
    check_state(result, f"{variant} T={turns}" + (" on PostgreSQL" if url else ""))
    return result


#: calls in verify_speed.py's store, built with the library from the bench workload
VERIFY_CALLS = 100_000


def verify_rows() -> tuple[list[Row], str]:
    """``verify_speed.py`` is owned elsewhere: run it and fold its records/s into the table."""
    script = HERE / "verify_speed.py"
    if not script.exists():
        return [], "verify throughput: bench/verify_speed.py is not there yet; not measured"
    done = subprocess.run(
        [PY, str(script), "--calls", str(VERIFY_CALLS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    rates: dict[str, float] = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[-2].replace(",", "").isdigit():
            rates[line[:34].strip()] = float(cells[-2].replace(",", ""))
    store = next((ln for ln in done.stdout.splitlines() if ln.startswith("store:")), "")
    floor_rate = rates.get("hashlib.sha256 over the records")
    verify_rate = rates.get("verify_store (toolloop verify)")
    if done.returncode != 0 or floor_rate is None or verify_rate is None:
        tail = (done.stdout + done.stderr).strip()[-1500:]
        return [], f"verify throughput (bench/verify_speed.py, as printed):\n{tail}"
    section = "verify (" + store.removeprefix("store: ").split(",")[1].strip() + ")"
    base = Row(section, "hashlib.sha256 over the same record bytes", "records/s", [floor_rate])
    verify = Row(section, "toolloop verify (verify_store)", "records/s", [verify_rate], base)
    return [base, verify], f"verify: best of 5 in one process (bench/verify_speed.py); {store}"


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3f}"


def table(rows: list[Row]) -> str:
    header = ("section", "variant", "median", "min–max", "unit", "ratio", "target", "")
    lines = [header]
    last = ""
    for row in rows:
        if not row.samples:
            continue
        ratio = row.ratio()
        lines.append(
            (
                row.section if row.section != last else "",
                row.variant + (f" ({row.note})" if row.note else ""),
                fmt(row.median),
                f"{fmt(min(row.samples))}–{fmt(max(row.samples))}",
                row.unit,
                "" if ratio is None else f"{ratio:.2f}×",
                row.target,
                row.verdict(),
            )
        )
        last = row.section
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right = {2, 3, 5}
    out = []
    for n, line in enumerate(lines):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {platform.system()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per variant")
    parser.add_argument("--calls", type=int, default=3, help="tool calls per model turn (C)")
    parser.add_argument("--big", type=int, default=2000, help="the longest run's turns")
    parser.add_argument("--peers", action="store_true", help="add the peer frameworks")
    parser.add_argument("--quick", action="store_true", help="3 rounds, T up to 200")
    parser.add_argument(
        "--no-postgres", action="store_true", help="skip the PostgreSQL worker rows"
    )
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.big = 3, 200 if args.big == 2000 else args.big
    if args.peers and not PEERS_PY.exists():
        raise SystemExit("no bench/.peers-venv: run `make bench-peers` to create it")
    started = time.perf_counter()
    print(f"toolloop bench on {machine()}", file=sys.stderr)
    print("loop overhead, scaling, store size:", file=sys.stderr)
    rows = loop_rows(args.repeats, args.calls, args.big, args.peers)
    print("cold start:", file=sys.stderr)
    rows += cold_start_rows(args.repeats)
    print("verify throughput:", file=sys.stderr)
    verify, verify_note = verify_rows()
    rows += verify
    print("parallel speedup:", file=sys.stderr)
    rows += parallel_rows(args.repeats)
    if not args.no_postgres:
        print("workers on PostgreSQL:", file=sys.stderr)
        rows += worker_rows(args.repeats, args.calls)
    print()
    print(f"machine: {machine()}")
    print(
        f"workload: T model turns × C={args.calls} calls to a trivial read handler, then a "
        f"final text turn; median of {args.repeats} fresh processes per row, interleaved"
    )
    print()
    print(table(rows))
    if verify_note:
        print()
        print(verify_note)
    print()
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
