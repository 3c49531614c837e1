"""Make the checkout importable as ansible_collections.sentinel.heal (via the .collections link); the local LLM, the
PostgreSQL server and the memory of each backend as fixtures."""

import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".collections"

if not (COLLECTIONS / "ansible_collections" / "sentinel" / "heal").exists():
    raise SystemExit(f"{COLLECTIONS}/ansible_collections/sentinel/heal is missing: run `make setup` first")
sys.path.insert(0, str(COLLECTIONS))
sys.path.insert(0, str(ROOT / "tests"))  # llm_server, local_llm, postgres_server, memory_places

from local_llm import LocalLLM, free_port  # noqa: E402  (tests/ is on the path from here on)
from memory_places import BACKENDS, MemoryPlace, drop, postgres_place, sqlite_place  # noqa: E402
from postgres_server import PostgresServer, new_server  # noqa: E402


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalLLM]:
    """The real llama.cpp server with SmolLM2-135M-Instruct (tests/local_llm.py), on a free port and in a state
    directory of its own, so a server started by hand with `make llm-up` is left alone; stopped after the session."""
    server = LocalLLM(port=free_port(), state_dir=tmp_path_factory.mktemp("local-llm"))
    server.up()
    try:
        yield server
    finally:
        server.down()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (tests/postgres_server.py: Debian's binaries, a cluster in a temporary directory owned by
    the postgres user, on a free local port, a role with a password and its database), stopped and removed after the
    session."""
    server = new_server()
    try:
        server.up()
    except BaseException:
        server.down()
        raise
    try:
        yield server
    finally:
        server.down()


@pytest.fixture(params=BACKENDS)
def memory_place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryPlace]:
    """A fresh, empty memory on each backend in turn: the SQLite file in a state dir, and a PostgreSQL database (a schema
    of its own on the test server) with a state dir of its own for the rest."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    if request.param == "sqlite":
        place = sqlite_place(state_dir)
        yield place
        drop(place)
        return
    place = postgres_place(request.getfixturevalue("postgres"), state_dir)
    try:
        yield place
    finally:
        drop(place)


_SECONDS_PER_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where a run's time went, file by file (setup, call and teardown summed): what to look at when the suite grows."""
    if len(_SECONDS_PER_FILE) < 2:
        return
    terminalreporter.section("seconds per file")
    for path, seconds in sorted(_SECONDS_PER_FILE.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
