"""The host's processes as /proc tells them (module_utils/_host/processes.py): a process of another pid namespace is
none of the host's."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import find_pids


def _every_pid() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


@pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of its own needs root")
def test_a_process_in_another_pid_namespace_does_not_count_as_the_hosts_service(tmp_path: Path) -> None:
    daemon = tmp_path / "sntl-ctrdaemon"
    daemon.write_bytes(Path("/bin/sleep").read_bytes())
    daemon.chmod(0o755)
    # as a container's daemon: the host sees its process, in a pid namespace that is not the host's
    contained = subprocess.Popen(["unshare", "--pid", "--fork", str(daemon), "30"])
    try:
        deadline = time.monotonic() + 10
        while not any(_processes.comm(pid) == daemon.name for pid in _every_pid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(_processes.comm(pid) == daemon.name for pid in _every_pid()), "the contained daemon never started"
        assert find_pids(daemon.name) == []
        with subprocess.Popen([str(daemon), "30"]) as own:
            assert find_pids(daemon.name) == [own.pid]
            own.kill()
    finally:
        contained.kill()
        contained.wait()
        subprocess.run(["pkill", "-f", str(daemon)], check=False)
