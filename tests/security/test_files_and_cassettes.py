"""Files toolloop reads and writes, attacked: hostile cassettes, `--record` aimed at the wrong
file, file modes, and credentials in base URLs (security review M6, M8, M9, L3, L4, L9).

The memory bounds are measured as the peak RSS of a toolloop child process (``os.wait4``);
the child also gets an address-space limit, a guard that keeps code without the bound from
exhausting the machine, not the assertion.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from support.cli import Invoke
from support.measured import Measured, run_measured
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

from toolloop_cli.store import open_store
from toolloop_cli.transcripts import server
from toolloop_cli.transcripts.cassette import Cassette, dump_cassette, load_cassette, scrub_uri

#: the peak RSS a toolloop child may reach on a hostile cassette (KiB, as ru_maxrss)
RSS_LIMIT_KIB = 256 * 1024
#: address space given to the child: a guard for the machine, far above the RSS bound
GUARD_AS_BYTES = 1 << 30
URI = "https://api.openai.com/v1/responses"
REQUEST = json.dumps({"model": "gpt-4.1", "input": [{"role": "user", "content": "hi"}]})


def run_child(args: list[str], cwd: Path, timeout_s: float = 120.0) -> Measured:
    """``python -m toolloop_cli ARGS`` in a child; its own peak RSS from ``wait4``."""
    done = run_measured(args, cwd, timeout_s=timeout_s, address_space_bytes=GUARD_AS_BYTES)
    assert not done.killed, f"toolloop {args[0]} still running after {timeout_s} s"
    return done


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text[:2000]
    assert "Traceback" not in text
    return lines[0]


def billion_laughs() -> str:
    """The review's 802-byte cassette: nine levels of ten aliases under ``parsed_body``."""
    lol = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for i in range(1, 9):
        lol += f"l{i}: &l{i} [" + ",".join([f"*{prev}"] * 10) + "]\n"
        prev = f"l{i}"
    anchors = "".join("  " + line for line in lol.splitlines(True))
    return (
        f"anchors:\n{anchors}interactions:\n"
        f"- request: {{method: POST, uri: \"{URI}\", body: '{REQUEST}'}}\n"
        "  response:\n"
        "    status: 200\n"
        "    headers: {content-type: application/json}\n"
        f"    parsed_body: {{id: resp_1, status: completed, output: [], junk: *{prev}}}\n"
        "version: 1\n"
    )


def test_a_billion_laughs_cassette_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    cassette = tmp_path / "billion.yaml"
    cassette.write_text(billion_laughs())
    assert cassette.stat().st_size == 802
    done = run_child(["replay", str(cassette), "--store", str(tmp_path / "s.db")], tmp_path)
    assert done.code == 2, done.stderr[-2000:]
    line = one_line(done.stderr)
    assert "alias" in line and str(cassette) in line
    assert done.max_rss_kib < RSS_LIMIT_KIB, done
    assert not (tmp_path / "s.db").exists() or _operations(tmp_path / "s.db") == 0


def test_our_own_recordings_never_contain_an_alias_and_load_back(tmp_path: Path) -> None:
    """The writer and the reader agree: a shared value is written out twice, never aliased."""
    shared = ["ops-lead", "finance"]
    original = load_cassette(REFUND_OPENAI)
    meta = {"toolloop": {"approvers": shared, "again": shared}}
    path = tmp_path / "rec.yaml"
    dump_cassette(Cassette(str(path), original.interactions, meta), path)
    assert "&id" not in path.read_text() and "*id" not in path.read_text()
    assert load_cassette(path).metadata["toolloop"]["again"] == shared
    aliased = tmp_path / "aliased.yaml"
    aliased.write_text(path.read_text() + "extra: &x [1]\nmore: *x\n")
    with pytest.raises(Exception, match="alias"):
        load_cassette(aliased)


def gzip_bomb(gib: int) -> bytes:
    """A valid gzip stream of ``gib`` GiB of zeros (~1 MB), built without holding the output.

    After a full flush deflate restarts, so each further MiB of zeros is the same bytes.
    """
    mib = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH) == block
    end = deflate.flush()
    count = gib << 10
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(mib, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * count + end + struct.pack("<II", crc, (count << 20) & 0xFFFFFFFF)


def test_a_gzip_bomb_in_a_cassette_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    small = zlib.decompressobj(zlib.MAX_WBITS | 16)
    bomb = gzip_bomb(1)
    assert len(small.decompress(bomb, 1 << 20)) == 1 << 20  # it is real gzip
    lines = base64.encodebytes(bomb).decode().splitlines()
    body = "".join(f"        {line}\n" for line in lines)
    cassette = tmp_path / "gzipbomb.yaml"
    cassette.write_text(
        "interactions:\n"
        "- request:\n"
        f"    body: '{REQUEST}'\n"
        "    headers: {content-type: [application/json]}\n"
        "    method: POST\n"
        "    uri: https://api.openai.com/v1/responses\n"
        "  response:\n"
        "    body:\n"
        "      string: !!binary |\n"
        f"{body}"
        "    headers: {content-encoding: [gzip], content-type: [application/json]}\n"
        "    status: {code: 200, message: OK}\n"
        "version: 1\n"
    )
    assert cassette.stat().st_size < 2 << 20
    done = run_child(["replay", str(cassette), "--store", str(tmp_path / "s.db")], tmp_path)
    assert done.code == 2, done.stderr[-2000:]
    line = one_line(done.stderr)
    assert "decodes to more than 16777216 bytes" in line
    assert done.max_rss_kib < RSS_LIMIT_KIB, done


def test_a_whole_gzip_cassette_that_inflates_past_the_limit_is_refused_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A ``.yaml.gz`` of ~1 MB that inflates to 1 GiB: its size is measured a piece at a
    time before anything is kept (holding the 256 MiB it may reach took 580 MiB)."""
    cassette = tmp_path / "bomb.yaml.gz"
    cassette.write_bytes(gzip_bomb(1))
    assert cassette.stat().st_size < 2 << 20
    done = run_child(["replay", str(cassette), "--store", str(tmp_path / "s.db")], tmp_path)
    assert done.code == 2, done.stderr[-2000:]
    assert "decompresses to more than 268435456 bytes" in one_line(done.stderr)
    assert done.max_rss_kib < RSS_LIMIT_KIB, done
    assert not (tmp_path / "s.db").exists()


def test_a_cassette_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    limit = 256 * 1024 * 1024  # transcripts.cassette.MAX_CASSETTE_BYTES
    cassette = tmp_path / "huge.yaml"
    with cassette.open("wb") as handle:  # sparse: costs no disk and no time to write
        handle.truncate(limit + 1)
    done = run_child(["replay", str(cassette), "--store", str(tmp_path / "s.db")], tmp_path)
    assert done.code == 2
    line = one_line(done.stderr)
    assert f"over the limit of {limit} bytes" in line
    assert done.max_rss_kib < RSS_LIMIT_KIB, done


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda text: "interactions: []\n" + text, "interactions"),
        (lambda text: text.replace("version: 1", "version: 1\nversion: 2"), "version"),
        (
            lambda text: text.replace("    status:\n", "    status: 500\n    status:\n", 1),
            "interactions[0].response.status",
        ),
    ],
    ids=["interactions", "top-level", "nested"],
)
def test_duplicate_keys_in_a_cassette_are_refused(
    cli: Invoke, tmp_path: Path, edit: Callable[[str], str], where: str
) -> None:
    text = REFUND_OPENAI.read_text()
    assert "    status:\n" in text
    cassette = tmp_path / "dup.yaml"
    cassette.write_text(edit(text))
    result = cli("replay", str(cassette))
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert f"{where}: duplicate key" in line


def test_a_key_a_recorder_wrote_twice_with_the_same_value_is_read(
    cli: Invoke, tmp_path: Path
) -> None:
    """``version: 1`` twice (a real recorder's output that vcrpy reads): one meaning, read.
    The same key with another value is still refused, at the line of the repeat."""
    text = REFUND_OPENAI.read_text()
    same = tmp_path / "same.yaml"
    same.write_text(text.replace("version: 1", "version: 1\nversion: 1"))
    assert cli("replay", str(same)).exit_code == 0
    repeat_line = text.splitlines().index("version: 1") + 2
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("version: 1", "version: 1\nversion: 2"))
    result = cli("replay", str(other))
    assert result.exit_code == 2
    assert f"version: duplicate key at line {repeat_line}" in one_line(result.stderr)


@pytest.mark.parametrize("depth", [65, 500, 5000])
def test_a_recorded_request_nested_deeper_than_toolloop_reads_is_refused(
    cli: Invoke, tmp_path: Path, store_path: Path, depth: int
) -> None:
    """Answers nested past ``strict_json.MAX_DEPTH`` end the operation FAILED; a recorded
    request that deep cannot be compared, so the cassette is refused before a store exists
    (at 500 levels the JSON decoder still reads it but recursive readers would not; at 5,000
    the decoder itself raised RecursionError)."""
    document = yaml.safe_load(REFUND_OPENAI.read_text())
    request = document["interactions"][1]["request"]
    nested = "[" * depth + "]" * depth
    request["body"] = request["body"][:-1] + f',"metadata":{{"deep":{nested}}}}}'
    cassette = tmp_path / "deep.yaml"
    cassette.write_text(yaml.safe_dump(document))
    result = cli("replay", str(cassette), "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert "interaction 1: recorded request to https://api.openai.com/v1/responses" in error
    assert error.endswith("nests JSON deeper than 64 levels")
    assert not store_path.exists()


# -- --record aimed at the wrong file (M6) -----------------------------------------------


def _operations(store: Path) -> int:
    conn = sqlite3.connect(store)
    try:
        return int(conn.execute("SELECT count(*) FROM operations").fetchone()[0])
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def recorded_store(cli: Invoke, store_path: Path) -> Path:
    """A store with one operation, waiting for an approval."""
    first = cli("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI))
    assert first.exit_code == 10, first.output
    return store_path


@pytest.mark.parametrize(
    "target",
    ["store", "store-wal", "store-shm", "dotdot", "symlink", "hardlink", "registry", "prices"],
)
def test_record_refuses_the_store_the_registry_and_the_price_file(
    cli: Invoke, recorded_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.chdir(tmp_path)
    registry = tmp_path / "registry.yaml"
    registry.write_text(REGISTRY.read_text())
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  gpt-4.1: {input_per_mtok: 2, output_per_mtok: 8}\n")
    (tmp_path / "a").mkdir()
    choices = {
        "store": (str(recorded_store), recorded_store),
        "store-wal": (f"{recorded_store}-wal", recorded_store),
        "store-shm": (f"{recorded_store}-shm", recorded_store),
        "dotdot": (f"./a/../{recorded_store.name}", recorded_store),
        "symlink": ("link.yaml", recorded_store),
        "hardlink": ("hard.yaml", recorded_store),
        "registry": (str(registry), registry),
        "prices": (str(prices), prices),
    }
    record, protected = choices[target]
    if target == "symlink":
        Path(record).symlink_to(recorded_store)
    if target == "hardlink":
        os.link(recorded_store, record)
    before = _digest(protected)
    result = cli(
        "run", TASK, "--registry", str(registry), "--transcript", str(REFUND_OPENAI),
        "--prices", str(prices), "--record", record,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    assert f"--record {Path(record)} would overwrite" in line
    if protected != recorded_store:  # SQLite itself rewrites the store's pages (checkpoints)
        assert _digest(protected) == before
    assert recorded_store.read_bytes()[:16] == b"SQLite format 3\x00"
    assert _operations(recorded_store) == 1  # refused before the operation was created
    assert cli("runs").exit_code == 0


def test_record_refuses_the_transcript_and_a_file_that_is_not_a_cassette_only(
    cli: Invoke, recorded_store: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text(REFUND_OPENAI.read_text())
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\nversion: they matter\n")
    for record, needle in ((copy, "would overwrite the --transcript"), (notes, "not a cassette")):
        before = _digest(record)
        result = cli(
            "run", TASK, "--registry", str(REGISTRY), "--transcript", str(copy),
            "--record", str(record),
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert needle in one_line(result.stderr)
        assert _digest(record) == before
    assert _operations(recorded_store) == 1
    # what --record is for still works: replacing an earlier cassette, or an empty file
    empty = tmp_path / "empty.yaml"
    empty.touch()
    for record in (copy, empty):
        result = cli(
            "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI),
            "--record", str(record),
        )  # fmt: skip
        assert result.exit_code == 10, result.output
        assert len(load_cassette(record).interactions) == 3


# -- file modes (L3) -----------------------------------------------------------------------


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """``os.umask`` for one test; the process's umask is restored after it."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def test_a_recording_follows_the_umask_and_a_replaced_one_keeps_its_mode(
    cli: Invoke, tmp_path: Path, umask: Callable[[int], int]
) -> None:
    args = ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)]
    for mask, mode in ((0o077, 0o600), (0o022, 0o644), (0o027, 0o640)):
        umask(mask)
        record = tmp_path / f"rec-{mask:o}.yaml"
        assert cli(*args, "--record", str(record)).exit_code == 10
        assert record.stat().st_mode & 0o777 == mode, oct(mask)
    umask(0o022)
    kept = tmp_path / "rec-77.yaml"
    assert cli(*args, "--record", str(kept)).exit_code == 10
    kept.chmod(0o640)
    assert cli(*args, "--record", str(kept)).exit_code == 10
    assert kept.stat().st_mode & 0o777 == 0o640


def test_a_new_store_and_its_wal_files_are_private_and_an_existing_one_keeps_its_mode(
    tmp_path: Path, umask: Callable[[int], int]
) -> None:
    umask(0o000)
    path = tmp_path / "new" / "store.db"
    store = open_store(path)
    try:
        with store.transaction():
            store.conn.execute("SELECT 1")
        modes = {p.name: p.stat().st_mode & 0o777 for p in path.parent.iterdir()}
    finally:
        store.close()
    assert modes["store.db"] == 0o600
    assert {n for n in modes if n.startswith("store.db-")} == {"store.db-wal", "store.db-shm"}
    assert set(modes.values()) == {0o600}, modes
    path.chmod(0o640)  # an existing store's mode is the owner's choice: left alone
    umask(0o077)
    open_store(path).close()
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_new_store_made_through_a_symlink_is_private_too(
    tmp_path: Path, umask: Callable[[int], int]
) -> None:
    """``--store link.db`` where the link points at a file not there yet: ``O_EXCL`` refuses
    every link, so SQLite made the file through it with the umask's mode (0644)."""
    umask(0o022)
    (tmp_path / "target").mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "target" / "store.db")
    open_store(link).close()
    assert (tmp_path / "target" / "store.db").stat().st_mode & 0o777 == 0o600
    assert link.is_symlink()  # the link is followed, not replaced


# -- credentials in base URLs (L4) ---------------------------------------------------------


SECRET_URIS = [  # (URI, what stays, what must go)
    ("http://proxyuser:PROXYPASS@127.0.0.1:8080/v1/responses", "127.0.0.1:8080/v1", "PROXY"),
    ("https://TOKEN123@proxy.example/v1/responses", "proxy.example/v1", "TOKEN123"),
    ("https://g.example/v1beta/x?access_token=ya29.SECRET&alt=sse", "alt=sse", "SECRET"),
    ("https://g.example/v1beta/x?token=SECRET", "g.example", "SECRET"),
    ("https://u:p@g.example/v1beta/x?key=AIzaSECRET", "g.example", "SECRET"),
    ("https://g.example/v1beta/x?api_key=SECRET&alt=sse", "alt=sse", "SECRET"),
]


def test_scrub_uri_removes_userinfo_and_credential_parameters() -> None:
    for uri, kept, secret in SECRET_URIS:
        scrubbed = scrub_uri(uri)
        assert secret not in scrubbed and kept in scrubbed and "scrubbed" in scrubbed, uri
    plain = "https://api.openai.com/v1/responses?alt=sse"
    assert scrub_uri(plain) == plain


def test_base_url_credentials_reach_neither_the_recording_nor_the_store(
    cli: Invoke, store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "rec.yaml"
    with server.start(ROOT / "transcripts" / "refund-openai.yaml") as served:
        base = f"http://proxyuser:PROXYPASS-SECRET@127.0.0.1:{served.port}/v1"
        env = {"OPENAI_BASE_URL": base, "OPENAI_API_KEY": "sk-test"}
        result = cli(
            "run", TASK, "--registry", str(REGISTRY), "--provider", "openai",
            "--model", "gpt-4.1", "--record", str(record), env=env,
        )  # fmt: skip
        assert result.exit_code == 10, result.output
        assert len(served.provider.received) == 3
    assert "PROXYPASS" not in record.read_text()
    assert "proxyuser" not in record.read_text()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))
    assert b"PROXYPASS" not in stored
    conn = sqlite3.connect(store_path)
    (source,) = conn.execute("SELECT source_json FROM operations").fetchone()
    conn.close()
    assert json.loads(source)["base_url"] == scrub_uri(base)
    assert yaml.safe_load(record.read_text())["interactions"][0]["request"]["uri"] == (
        f"http://%3Cscrubbed%3E@127.0.0.1:{served.port}/v1/responses"
    )
    # the store keeps the URL scrubbed; a resume takes the credentials from the environment
    from toolloop_cli.wiring import stored_base_url

    monkeypatch.setenv("OPENAI_BASE_URL", base)
    assert stored_base_url("openai", scrub_uri(base)) == base
    monkeypatch.setenv("OPENAI_BASE_URL", base.replace("127.0.0.1", "localhost"))
    assert stored_base_url("openai", scrub_uri(base)) == scrub_uri(base)


# -- named pipes given as input files ---------------------------------------------------


@pytest.mark.parametrize("role", ["registry", "transcript", "prices", "registry check"])
def test_a_named_pipe_nothing_writes_to_is_read_as_empty_not_waited_on(
    cli: Invoke, tmp_path: Path, role: str
) -> None:
    """``mkfifo f.yaml`` given as a registry, a recording or a price file: opening it waited
    for a writer for ever. It is opened without waiting and read as the empty file it is."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    args = {
        "registry": ["run", TASK, "--registry", str(fifo), "--transcript", str(REFUND_OPENAI)],
        "transcript": ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(fifo)],
        "prices": [
            "run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI),
            "--prices", str(fifo),
        ],
        "registry check": ["registry", "check", str(fifo), "--no-import"],
    }[role]  # fmt: skip
    result = cli(*args)  # a blocking open would hang here until the test's timeout
    assert result.exit_code == 2, result.output
    assert "fifo.yaml" in result.stderr and "Traceback" not in result.stderr


def test_a_recording_given_by_process_substitution_is_read_from_its_pipe(tmp_path: Path) -> None:
    """``--transcript <(cat rec.yaml)``: the path was resolved to ``/proc/PID/fd/pipe:[N]``,
    which cannot be opened ("cannot read: No such file or directory", exit 2)."""
    import shlex
    import subprocess
    import sys

    command = shlex.join(
        [sys.executable, "-m", "toolloop_cli", "run", TASK, "--registry", str(REGISTRY),
         "--store", str(tmp_path / "s.db")]
    ) + f" --transcript <(cat {shlex.quote(str(REFUND_OPENAI))})"  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 10, done.stderr
    assert "Traceback" not in done.stderr


def test_a_registry_read_from_a_pipe_with_a_writer_is_read_whole(tmp_path: Path) -> None:
    """``--registry <(generate)``: the pipe is read once (the cache keyed by the file's bytes
    read it first before, and the load found it empty)."""
    import subprocess
    import sys
    import threading

    fifo = tmp_path / "registry.yaml"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("w") as pipe:
            pipe.write(REGISTRY.read_text())

    writer = threading.Thread(target=write)
    writer.start()
    done = subprocess.run(
        [sys.executable, "-m", "toolloop_cli", "run", TASK, "--registry", str(fifo),
         "--transcript", str(REFUND_OPENAI), "--store", str(tmp_path / "s.db")],
        capture_output=True, text=True, check=False, timeout=120, cwd=ROOT,
    )  # fmt: skip
    writer.join(timeout=10)
    assert done.returncode == 10, done.stderr
