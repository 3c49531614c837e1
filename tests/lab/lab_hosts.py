"""One lab host: its network namespace on the bridge, its copy-on-write layer, its boot (tini or systemd as PID 1),
its readiness checks, and the links and cgroups the lab removes again. Part of tests/lab/fleet.py (import that);
needs root."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from lab_machine import STATE_DIR, SYSTEM_ENV, LabError, Process, ip, link_exists, wait_for_child

# Each systemd host's cgroup, below every cgroup hierarchy systemd uses (the unified one, and on a host
# machine in hybrid mode the named `systemd` one too); `down` removes them, deepest first.
CGROUP_ROOT = Path("/sys/fs/cgroup")


CGROUP_PARENT = "sentinel-lab"


BRIDGE = "sentinelbr0"


GATEWAY = "10.77.0.1"


PREFIX_LENGTH = 24


FIRST_HOST_OCTET = 11


NETNS_PREFIX = "sentinel-node"


VETH_PREFIX = "shv-node"


# Hosts started by this Python process, so teardown can reap them instead of leaving zombies.
LAUNCHED: dict[int, subprocess.Popen[bytes]] = {}


# Runs as PID 1 of a fresh host's namespaces, then becomes the host's init: tini inside a chroot, or
# systemd after pivot_root (inside a chroot the kernel refuses new user namespaces, which units with
# PrivateUsers= need), with only cgroup2 at /sys/fs/cgroup (the root of the host's cgroup namespace: in
# hybrid mode systemd would write into the machine's v1 hierarchies), container= in its environment, and
# no capability to load modules, touch raw I/O or set the clock (else modprobe@ units run).
# The mounts live only in the host's private mount namespace and vanish with it.
BOOT_HOST = r"""
set -eu
image=$1 upper=$2 work=$3 root=$4 name=$5 init=$6
mount -t overlay overlay -o "lowerdir=$image,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
if [ "$init" = systemd ]; then
    mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
fi
mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/dev"
mknod -m 0666 "$root/dev/null" c 1 3
mknod -m 0666 "$root/dev/zero" c 1 5
mknod -m 0666 "$root/dev/full" c 1 7
mknod -m 0666 "$root/dev/random" c 1 8
mknod -m 0666 "$root/dev/urandom" c 1 9
mknod -m 0666 "$root/dev/tty" c 5 0
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
hostname "$name"
if [ "$init" = sysv ]; then
    exec chroot "$root" /usr/bin/tini -- /usr/local/sbin/lab-init
fi
cd "$root"
mkdir -p .lab-old-root
pivot_root . .lab-old-root
umount -l /.lab-old-root
rmdir /.lab-old-root
exec /usr/bin/setpriv --bounding-set -sys_module,-sys_rawio,-sys_time /usr/bin/env -i container=sentinel-lab /lib/systemd/systemd
"""


@dataclass(frozen=True)
class Host:
    name: str
    address: str

    @property
    def netns(self) -> str:
        return f"sentinel-{self.name}"

    @property
    def veth(self) -> str:
        return f"shv-{self.name}"

    @property
    def state_dir(self) -> Path:
        return STATE_DIR / "hosts" / self.name

    @property
    def upper(self) -> Path:
        return self.state_dir / "upper"

    @property
    def work(self) -> Path:
        return self.state_dir / "work"

    @property
    def rootfs(self) -> Path:
        return self.state_dir / "rootfs"

    @property
    def console_log(self) -> Path:
        return self.state_dir / "console.log"


class HostRecord(TypedDict):
    """A host's processes in fleet.json, each as [pid, start time], its init system and its Debian release."""

    unshare: list[int]
    init: list[int]
    init_system: str
    suite: str


def address(name: str) -> str:
    """IP address of a lab host: node1 is 10.77.0.11, node2 10.77.0.12, ..."""
    index = int(name.removeprefix("node"))
    return f"10.77.0.{FIRST_HOST_OCTET + index - 1}"


def create_bridge() -> None:
    if link_exists(BRIDGE):
        return
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{GATEWAY}/{PREFIX_LENGTH}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")


def create_host_network(host: Host) -> None:
    ip("netns", "add", host.netns)
    ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
    ip("link", "set", host.veth, "master", BRIDGE, "up")
    ip("-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LENGTH}", "dev", "eth0")
    ip("-n", host.netns, "link", "set", "eth0", "up")
    ip("-n", host.netns, "link", "set", "lo", "up")
    ip("-n", host.netns, "route", "add", "default", "via", GATEWAY)


def prepare_host_layer(host: Host, image: Path, public_key: str, fleet: list[Host]) -> None:
    """Seed the host's upper layer with its identity and the lab's SSH key."""
    for directory in (host.upper, host.work, host.rootfs):
        directory.mkdir(parents=True)
    hosts_file = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
    hosts_file += "".join(f"{peer.address}\t{peer.name}\n" for peer in fleet)
    _add_to_layer(image, host.upper, "etc/hostname", f"{host.name}\n", 0o644, (0, 0))
    _add_to_layer(image, host.upper, "etc/hosts", hosts_file, 0o644, (0, 0))
    for account in ("sentinel", "admin"):
        home = (image / "home" / account).stat()
        _add_to_layer(image, host.upper, f"home/{account}/.ssh/authorized_keys", public_key, 0o600, (home.st_uid, home.st_gid))


def _add_to_layer(image: Path, upper: Path, relative: str, content: str, mode: int, owner: tuple[int, int]) -> None:
    """Write a file into an overlay upper layer.

    A directory present in both layers shows the upper one's owner and mode, so
    directories that exist in the image are created with the image's attributes.
    """
    parts = Path(relative).parts
    for depth in range(1, len(parts)):
        directory = Path(*parts[:depth])
        target = upper / directory
        if target.exists():
            continue
        target.mkdir()
        lower = image / directory
        if lower.is_dir():
            lower_stat = lower.stat()
            os.chmod(target, lower_stat.st_mode & 0o7777)
            os.chown(target, lower_stat.st_uid, lower_stat.st_gid)
        else:
            os.chmod(target, 0o700)
            os.chown(target, *owner)
    path = upper / relative
    path.write_text(content)
    os.chmod(path, mode)
    os.chown(path, *owner)


def start_host(host: Host, image: Path, init_system: str, suite: str) -> HostRecord:
    namespaces = ["unshare", "--mount", "--pid", "--uts", "--ipc", "--fork", "--kill-child", "--propagation", "private"]
    cgroups = host_cgroups(host) if init_system == "systemd" else []
    if cgroups:
        namespaces.insert(1, "--cgroup")  # its root is the host's own cgroup, which the launcher enters first
        for cgroup in cgroups:
            cgroup.mkdir(parents=True, exist_ok=True)
    boot = ["sh", "-c", BOOT_HOST, "lab-boot", str(image), str(host.upper), str(host.work), str(host.rootfs), host.name, init_system]
    argv = ["ip", "netns", "exec", host.netns, *namespaces, "--", *boot]

    def enter_cgroups() -> None:
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")

    with host.console_log.open("ab") as console:
        launched = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, env=SYSTEM_ENV,
                                    start_new_session=True, preexec_fn=enter_cgroups if cgroups else None)
    LAUNCHED[launched.pid] = launched
    unshare = Process.of(launched.pid)
    init = wait_for_child(launched.pid)
    if unshare is None or init is None:
        raise LabError(f"{host.name} did not start; see {host.console_log}")
    return {"unshare": [unshare.pid, unshare.start_time], "init": [init.pid, init.start_time], "init_system": init_system, "suite": suite}


def host_cgroups(host: Host) -> list[Path]:
    """The host's cgroup in each hierarchy systemd uses: cgroup2 alone, or in hybrid mode its unified and named ones."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / CGROUP_PARENT / host.name]
    return [CGROUP_ROOT / tree / CGROUP_PARENT / host.name for tree in ("unified", "systemd") if (CGROUP_ROOT / tree).is_dir()]


def lab_cgroups() -> list[Path]:
    """Every cgroup directory the lab made, deepest first (systemd makes its own below each host's)."""
    parents = [CGROUP_ROOT / CGROUP_PARENT] + [CGROUP_ROOT / tree / CGROUP_PARENT for tree in ("unified", "systemd")]
    found = [path for parent in parents if parent.is_dir() for path in [parent, *parent.rglob("*")] if path.is_dir()]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def booted(host: Host, init: Process, init_system: str) -> bool:
    """True once PID 1 of the host is the host's init: tini chrooted into the host's root, or systemd with
    every unit started (after pivot_root, /proc/PID/root no longer names the host's root, so ask systemd).
    Raises LabError naming the failed units when systemd will not get there."""
    if init_system == "systemd":
        state = run_in_process(init, ["systemctl", "is-system-running"], timeout=10).stdout.strip()
        if state == "degraded":
            failed = run_in_process(init, ["systemctl", "--failed", "--plain", "--no-legend"], timeout=10).stdout.split()
            raise LabError(f"{host.name}: systemd is degraded, failed units: {' '.join(unit for unit in failed if '.' in unit)}")
        return state == "running"
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{init.pid}/root") == str(host.rootfs)
    return False


def run_in_process(
    init: Process,
    argv: Sequence[str],
    *,
    input_text: str | None = None,
    capture: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    command = ["nsenter", f"--target={init.pid}", "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wdns=/", "--", *argv]
    env = SYSTEM_ENV | {"TERM": os.environ.get("TERM", "dumb")}
    return subprocess.run(command, check=False, input=input_text, capture_output=capture, text=True, env=env, timeout=timeout)


def _ssh_answers(host: Host, init: Process) -> bool:
    try:
        with socket.create_connection((host.address, 22), timeout=1) as connection:
            return connection.recv(4) == b"SSH-"
    except OSError:
        return False


def _nginx_answers(host: Host, init: Process) -> bool:
    connection = http.client.HTTPConnection(host.address, 80, timeout=1)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        # Another program squatting on port 80 may answer 200 too.
        return response.status == 200 and response.getheader("Server", "").startswith("nginx")
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _postgresql_answers(host: Host, init: Process) -> bool:
    # As postgres, so peer authentication succeeds and the server log gets no FATAL per probe.
    probe = ["runuser", "-u", "postgres", "--", "pg_isready", "-q"]
    return run_in_process(init, probe, timeout=10).returncode == 0


def _redis_answers(host: Host, init: Process) -> bool:
    return run_in_process(init, ["redis-cli", "ping"], timeout=10).stdout.strip() == "PONG"


HEALTH_CHECKS: dict[str, Callable[[Host, Process], bool]] = {
    "ssh": _ssh_answers,
    "nginx": _nginx_answers,
    "postgresql": _postgresql_answers,
    "redis": _redis_answers,
}


def unready_checks(host: Host, init: Process, init_system: str, checks: Sequence[str]) -> list[str]:
    """Names of the failing checks: all of them while the host is still booting."""
    if not booted(host, init, init_system):
        return list(checks)
    return [name for name in checks if not HEALTH_CHECKS[name](host, init)]


def lab_netns() -> list[str]:
    names = (line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip())
    return [name for name in names if name.startswith(NETNS_PREFIX)]


def lab_links() -> list[str]:
    links = []
    for line in ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith(VETH_PREFIX):
            links.append(name)
    return links


def delete_lab_links(timeout: float = 10.0) -> None:
    """Delete the bridge and veths; veths of deleted netns vanish on their own, a bit later."""
    deadline = time.monotonic() + timeout
    while links := lab_links():
        if time.monotonic() > deadline:
            raise LabError(f"network links would not go away: {', '.join(links)}")
        for link in links:
            ip("link", "delete", link, check=False)
        time.sleep(0.05)
