"""What the module_utils tests share: systemd's commands answering from units a test gives, a real HTTP server and a
directory short enough for Unix sockets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from local_llm import free_port

# systemctl and journalctl answering from the units given: `show` prints each unit's properties as systemd does
_SCRIPTED_SYSTEMD = """#!/usr/bin/env python3
import json, os, sys
units = json.load(open(os.environ["SCRIPTED_UNITS"]))
if os.path.basename(sys.argv[0]) == "journalctl":
    # the lines journald holds, each with the one field a match must name to find it: the terms between "+" are ANDed
    held = json.load(open(os.environ["SCRIPTED_JOURNAL"])) if "SCRIPTED_JOURNAL" in os.environ else []
    terms, term = [], []
    for arg in sys.argv[1:] + ["+"]:
        if arg == "+":
            terms.append(term)
            term = []
        elif not arg.startswith("-"):
            term.append(arg)
    print("\\n".join(line for fields, line in reversed(held) if any(all(match in fields for match in t) for t in terms if t)))
    sys.exit(0)
if sys.argv[1] != "show":
    sys.exit(0)
names = sys.argv[sys.argv.index("--") + 1:]
wanted = next(arg for arg in sys.argv if arg.startswith("--property=")).split("=", 1)[1].split(",")
blocks = []
for name in names:
    unit = units.get(name) or units.get(name + ".service") or {"Id": name, "LoadState": "not-found"}
    blocks.append("\\n".join("%s=%s" % (key, unit.get(key, "")) for key in wanted))
print("\\n\\n".join(blocks))
"""


@pytest.fixture
def scripted_systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, dict[str, str]]], None]:
    """systemd's answers for the units a test gives, on PATH in place of the machine's (a unit test never reads it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("systemctl", "journalctl"):
        (bin_dir / program).write_text(_SCRIPTED_SYSTEMD)
        (bin_dir / program).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def units(known: dict[str, dict[str, str]]) -> None:
        (tmp_path / "units.json").write_text(json.dumps(known))
        monkeypatch.setenv("SCRIPTED_UNITS", str(tmp_path / "units.json"))
    return units


@pytest.fixture
def web(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real HTTP server in its own process, serving a page with a known body."""
    (tmp_path / "index.html").write_text("hello from the probe test")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    comm = Path(f"/proc/{process.pid}/comm").read_text().strip()
    yield {"port": port, "pid": process.pid, "comm": comm, "dir": tmp_path}
    process.kill()
    process.wait()


@pytest.fixture
def sockets_dir() -> Iterator[Path]:
    """A short directory: a Unix socket's path has at most 107 bytes, less than a test's tmp_path may take."""
    with tempfile.TemporaryDirectory(prefix="sock") as directory:
        yield Path(directory)
