"""The machine the lab fleet runs on: where the lab keeps its state, the processes, mounts and links it makes and
removes, and the error it raises. Part of tests/lab/fleet.py (import that); needs root."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

LAB_DIR = Path(__file__).resolve().parent


STATE_DIR = LAB_DIR / ".state"


class LabError(Exception):
    """The lab cannot do what was asked; the message says why."""


# Environment for commands run in the image or a host: nothing leaks in from the caller.
SYSTEM_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


REQUIRED_TOOLS = {
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ssh-keygen": "openssh-client",
}


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (namespaces, mounts, bridges): run it with sudo")


def require_root_and_tools() -> None:
    require_root()
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        packages = sorted({REQUIRED_TOOLS[tool] for tool in missing})
        raise LabError(f"missing tools: {', '.join(missing)}; install with: apt-get install {' '.join(packages)}")


@dataclass(frozen=True)
class Process:
    """A PID plus its start time, so a recycled PID is never mistaken for ours."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> Process | None:
        stat = read_stat(pid)
        return None if stat is None else cls(pid, stat[1])

    def running(self) -> bool:
        stat = read_stat(self.pid)
        return stat is not None and stat[1] == self.start_time and stat[0] not in "ZX"


def read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def wait_for_child(pid: int, timeout: float = 5.0) -> Process | None:
    children_file = Path(f"/proc/{pid}/task/{pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = children_file.read_text().split()
            if children:
                return Process.of(int(children[0]))
        time.sleep(0.01)
    return None


def kill_and_wait(pids: set[int], timeout: float = 15.0) -> None:
    """SIGKILL by PID, pid-namespace inits first.

    Killing a namespace's PID 1 makes the kernel kill the whole namespace, and
    the unshare process above it then reaps it and exits on its own. Killing
    that unshare at the same time would leave the init as an orphaned zombie.
    """
    namespace_inits = {pid for pid in pids if is_namespace_init(pid)}
    if namespace_inits:
        kill(namespace_inits)
        wait_for_exit(pids, timeout=2.0)
    kill(still_running(pids))
    survivors = wait_for_exit(pids, timeout)
    if survivors:
        raise LabError(f"processes did not exit after SIGKILL: {sorted(survivors)}")


def kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for_exit(pids: set[int], timeout: float) -> set[int]:
    """Wait until the processes are gone or zombies; return those still running."""
    deadline = time.monotonic() + timeout
    while (running := still_running(pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return running


def still_running(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (stat := read_stat(pid)) is not None and stat[0] not in "ZX"}


def is_namespace_init(pid: int) -> bool:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                namespace_pids = line.split()[1:]
                return len(namespace_pids) > 1 and namespace_pids[-1] == "1"
    return False


def processes_rooted_under(directory: Path) -> set[int]:
    prefix = f"{directory}/"
    rooted = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if f"{os.readlink(entry / 'root')}/".startswith(prefix):
                    rooted.add(int(entry.name))
    return rooted


def unmount_under(directory: Path) -> None:
    for mount_point in sorted(mounts_under(directory), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount_point], check=True)


def mounts_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    mount_points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = unescape_mountinfo(line.split()[4])
        if f"{mount_point}/".startswith(prefix):
            mount_points.append(mount_point)
    return mount_points


def unescape_mountinfo(field: str) -> str:
    """Mount points in mountinfo have space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape[1], 8)), field)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def link_exists(name: str) -> bool:
    return ip("link", "show", "dev", name, check=False).returncode == 0


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []
