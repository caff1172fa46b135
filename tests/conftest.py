"""Fixtures only (shared helpers live in ``tests/support``): a CLI runner, a store path, a
fake clock; an environment without provider keys; and the markers of the suite's folders.

Markers: ``reliability`` (everything under ``tests/reliability``: crash, contention, fuzz,
hostile input, unknown outcomes), ``slow`` (a test that takes more than a few seconds
alone), ``soak`` (runs only with ``TOOLLOOP_SOAK=1``, which also enlarges the reliability
tests; otherwise deselected). ``make unit-fast`` runs ``-m "not reliability and not slow"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

# pytest-xdist workers run with COLUMNS=80 in their environment, which Rich would fix as the
# width of the CLI's consoles when they are created (at import): drop it first, so each test
# gets the width it asks for with ``env={"COLUMNS": ...}`` (80 when it asks for none).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

from support.cli import Invoke
from support.clock import FakeClock
from support.postgres import PgLocation, Server, start_server

from toolloop_cli.cli import app

_TESTS = Path(__file__).resolve().parent

#: variables that would point a test at a real provider, collector or store
_OUTSIDE = ("_API_KEY", "_BASE_URL")
_NAMED = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "TOOLLOOP_STORE",
    "TOOLLOOP_DATA_DIR",
)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reaches a real provider or collector because a developer has keys exported."""
    for name in list(os.environ):
        if name.endswith(_OUTSIDE) or name in _NAMED:
            monkeypatch.delenv(name)
    yield


@pytest.fixture(scope="session", autouse=True)
def _reads_held_for_good() -> Iterator[None]:
    """A batch of reads keeps its intents held until its results, however long its handlers
    take: which commits a run makes must not depend on how busy the machine is. Session-wide,
    so that module fixtures (a crash harness's reference run) see it too; the tests of the
    default (committed once ``READS_HELD_S`` has passed) set it themselves."""
    from toolloop_cli.engine import executing

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(executing, "READS_HELD_S", float("inf"))
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reliability = Path(__file__).resolve().parent / "reliability"
    soak = bool(os.environ.get("TOOLLOOP_SOAK"))
    kept, deselected = [], []
    for item in items:
        if Path(str(item.path)).resolve().is_relative_to(reliability):
            item.add_marker(pytest.mark.reliability)
        if item.get_closest_marker("soak") is not None and not soak:
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


#: the folders whose tests run on both store backends (``store_path`` parametrised)
BOTH_BACKENDS = ("engine", "store", "audit", "reliability")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test under ``BOTH_BACKENDS`` that takes ``store_path`` runs once on a SQLite file and
    once on a PostgreSQL database, unless it is marked ``sqlite_only`` (it reads the file, or
    uses what only SQLite has)."""
    if "store_path" not in metafunc.fixturenames:
        return
    folder = Path(str(metafunc.definition.path)).resolve().relative_to(_TESTS).parts[0]
    if folder not in BOTH_BACKENDS or metafunc.definition.get_closest_marker("sqlite_only"):
        return
    metafunc.parametrize("store_path", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def store_path(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The test's store: a file in ``tmp_path``; or, for the ``postgresql`` parameter, a fresh
    database's URL, with the handlers' data (``TOOLLOOP_DATA_DIR``) in ``tmp_path`` as beside
    a file store."""
    if getattr(request, "param", "sqlite") == "sqlite":
        return tmp_path / "store.db"
    monkeypatch.setenv("TOOLLOOP_DATA_DIR", str(tmp_path))
    url: str = request.getfixturevalue("postgres_url")
    return PgLocation(url, tmp_path)  # type: ignore[return-value]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real PostgreSQL server per test process (see ``support/postgres.py``)."""
    server = start_server(tmp_path_factory.mktemp("pgdata"))
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: Server) -> str:
    """A new, empty PostgreSQL database of this test's own: a ``--store`` URL."""
    return postgres_server.fresh_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of a test that runs on both backends: a SQLite file, then a PostgreSQL
    database (``--store`` and ``open_store`` take either)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def cli(store_path: Path) -> Invoke:
    """Run a toolloop command in-process against the test store; returns the Click result."""
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
        full = [*args] if args[0] == "registry" else [*args, "--store", str(store_path)]
        return runner.invoke(app, full, env=env, catch_exceptions=False)

    return invoke
