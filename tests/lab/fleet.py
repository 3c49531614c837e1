"""Lab fleet: real Debian hosts on this machine, without Docker.

Each host is a network namespace on the bridge sentinelbr0 plus private mount,
pid, uts and ipc namespaces whose root is an overlayfs copy-on-write layer over
a golden debootstrap image. Its PID 1 is one of two inits (per host; systemd
unless asked):

* sysv: tini runs /usr/local/sbin/lab-init, which starts nginx, postgresql and
  redis-server through their sysv init scripts and then becomes sshd;
* systemd: systemd 252 boots the image as production hosts do (units, the
  journal, start limits, Restart=), in its own cgroup namespace whose root is a
  cgroup of the host machine's own (removed again by `down`).

Ansible reaches the hosts as user `sentinel`. Once up, the hosts of inventories/lab's group `executor` get
sentinel.heal's executor (playbooks/host.yml), which judges every step of a heal again on the host.

Usable as a CLI (see `fleet.py --help`) and as a module for pytest. Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TextIO, TypedDict

LAB_DIR = Path(__file__).resolve().parent
FAULTS_DIR = LAB_DIR / "faults"
STATE_DIR = LAB_DIR / ".state"
STATE_FILE = STATE_DIR / "fleet.json"
SSH_KEY = STATE_DIR / "ssh" / "id_ed25519"
# the key of the person approving plans in the lab (the executor checks their signature), not the controller's
APPROVER_KEY = STATE_DIR / "approver" / "id_ed25519"
COLLECTION_ROOT = LAB_DIR.parents[1]

# Debian releases a host can boot: the lab's default, and the stable release after it
SUITES = ("bookworm", "trixie")
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_CACHE = "/var/cache/sentinel-heal-lab"
# Ansible's options to reach the hosts as the lab's operator (root by sudo) rather than the healing account, whose one
# sudo rule on the hosts of the group executor is the executor: to apply the host role, or to heal the controller's way.
AS_ADMIN = ("-e", "ansible_user=admin")
PACKAGES = (
    "openssh-server",
    "sudo",
    "python3",
    "python3-apt",
    # a virtualenv on a host (ensurepip), for the collection installed on the host it heals over the local connection
    "python3-venv",
    "tini",
    "iproute2",
    "procps",
    "curl",
    "nginx-light",
    "postgresql",
    "redis-server",
    # kinds of services no runbook names, off at boot (a test starts them): a second web server, a second SQL database,
    # a cache, and a proxy in front of a backend (haproxy on :8080 to apache2 on :8081)
    "apache2",
    "mariadb-server",
    "memcached",
    "haproxy",
    # systemd as PID 1 of a systemd host; a sysv host keeps it installed and never starts it
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
)
INITS = ("sysv", "systemd")
DEFAULT_INIT = "systemd"
# Each systemd host's cgroup, below every cgroup hierarchy systemd uses (the unified one, and on a host
# machine in hybrid mode the named `systemd` one too); `down` removes them, deepest first.
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "sentinel-lab"

BRIDGE = "sentinelbr0"
GATEWAY = "10.77.0.1"
PREFIX_LENGTH = 24
FIRST_HOST_OCTET = 11
# node1..node200 are 10.77.0.11..10.77.0.210 in the bridge's /24
MAX_HOSTS = 200
NETNS_PREFIX = "sentinel-node"
VETH_PREFIX = "shv-node"
DEFAULT_COUNT = 3

# Hosts started by this Python process, so teardown can reap them instead of leaving zombies.
_LAUNCHED: dict[int, subprocess.Popen[bytes]] = {}

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

# Runs inside the image (chroot, private mount+pid namespaces) after debootstrap.
# Part of the image hash: editing it rebuilds the image.
CONFIGURE_IMAGE = r"""
set -eu
mount -t proc proc /proc
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
trap 'umount /dev/shm /proc' EXIT

# the release's PostgreSQL (15 on bookworm, 17 on trixie)
postgresql_version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
if [ ! -e "/var/lib/postgresql/$postgresql_version/main/PG_VERSION" ]; then
    # A failed creation can leave the config behind, which blocks pg_createcluster.
    pg_dropcluster "$postgresql_version" main 2>/dev/null || true
    pg_createcluster "$postgresql_version" main
fi

if ! id sentinel >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash sentinel
fi
# sshd refuses locked ("!") accounts when PAM is off; "*" only means "no password".
usermod --password '*' sentinel
echo 'sentinel ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/sentinel
chmod 0440 /etc/sudoers.d/sentinel
# The lab's operator: applies the host role and acts as root where a test does it the controller's way. On the hosts
# with the executor the healing account's broad rule goes (fleet.py up), so the executor is its only rule there.
if ! id admin >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash admin
fi
usermod --password '*' admin
echo 'admin ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/admin
chmod 0440 /etc/sudoers.d/admin

cat > /etc/ssh/sshd_config.d/lab.conf <<'EOF'
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
ssh-keygen -A

# Hosts have no network out: with no nameserver lookups fail at once instead of timing out.
: > /etc/resolv.conf

cat > /usr/local/sbin/lab-init <<'EOF'
#!/bin/sh
# Boot script of a lab host; tini (PID 1) runs it. /run is a fresh tmpfs.
install -d -m 0755 /run/sshd
install -d -m 1777 /run/lock
for service in nginx postgresql redis-server; do
    service "$service" start || echo "lab-init: $service did not start" >&2
done
exec /usr/sbin/sshd -D -e
EOF
chmod 0755 /usr/local/sbin/lab-init

# The services off at boot: apache2 behind haproxy, off nginx's port 80 and its page (apache2 installs an index.html
# where nginx's default site looks first).
sed -i 's/^Listen 80$/Listen 8081/' /etc/apache2/ports.conf
sed -i -e 's/<VirtualHost \*:80>/<VirtualHost *:8081>/' -e 's#DocumentRoot /var/www/html#DocumentRoot /var/www/apache2#' \
    /etc/apache2/sites-available/000-default.conf
if [ -e /var/www/html/index.html ]; then
    install -d /var/www/apache2
    mv /var/www/html/index.html /var/www/apache2/index.html
fi
if ! grep -q '^frontend storefront' /etc/haproxy/haproxy.cfg; then
    cat >> /etc/haproxy/haproxy.cfg <<'EOF'

frontend storefront
    bind :8080
    default_backend web

backend web
    server apache2 127.0.0.1:8081
EOF
fi
systemctl disable apache2.service mariadb.service memcached.service haproxy.service

# systemd hosts: no timers that rotate, clean or upgrade behind a test's back, no consoles to log in on
systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer \
    logrotate.timer console-getty.service getty@tty1.service systemd-timesyncd.service

rm -f /usr/sbin/policy-rc.d
apt-get clean
"""

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


class LabError(Exception):
    """The lab cannot do what was asked; the message says why."""


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


@dataclass(frozen=True)
class Process:
    """A PID plus its start time, so a recycled PID is never mistaken for ours."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> Process | None:
        stat = _read_stat(pid)
        return None if stat is None else cls(pid, stat[1])

    def running(self) -> bool:
        stat = _read_stat(self.pid)
        return stat is not None and stat[1] == self.start_time and stat[0] not in "ZX"


class HostRecord(TypedDict):
    """A host's processes in fleet.json, each as [pid, start time], its init system and its Debian release."""

    unshare: list[int]
    init: list[int]
    init_system: str
    suite: str


class FleetState(TypedDict):
    hosts: dict[str, HostRecord]
    executor: NotRequired[bool]  # installed on the executor hosts by up()


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    up: bool
    pid: int | None
    problems: tuple[str, ...]
    init_system: str = DEFAULT_INIT
    suite: str = DEFAULT_SUITE


def host_names(count: int = DEFAULT_COUNT) -> list[str]:
    return [f"node{index}" for index in range(1, count + 1)]


def address(name: str) -> str:
    """IP address of a lab host: node1 is 10.77.0.11, node2 10.77.0.12, ..."""
    index = int(name.removeprefix("node"))
    return f"10.77.0.{FIRST_HOST_OCTET + index - 1}"


HOSTS = tuple(host_names())


def cache_dir() -> Path:
    return Path(os.environ.get("SENTINEL_LAB_CACHE", DEFAULT_CACHE))


def image_dir(suite: str = DEFAULT_SUITE) -> Path:
    recipe = json.dumps([suite, "minbase", PACKAGES, CONFIGURE_IMAGE])
    return cache_dir() / f"image-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


# ---------------------------------------------------------------- public API


def build_image(suite: str = DEFAULT_SUITE) -> Path:
    """Build the golden image of a Debian release unless it exists; return its root directory."""
    _per_host("suite", {}, suite, SUITES, [])
    _require_root_and_tools()
    with _lab_lock():
        return _ensure_image(suite)


def up(count: int = DEFAULT_COUNT, timeout: float = 60.0, init: str = DEFAULT_INIT, inits: dict[str, str] | None = None,
       suite: str = DEFAULT_SUITE, suites: dict[str, str] | None = None, executor: bool = True) -> list[Host]:
    """Start `count` hosts and return once their init is up and sshd and every service answer. Every host
    boots `init` (sysv or systemd) of Debian's `suite` (bookworm or trixie) unless `inits` or `suites` name
    another for it. `executor`: install the executor on the inventory's executor hosts (False: hosts as booted,
    for what measures the boot alone); a fleet already running as wanted is kept only if it has what is asked."""
    if not 1 <= count <= MAX_HOSTS:
        raise LabError(f"count must be between 1 and {MAX_HOSTS}, not {count}")
    hosts = [Host(name, address(name)) for name in host_names(count)]
    wanted_inits = _per_host("init", inits or {}, init, INITS, hosts)
    wanted_suites = _per_host("suite", suites or {}, suite, SUITES, hosts)
    _require_root_and_tools()
    with _lab_lock():
        recorded = _load_state()
        booted_as_wanted = all(_init_system(recorded, name) == wanted_inits[name] and _suite(recorded, name) == wanted_suites[name]
                               for name in wanted_inits)
        if booted_as_wanted and recorded.get("executor", False) >= executor and _fleet_running(recorded, hosts):
            return hosts
        _teardown(recorded)
        images = {suite_name: _ensure_image(suite_name) for suite_name in sorted(set(wanted_suites.values()))}
        public_key = _ensure_ssh_key()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state: FleetState = {"hosts": {}}
        _raise_inotify_instances(sum(init_system == "systemd" for init_system in wanted_inits.values()))
        _create_bridge()
        for host in hosts:
            image = images[wanted_suites[host.name]]
            _create_host_network(host)
            _prepare_host_layer(host, image, public_key, hosts)
            state["hosts"][host.name] = _start_host(host, image, wanted_inits[host.name], wanted_suites[host.name])
            _save_state(state)
        _wait_until_ready(hosts, state, timeout)
    if executor:
        _install_executor(hosts)
        with _lab_lock():  # a fleet whose install failed is booted again by the next up, not taken as it is
            installed = _load_state()
            installed["executor"] = True
            _save_state(installed)
    return hosts


def _per_host(setting: str, per_host: dict[str, str], every: str, choices: Sequence[str], hosts: list[Host]) -> dict[str, str]:
    """Each host's value of a setting (its init, its release): `every`, unless `per_host` names another for it."""
    names = [host.name for host in hosts]
    for name, value in [*per_host.items(), ("(all)", every)]:
        if name != "(all)" and name not in names:
            raise LabError(f"{setting} for {name!r}: the fleet has {', '.join(names)}")
        if value not in choices:
            raise LabError(f"{setting} for {name}: {value!r} is not one of {', '.join(choices)}")
    return {name: per_host.get(name, every) for name in names}


def copy_inventory(directory: Path, checkout: str = str(COLLECTION_ROOT)) -> Path:
    """inventories/lab in ``directory``, its hosts and group_vars, with the paths it takes from this checkout (the SSH
    key, the lab approver's key) made absolute, so that the copy works wherever it is; ``checkout`` is where those
    paths start (where a container sees them, when its job reads the copy)."""
    source = COLLECTION_ROOT / "inventories" / "lab"
    for path in [source / "hosts.yml", *sorted((source / "group_vars").glob("*.yml"))]:
        target = directory / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text().replace("{{ inventory_dir }}/../..", checkout))
    return directory


@contextlib.contextmanager
def fresh(**up_options: Any) -> Iterator[list[Host]]:
    """A fleet started from nothing (one left running may carry faults) and taken down afterwards, also on failure."""
    down()
    try:
        yield up(**up_options)
    finally:
        down()


def _install_executor(hosts: list[Host]) -> None:
    """Apply sentinel.heal.host to the hosts of the lab inventory's group `executor` that this fleet has, the
    healing account's broad sudo rule removed first (tests/lab/executor.yml), as the lab's operator."""
    if not APPROVER_KEY.exists():
        APPROVER_KEY.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sentinel-heal-lab-approver", "-f", str(APPROVER_KEY)], check=True)
    # the running Python's (a virtualenv's), else the checkout's own (make setup), for `sudo python3 fleet.py up`
    searched = os.pathsep.join([str(Path(sys.executable).parent), str(COLLECTION_ROOT / ".venv" / "bin"), SYSTEM_ENV["PATH"]])
    playbook = shutil.which("ansible-playbook", path=searched)
    if playbook is None:
        raise LabError("ansible-playbook is not installed: run `make setup` (the lab installs the executor on its hosts)")
    environment = dict(SYSTEM_ENV, ANSIBLE_CONFIG=str(COLLECTION_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                       PATH=f"{Path(playbook).parent}{os.pathsep}{SYSTEM_ENV['PATH']}")
    proc = subprocess.run(
        [playbook, "tests/lab/executor.yml", "-i", "inventories/lab", "-e", "autoheal_target=executor", *AS_ADMIN,
         "--limit", ",".join(host.name for host in hosts)],
        cwd=COLLECTION_ROOT, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )
    if proc.returncode != 0:
        raise LabError(f"installing the executor (playbooks/host.yml) failed with {proc.returncode}:\n{proc.stdout}{proc.stderr}")


# Every systemd (PID 1, journald, logind, udev-less path units) holds inotify instances, counted per user (root) across
# the whole machine: with the kernel's default of 128, the 15th or so host fails its path units.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_INSTANCES_PER_SYSTEMD_HOST = 32


def _raise_inotify_instances(systemd_hosts: int) -> None:
    """Raise the machine's fs.inotify.max_user_instances to what the systemd hosts need (never lower it)."""
    needed = 128 + INOTIFY_INSTANCES_PER_SYSTEMD_HOST * systemd_hosts
    if int(INOTIFY_INSTANCES.read_text()) < needed:
        INOTIFY_INSTANCES.write_text(f"{needed}\n")


def down() -> None:
    """Remove every trace of the fleet; safe after a crash, a partial up, or twice."""
    _require_root_and_tools()
    with _lab_lock():
        _teardown(_load_state())


def host_pss_mib(host: Host) -> float:
    """Proportional set size of every process of a host (its network namespace), in MiB: shared pages split between
    sharers."""
    total_kib = 0
    for pid in _ip("netns", "pids", host.netns).stdout.split():
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # gone meanwhile
        total_kib += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total_kib / 1024


def status() -> list[HostStatus]:
    """State of each recorded host (or of the default hosts when none is recorded)."""
    _require_root()
    state = _load_state()
    names = list(state["hosts"]) or host_names()
    statuses = []
    for name in names:
        host = Host(name, address(name))
        init = _recorded_init(state, name)
        init_system = _init_system(state, name)
        suite = _suite(state, name)
        if init is None:
            statuses.append(HostStatus(name, host.address, False, None, (), init_system, suite))
        else:
            try:
                problems = tuple(_unready_checks(host, init, init_system, list(HEALTH_CHECKS)))
            except LabError as error:
                problems = (str(error),)
            statuses.append(HostStatus(name, host.address, True, init.pid, problems, init_system, suite))
    return statuses


def run_in(
    host: str,
    argv: Sequence[str],
    *,
    input_text: str | None = None,
    capture: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv as root inside a running host; the result holds rc and output."""
    _require_root()
    init = _recorded_init(_load_state(), host)
    if init is None:
        raise LabError(f"{host} is not running (fleet.py up)")
    return _run_in_process(init, argv, input_text=input_text, capture=capture, timeout=timeout)


def cut_link(host: str, cut: bool = True) -> None:
    """Cut a host's network link, as a pulled cable (its packets are dropped, nothing is refused), or plug it back."""
    _require_root()
    _ip("link", "set", Host(host, address(host)).veth, "down" if cut else "up")


def list_faults() -> dict[str, str]:
    """Fault name -> one-line summary, from the scripts in tests/lab/faults/."""
    faults = {}
    for script in sorted(FAULTS_DIR.glob("[!_]*.sh")):
        summary_lines = [line for line in script.read_text().splitlines() if line.startswith("# ")]
        faults[script.stem] = summary_lines[0].removeprefix("# ") if summary_lines else ""
    return faults


def inject(host: str, fault: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Break a host with a fault script (a fault of a class takes the service and what it breaks of it as
    `arguments`); raises LabError when the break did not take."""
    return _run_fault(host, fault, "break", arguments)


def undo(host: str, fault: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Repair what `inject` broke (given the same `arguments`); a no-op on a healthy host."""
    return _run_fault(host, fault, "undo", arguments)


# ------------------------------------------------------------ preconditions


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (namespaces, mounts, bridges): run it with sudo")


def _require_root_and_tools() -> None:
    _require_root()
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        packages = sorted({REQUIRED_TOOLS[tool] for tool in missing})
        raise LabError(f"missing tools: {', '.join(missing)}; install with: apt-get install {' '.join(packages)}")


@contextlib.contextmanager
def _lab_lock() -> Iterator[None]:
    """One image build / up / down at a time on this machine: they share the bridge and IPs."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lab.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


# -------------------------------------------------------------------- image


def _ensure_image(suite: str) -> Path:
    final = image_dir(suite)
    if (final / "complete").exists():
        return final / "rootfs"
    _remove_abandoned_builds()
    mirror = os.environ.get("SENTINEL_LAB_MIRROR", DEFAULT_MIRROR)
    build = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache_dir()))
    rootfs = build / "rootfs"
    log_path = build / "build.log"
    print(f"building lab image {final.name} of {suite} from {mirror} (about two minutes)...", file=sys.stderr)
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            _build_step(log, ["debootstrap", "--foreign", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(rootfs), mirror])
            policy = rootfs / "usr/sbin/policy-rc.d"
            policy.write_text("#!/bin/sh\n# The image build must not start services.\nexit 101\n")
            policy.chmod(0o755)
            _build_step(log, _in_build_namespace(rootfs, ["/debootstrap/debootstrap", "--second-stage"]))
            _build_step(log, _in_build_namespace(rootfs, ["/bin/sh", "-c", CONFIGURE_IMAGE]))
    except subprocess.CalledProcessError as error:
        raise LabError(f"image build failed ({error.cmd[0]}); see {log_path}") from error
    finally:
        _kill_and_wait(_processes_rooted_under(rootfs))
        _unmount_under(build)
    elapsed = time.monotonic() - started
    (build / "complete").write_text(json.dumps({"suite": suite, "packages": PACKAGES, "seconds": round(elapsed, 1)}) + "\n")
    build.chmod(0o755)
    os.rename(build, final)
    print(f"lab image of {suite} built in {elapsed:.0f} s: {final}", file=sys.stderr)
    return final / "rootfs"


def _remove_abandoned_builds() -> None:
    for leftover in cache_dir().glob(".image-*"):
        _kill_and_wait(_processes_rooted_under(leftover))
        _unmount_under(leftover)
        shutil.rmtree(leftover)


def _in_build_namespace(rootfs: Path, argv: list[str]) -> list[str]:
    """Command that runs argv chrooted in rootfs; its mounts and processes die with it."""
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "--", "chroot", str(rootfs), *argv]


def _build_step(log: TextIO, argv: list[str]) -> None:
    env = SYSTEM_ENV | {"DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)


# -------------------------------------------------------------------- hosts


def _ensure_ssh_key() -> str:
    if not SSH_KEY.exists():
        SSH_KEY.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sentinel-heal-lab", "-f", str(SSH_KEY)], check=True)
    return SSH_KEY.with_suffix(".pub").read_text()


def _create_bridge() -> None:
    if _link_exists(BRIDGE):
        return
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/{PREFIX_LENGTH}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def _create_host_network(host: Host) -> None:
    _ip("netns", "add", host.netns)
    _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
    _ip("link", "set", host.veth, "master", BRIDGE, "up")
    _ip("-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LENGTH}", "dev", "eth0")
    _ip("-n", host.netns, "link", "set", "eth0", "up")
    _ip("-n", host.netns, "link", "set", "lo", "up")
    _ip("-n", host.netns, "route", "add", "default", "via", GATEWAY)


def _prepare_host_layer(host: Host, image: Path, public_key: str, fleet: list[Host]) -> None:
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


def _start_host(host: Host, image: Path, init_system: str, suite: str) -> HostRecord:
    namespaces = ["unshare", "--mount", "--pid", "--uts", "--ipc", "--fork", "--kill-child", "--propagation", "private"]
    cgroups = _host_cgroups(host) if init_system == "systemd" else []
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
    _LAUNCHED[launched.pid] = launched
    unshare = Process.of(launched.pid)
    init = _wait_for_child(launched.pid)
    if unshare is None or init is None:
        raise LabError(f"{host.name} did not start; see {host.console_log}")
    return {"unshare": [unshare.pid, unshare.start_time], "init": [init.pid, init.start_time], "init_system": init_system, "suite": suite}


def _host_cgroups(host: Host) -> list[Path]:
    """The host's cgroup in each hierarchy systemd uses: cgroup2 alone, or in hybrid mode its unified and named ones."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / CGROUP_PARENT / host.name]
    return [CGROUP_ROOT / tree / CGROUP_PARENT / host.name for tree in ("unified", "systemd") if (CGROUP_ROOT / tree).is_dir()]


def _lab_cgroups() -> list[Path]:
    """Every cgroup directory the lab made, deepest first (systemd makes its own below each host's)."""
    parents = [CGROUP_ROOT / CGROUP_PARENT] + [CGROUP_ROOT / tree / CGROUP_PARENT for tree in ("unified", "systemd")]
    found = [path for parent in parents if parent.is_dir() for path in [parent, *parent.rglob("*")] if path.is_dir()]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def _wait_for_child(pid: int, timeout: float = 5.0) -> Process | None:
    children_file = Path(f"/proc/{pid}/task/{pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = children_file.read_text().split()
            if children:
                return Process.of(int(children[0]))
        time.sleep(0.01)
    return None


def _booted(host: Host, init: Process, init_system: str) -> bool:
    """True once PID 1 of the host is the host's init: tini chrooted into the host's root, or systemd with
    every unit started (after pivot_root, /proc/PID/root no longer names the host's root, so ask systemd).
    Raises LabError naming the failed units when systemd will not get there."""
    if init_system == "systemd":
        state = _run_in_process(init, ["systemctl", "is-system-running"], timeout=10).stdout.strip()
        if state == "degraded":
            failed = _run_in_process(init, ["systemctl", "--failed", "--plain", "--no-legend"], timeout=10).stdout.split()
            raise LabError(f"{host.name}: systemd is degraded, failed units: {' '.join(unit for unit in failed if '.' in unit)}")
        return state == "running"
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{init.pid}/root") == str(host.rootfs)
    return False


def _run_in_process(
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


def _run_fault(host: str, fault: str, action: str, arguments: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    if fault not in list_faults():
        raise LabError(f"unknown fault {fault!r}; known: {', '.join(list_faults())}")
    script = (FAULTS_DIR / "_lib.sh").read_text() + (FAULTS_DIR / f"{fault}.sh").read_text()
    result = run_in(host, ["sh", "-s", "--", action, *arguments], input_text=script, timeout=120)
    if result.returncode != 0:
        named = " ".join([fault, *arguments])
        raise LabError(f"{named} {action} on {host} failed (rc {result.returncode}):\n{result.stdout}{result.stderr}")
    return result


# ------------------------------------------------------------------- health


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
    return _run_in_process(init, probe, timeout=10).returncode == 0


def _redis_answers(host: Host, init: Process) -> bool:
    return _run_in_process(init, ["redis-cli", "ping"], timeout=10).stdout.strip() == "PONG"


HEALTH_CHECKS: dict[str, Callable[[Host, Process], bool]] = {
    "ssh": _ssh_answers,
    "nginx": _nginx_answers,
    "postgresql": _postgresql_answers,
    "redis": _redis_answers,
}


def _unready_checks(host: Host, init: Process, init_system: str, checks: Sequence[str]) -> list[str]:
    """Names of the failing checks: all of them while the host is still booting."""
    if not _booted(host, init, init_system):
        return list(checks)
    return [name for name in checks if not HEALTH_CHECKS[name](host, init)]


def _wait_until_ready(hosts: list[Host], state: FleetState, timeout: float) -> None:
    pending = {host: list(HEALTH_CHECKS) for host in hosts}
    deadline = time.monotonic() + timeout
    while True:
        for host in list(pending):
            init = _recorded_init(state, host.name)
            if init is None:
                raise LabError(f"{host.name} died while booting; see {host.console_log}")
            pending[host] = _unready_checks(host, init, _init_system(state, host.name), pending[host])
            if not pending[host]:
                del pending[host]
        if not pending:
            return
        if time.monotonic() > deadline:
            waiting = "; ".join(f"{host.name}: {', '.join(checks)}" for host, checks in pending.items())
            raise LabError(f"hosts not ready after {timeout:.0f} s ({waiting}); see tests/lab/.state/hosts/*/console.log, then run fleet.py down")
        time.sleep(0.1)


# ----------------------------------------------------------------- teardown


def _teardown(state: FleetState) -> None:
    recorded = [Process(*process) for host_state in state["hosts"].values() for process in (host_state["init"], host_state["unshare"])]
    stray_netns = _lab_netns()
    victims = {process.pid for process in recorded if process.running()}
    for netns in stray_netns:
        victims |= {int(pid) for pid in _ip("netns", "pids", netns).stdout.split()}
    victims |= _processes_rooted_under(STATE_DIR)
    victims |= {int(pid) for cgroup in _lab_cgroups() for pid in _read_lines(cgroup / "cgroup.procs")}
    _kill_and_wait(victims)
    for cgroup in _lab_cgroups():
        cgroup.rmdir()
    for netns in stray_netns:
        _ip("netns", "delete", netns)
    _delete_lab_links()
    for launched in _LAUNCHED.values():
        launched.wait()
    _LAUNCHED.clear()
    _unmount_under(STATE_DIR)
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)


def _delete_lab_links(timeout: float = 10.0) -> None:
    """Delete the bridge and veths; veths of deleted netns vanish on their own, a bit later."""
    deadline = time.monotonic() + timeout
    while links := _lab_links():
        if time.monotonic() > deadline:
            raise LabError(f"network links would not go away: {', '.join(links)}")
        for link in links:
            _ip("link", "delete", link, check=False)
        time.sleep(0.05)


def _kill_and_wait(pids: set[int], timeout: float = 15.0) -> None:
    """SIGKILL by PID, pid-namespace inits first.

    Killing a namespace's PID 1 makes the kernel kill the whole namespace, and
    the unshare process above it then reaps it and exits on its own. Killing
    that unshare at the same time would leave the init as an orphaned zombie.
    """
    namespace_inits = {pid for pid in pids if _is_namespace_init(pid)}
    if namespace_inits:
        _kill(namespace_inits)
        _wait_for_exit(pids, timeout=2.0)
    _kill(_still_running(pids))
    survivors = _wait_for_exit(pids, timeout)
    if survivors:
        raise LabError(f"processes did not exit after SIGKILL: {sorted(survivors)}")


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_for_exit(pids: set[int], timeout: float) -> set[int]:
    """Wait until the processes are gone or zombies; return those still running."""
    deadline = time.monotonic() + timeout
    while (running := _still_running(pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return running


def _still_running(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (stat := _read_stat(pid)) is not None and stat[0] not in "ZX"}


def _is_namespace_init(pid: int) -> bool:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                namespace_pids = line.split()[1:]
                return len(namespace_pids) > 1 and namespace_pids[-1] == "1"
    return False


def _processes_rooted_under(directory: Path) -> set[int]:
    prefix = f"{directory}/"
    rooted = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if f"{os.readlink(entry / 'root')}/".startswith(prefix):
                    rooted.add(int(entry.name))
    return rooted


def _unmount_under(directory: Path) -> None:
    for mount_point in sorted(_mounts_under(directory), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount_point], check=True)


def _mounts_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    mount_points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = _unescape_mountinfo(line.split()[4])
        if f"{mount_point}/".startswith(prefix):
            mount_points.append(mount_point)
    return mount_points


def _unescape_mountinfo(field: str) -> str:
    """Mount points in mountinfo have space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape[1], 8)), field)


def _lab_netns() -> list[str]:
    names = (line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip())
    return [name for name in names if name.startswith(NETNS_PREFIX)]


def _lab_links() -> list[str]:
    links = []
    for line in _ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith(VETH_PREFIX):
            links.append(name)
    return links


# -------------------------------------------------------------------- state


def _load_state() -> FleetState:
    try:
        state: FleetState = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {"hosts": {}}
    return state


def _save_state(state: FleetState) -> None:
    temporary = STATE_FILE.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(STATE_FILE)


def _init_system(state: FleetState, name: str) -> str:
    host_state = state["hosts"].get(name)
    return DEFAULT_INIT if host_state is None else host_state.get("init_system", DEFAULT_INIT)


def _suite(state: FleetState, name: str) -> str:
    host_state = state["hosts"].get(name)
    return DEFAULT_SUITE if host_state is None else host_state.get("suite", DEFAULT_SUITE)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _recorded_init(state: FleetState, name: str) -> Process | None:
    """PID 1 of a host if it is still the process the state file recorded."""
    host_state = state["hosts"].get(name)
    if host_state is None:
        return None
    init = Process(*host_state["init"])
    return init if init.running() else None


def _fleet_running(state: FleetState, hosts: list[Host]) -> bool:
    if sorted(state["hosts"]) != sorted(host.name for host in hosts):
        return False
    try:
        return all((init := _recorded_init(state, host.name)) is not None and _booted(host, init, _init_system(state, host.name))
                   for host in hosts)
    except LabError:
        return False  # a degraded host: the fleet is rebuilt


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def _link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name, check=False).returncode == 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


# ---------------------------------------------------------------------- CLI


def _print_status(statuses: list[HostStatus]) -> None:
    print(f"{'HOST':<8}{'STATE':<7}{'INIT':<9}{'RELEASE':<10}{'PID':<9}{'ADDRESS':<13}PROBLEMS")
    for host in statuses:
        problems = ", ".join(host.problems) if host.up else ""
        print(f"{host.name:<8}{'up' if host.up else 'down':<7}{host.init_system:<9}{host.suite:<10}{host.pid or '-'!s:<9}{host.address:<13}"
              f"{problems or '-'}")


def _choices(given: list[str], default: str) -> tuple[str, dict[str, str]]:
    """`--init sysv --init node3=systemd` as (every host's, {host: its own})."""
    every = [choice for choice in given if "=" not in choice]
    return every[-1] if every else default, dict(choice.split("=", 1) for choice in given if "=" in choice)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    image_parser = commands.add_parser("image", help="build the golden image of a release if missing")
    image_parser.add_argument("--suite", default=DEFAULT_SUITE, choices=SUITES)
    up_parser = commands.add_parser("up", help="start the hosts (no-op when already up)")
    up_parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    up_parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for services")
    up_parser.add_argument("--init", action="append", default=[], metavar="[HOST=]INIT",
                           help=f"init of every host, or of one (node3=sysv); one of {', '.join(INITS)}; default {DEFAULT_INIT}")
    up_parser.add_argument("--suite", action="append", default=[], metavar="[HOST=]SUITE",
                           help=f"Debian release of every host, or of one (node3=trixie); one of {', '.join(SUITES)}; default {DEFAULT_SUITE}")
    commands.add_parser("down", help="stop the hosts and remove all lab state")
    commands.add_parser("status", help="show each host")
    exec_parser = commands.add_parser("exec", help="run a command as root inside a host: exec HOST -- CMD...")
    exec_parser.add_argument("host")
    exec_parser.add_argument("argv", nargs=argparse.REMAINDER)
    fault_parser = commands.add_parser("fault", help="break a host (or repair it with --undo)")
    fault_parser.add_argument("host")
    fault_parser.add_argument("fault")
    fault_parser.add_argument("arguments", nargs="*", help="what a fault of a class breaks: its service, port, file, ...")
    fault_parser.add_argument("--undo", action="store_true")
    commands.add_parser("faults", help="list the faults")
    args = parser.parse_args(argv)

    try:
        if args.command == "image":
            print(build_image(args.suite))
        elif args.command == "up":
            started = time.monotonic()
            init, inits = _choices(args.init, DEFAULT_INIT)
            suite, suites = _choices(args.suite, DEFAULT_SUITE)
            hosts = up(args.count, args.timeout, init=init, inits=inits, suite=suite, suites=suites)
            print(f"{len(hosts)} hosts up in {time.monotonic() - started:.1f} s: {', '.join(h.name for h in hosts)}")
        elif args.command == "down":
            down()
        elif args.command == "status":
            _print_status(status())
        elif args.command == "exec":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not command:
                parser.error("exec needs a command: exec HOST -- CMD...")
            return run_in(args.host, command, capture=False).returncode
        elif args.command == "fault":
            result = (undo if args.undo else inject)(args.host, args.fault, *args.arguments)
            print(result.stdout + result.stderr, end="")
        elif args.command == "faults":
            for name, summary in list_faults().items():
                print(f"{name:<20}{summary}")
    except LabError as error:
        print(f"fleet.py: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
