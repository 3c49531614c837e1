"""Fixtures of the platform tests: the collection's tarball as `ansible-galaxy collection build` makes it, awx.awx."""

import subprocess
import sys
from pathlib import Path

import awx_collection
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def collection_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sentinel-heal-VERSION.tar.gz built from this checkout (its build_ignore applied), in a directory of its own."""
    output = tmp_path_factory.mktemp("galaxy-build")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(output), str(ROOT)],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    (tarball,) = output.glob("sentinel-heal-*.tar.gz")
    return tarball


@pytest.fixture(scope="session")
def awx_collections() -> Path:
    """A collections path holding awx.awx (tests/platform/awx_collection.py: cached, downloaded once from PyPI)."""
    return awx_collection.install()
