"""The tarball as Galaxy receives it: galaxy-importer, the tool Galaxy runs on every upload, with its ansible-lint pass.

The importer runs from its own virtualenv (requirements-importer.txt, which `make setup` installs), with that
virtualenv's ansible-doc and ansible-lint first on the PATH, as Galaxy's import workers run it: the collection
alone on the collections path, ansible-lint offline with its production profile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

IMPORTER_BIN = Path(sys.executable).parent.parent / "galaxy-importer" / "bin"
# Galaxy's limit (20 MB) is far above this; the bound says the tarball carries the collection and nothing of the
# checkout's machinery (the lab, the benchmarks, caches, virtualenvs: any of them is several MB). The collection itself,
# its unit tests and guides included, is about 1 MB.
MAX_TARBALL_BYTES = 1_500_000
NOT_SHIPPED = ("tests/lab/", "tests/integration/", "bench/", ".venv/", ".collections/", ".git/", ".demo-state/")


@pytest.fixture(scope="module")
def import_log(collection_tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    if not (IMPORTER_BIN / "python").exists():
        pytest.fail(f"galaxy-importer is not installed in {IMPORTER_BIN.parent}: run `make setup`")
    env = {**os.environ, "PATH": f"{IMPORTER_BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ANSIBLE_CONFIG", None)  # Galaxy has no checkout's ansible.cfg: only the tarball
    proc = subprocess.run([str(IMPORTER_BIN / "python"), "-m", "galaxy_importer.main", str(collection_tarball)],
                          capture_output=True, text=True, env=env, cwd=tmp_path_factory.mktemp("galaxy-import"), timeout=600, check=False)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(lines)
    return lines


def test_galaxy_importer_completes_the_import_with_no_finding(import_log: list[str]) -> None:
    assert "Importer processing completed successfully" in import_log, "\n".join(import_log)
    assert any(line.startswith("Linting collection via ansible-lint") for line in import_log)
    findings = [line for line in import_log if line.startswith(("WARNING", "ERROR"))]
    assert findings == []


def test_the_tarball_carries_the_collection_and_nothing_of_the_checkouts_machinery(collection_tarball: Path) -> None:
    assert collection_tarball.stat().st_size < MAX_TARBALL_BYTES
    with tarfile.open(collection_tarball) as tarball:
        names = tarball.getnames()
    assert {"roles/autoheal/README.md", "roles/host/README.md", "README.md", "MANIFEST.json"} <= set(names)
    assert [name for name in names if name.startswith(NOT_SHIPPED) or "__pycache__" in name] == []
