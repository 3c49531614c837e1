"""The wheels a lab host installs sentinel.heal from: the lab's hosts have no internet, this machine has.

The packages are those command_line.rst's ``local_install`` block installs (the offline heal), in the ranges of
requirements.txt, for the Python of each Debian release the lab boots (3.11 on bookworm, 3.13 on trixie). Downloaded
once into a directory named after those lines and the Python version, and kept there (``make setup`` fetches them):

    python3 tests/lab/host_wheels.py     # prints the directories
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from guides import code_block  # noqa: E402  (tests/ is not a package)

CACHE = Path(os.environ.get("SENTINEL_HEAL_WHEEL_CACHE", Path.home() / ".cache" / "sentinel-heal" / "wheels"))
REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# the python3 of each release of tests/lab/fleet.py's SUITES: bookworm's, trixie's
LAB_PYTHONS = ("3.11", "3.13")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def guide_packages() -> list[str]:
    """The names the guide's ``pip install --no-index --find-links DIR NAME...`` line installs."""
    line = next(line for line in code_block("command_line", "local_install").body.splitlines() if line.startswith("pip install"))
    words = line.split()[2:]
    find_links = words.index("--find-links")
    return [word for word in words[:find_links] + words[find_links + 2:] if not word.startswith("-")]


def requirement_lines(names: list[str]) -> list[str]:
    """The lines of requirements.txt for ``names``, with their ranges."""
    lines = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if match := REQUIREMENT_NAME.match(line):
            lines[_normal(match[0])] = line
    missing = [name for name in names if _normal(name) not in lines]
    if missing:
        raise SystemExit(f"command_line.rst's local_install installs {', '.join(missing)}, which requirements.txt does not name: "
                         "add it there or take it out of the guide")
    return [lines[_normal(name)] for name in names]


def ensure(python_version: str) -> Path:
    """The directory of the wheels for a host's Python (``3.13``), downloaded unless an earlier run left them complete."""
    if python_version not in LAB_PYTHONS:
        raise SystemExit(f"no lab release has Python {python_version}: the lab's are {', '.join(LAB_PYTHONS)} (LAB_PYTHONS)")
    lines = requirement_lines(guide_packages())
    python = "cp" + python_version.replace(".", "")
    key = hashlib.sha256("\n".join([python, *lines]).encode()).hexdigest()[:12]
    final = CACHE / f"host-{python}-{key}"
    if final.is_dir():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    # downloaded beside the cache and renamed when whole: an interrupted download leaves nothing that looks complete
    build = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=CACHE))
    try:
        print(f"== downloading the wheels of {', '.join(lines)} for {python} into {final} (once)", file=sys.stderr, flush=True)
        download = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
                    "--python-version", python_version, "-d", str(build)]
        subprocess.run([*download, *lines], check=True)
        build.chmod(0o755)
        os.rename(build, final)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return final


if __name__ == "__main__":
    for version in LAB_PYTHONS:
        print(ensure(version))
