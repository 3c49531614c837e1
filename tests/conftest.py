"""Make the checkout importable as ansible_collections.sentinel.heal (via the .collections link); the local LLM fixture."""

import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".collections"

if not (COLLECTIONS / "ansible_collections" / "sentinel" / "heal").exists():
    raise SystemExit(f"{COLLECTIONS}/ansible_collections/sentinel/heal is missing: run `make setup` first")
sys.path.insert(0, str(COLLECTIONS))
sys.path.insert(0, str(ROOT / "tests"))  # llm_server, local_llm

from local_llm import LocalLLM, free_port  # noqa: E402  (tests/ is on the path from here on)


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
