"""A /proc of a test's own (module_utils/_host/processes.py reads it through ``PROC``): the processes a test says the host
runs, each with its name, parent, cgroup, user, program and listening sockets, and nothing of the machine the tests
run on. Dead links stand for /proc's magic ones: the probe only reads what they say."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host import checks as _checks
from ansible_collections.sentinel.heal.plugins.module_utils._host import gather as _gather
from ansible_collections.sentinel.heal.plugins.module_utils._host import installation as _installation
from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    comm: str
    ppid: int = 1
    # the systemd unit whose cgroup holds it (nginx.service, session-3.scope), or None for the root cgroup
    unit: str | None = None
    uid: int = 1000
    exe: str | None = None
    # the TCP ports it listens on
    ports: tuple[int, ...] = ()


def fake_proc(root: Path, processes: Iterable[FakeProcess]) -> str:
    """Write ``processes`` as /proc shows them below ``root``; the path to give ``_processes.PROC``."""
    listening = []
    for process in processes:
        directory = root / str(process.pid)
        (directory / "fd").mkdir(parents=True)
        (directory / "comm").write_text(process.comm + "\n")
        (directory / "cmdline").write_bytes(process.comm.encode() + b"\0")
        (directory / "stat").write_text(f"{process.pid} ({process.comm}) S {process.ppid} {process.pid} {process.pid} 0 -1 4194560\n")
        uids = "\t".join([str(process.uid)] * 4)
        (directory / "status").write_text(f"Name:\t{process.comm}\nPPid:\t{process.ppid}\nUid:\t{uids}\n")
        cgroup = f"/system.slice/{process.unit}" if process.unit and process.unit.endswith(".service") else \
            f"/user.slice/{process.unit}" if process.unit else "/"
        (directory / "cgroup").write_text(f"0::{cgroup}\n")
        if process.exe is not None:
            os.symlink(process.exe, directory / "exe")
        for index, port in enumerate(process.ports):
            inode = process.pid * 100 + index
            os.symlink(f"socket:[{inode}]", directory / "fd" / str(3 + index))
            listening.append(f"   {len(listening)}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
                             f"   {process.uid}        0 {inode} 1 0000000000000000 100 0 0 10 0")
    (root / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    (root / "net" / "tcp").write_text("\n".join([header, *listening]) + "\n")
    return str(root)


def evidence_on(monkeypatch: pytest.MonkeyPatch, root: Path, spec: dict[str, Any], manager: str, processes: Iterable[FakeProcess], *,
                unit: dict[str, Any] | None = None, program: str | None = None) -> dict[str, Any]:
    """What the probe's evidence_of reads of ``spec`` on a host under ``manager`` that runs ``processes``: on systemd,
    ``unit`` is what systemctl shows of its unit; ``program`` is where its program is installed. The status command's
    answer is a failure, whatever the machine has."""
    monkeypatch.setattr(_processes, "PROC", fake_proc(root / "proc", processes))
    monkeypatch.setattr(_installation, "program", lambda name: program)
    monkeypatch.setattr(_checks, "status", lambda init_service, manager, timeout: {"command": ["status", init_service], "rc": 3, "output": ""})
    monkeypatch.setattr(_systemd, "read_unit", lambda name, timeout, lines: unit)
    return dict(_gather.evidence_of({**spec, "known_good": False}, manager))
