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

Usable as a CLI (see `fleet.py --help`) and as a module for pytest. Needs root. This file is the fleet (its API,
its state, its command line; about 500 lines, one room); what it stands on is beside it: lab_machine.py (this
machine's processes, mounts and links), lab_image.py (the golden images), lab_hosts.py (one host's network, layer,
boot and readiness).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from lab_hosts import (
    HEALTH_CHECKS,
    LAUNCHED,
    Host,
    HostRecord,
    address,
    booted,
    create_bridge,
    create_host_network,
    delete_lab_links,
    lab_cgroups,
    lab_netns,
    prepare_host_layer,
    run_in_process,
    start_host,
    unready_checks,
)
from lab_image import DEFAULT_SUITE, SUITES, ensure_image, lab_lock
from lab_machine import (
    LAB_DIR,
    STATE_DIR,
    SYSTEM_ENV,
    LabError,
    Process,
    ip,
    kill_and_wait,
    processes_rooted_under,
    read_lines,
    require_root,
    require_root_and_tools,
    unmount_under,
)

FAULTS_DIR = LAB_DIR / "faults"
STATE_FILE = STATE_DIR / "fleet.json"
SSH_KEY = STATE_DIR / "ssh" / "id_ed25519"
# the key of the person approving plans in the lab (the executor checks their signature), not the controller's
APPROVER_KEY = STATE_DIR / "approver" / "id_ed25519"
COLLECTION_ROOT = LAB_DIR.parents[1]

# Ansible's options to reach the hosts as the lab's operator (root by sudo) rather than the healing account, whose one
# sudo rule on the hosts of the group executor is the executor: to apply the host role, or to heal the controller's way.
AS_ADMIN = ("-e", "ansible_user=admin")
INITS = ("sysv", "systemd")
DEFAULT_INIT = "systemd"

# node1..node200 are 10.77.0.11..10.77.0.210 in the bridge's /24
MAX_HOSTS = 200
DEFAULT_COUNT = 3


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


HOSTS = tuple(host_names())


# ---------------------------------------------------------------- public API


def build_image(suite: str = DEFAULT_SUITE) -> Path:
    """Build the golden image of a Debian release unless it exists; return its root directory."""
    _per_host("suite", {}, suite, SUITES, [])
    require_root_and_tools()
    with lab_lock():
        return ensure_image(suite)


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
    require_root_and_tools()
    with lab_lock():
        recorded = _load_state()
        booted_as_wanted = all(_init_system(recorded, name) == wanted_inits[name] and _suite(recorded, name) == wanted_suites[name]
                               for name in wanted_inits)
        if booted_as_wanted and recorded.get("executor", False) >= executor and _fleet_running(recorded, hosts):
            return hosts
        _teardown(recorded)
        images = {suite_name: ensure_image(suite_name) for suite_name in sorted(set(wanted_suites.values()))}
        public_key = _ensure_ssh_key()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state: FleetState = {"hosts": {}}
        _raise_inotify_instances(sum(init_system == "systemd" for init_system in wanted_inits.values()))
        create_bridge()
        for host in hosts:
            image = images[wanted_suites[host.name]]
            create_host_network(host)
            prepare_host_layer(host, image, public_key, hosts)
            state["hosts"][host.name] = start_host(host, image, wanted_inits[host.name], wanted_suites[host.name])
            _save_state(state)
        _wait_until_ready(hosts, state, timeout)
    if executor:
        _install_executor(hosts)
        with lab_lock():  # a fleet whose install failed is booted again by the next up, not taken as it is
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
    require_root_and_tools()
    with lab_lock():
        _teardown(_load_state())


def host_pss_mib(host: Host) -> float:
    """Proportional set size of every process of a host (its network namespace), in MiB: shared pages split between
    sharers."""
    total_kib = 0
    for pid in ip("netns", "pids", host.netns).stdout.split():
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # gone meanwhile
        total_kib += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total_kib / 1024


def status() -> list[HostStatus]:
    """State of each recorded host (or of the default hosts when none is recorded)."""
    require_root()
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
                problems = tuple(unready_checks(host, init, init_system, list(HEALTH_CHECKS)))
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
    require_root()
    init = _recorded_init(_load_state(), host)
    if init is None:
        raise LabError(f"{host} is not running (fleet.py up)")
    return run_in_process(init, argv, input_text=input_text, capture=capture, timeout=timeout)


def running() -> list[str]:
    """The recorded hosts whose init is still the process the state file recorded (no health check: cheap)."""
    require_root()
    state = _load_state()
    return [name for name in state["hosts"] if _recorded_init(state, name) is not None]


def cut_link(host: str, cut: bool = True) -> None:
    """Cut a host's network link, as a pulled cable (its packets are dropped, nothing is refused), or plug it back."""
    require_root()
    ip("link", "set", Host(host, address(host)).veth, "down" if cut else "up")


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


# -------------------------------------------------------------------- image


# -------------------------------------------------------------------- hosts


def _ensure_ssh_key() -> str:
    if not SSH_KEY.exists():
        SSH_KEY.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sentinel-heal-lab", "-f", str(SSH_KEY)], check=True)
    return SSH_KEY.with_suffix(".pub").read_text()


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


def _wait_until_ready(hosts: list[Host], state: FleetState, timeout: float) -> None:
    pending = {host: list(HEALTH_CHECKS) for host in hosts}
    deadline = time.monotonic() + timeout
    while True:
        for host in list(pending):
            init = _recorded_init(state, host.name)
            if init is None:
                raise LabError(f"{host.name} died while booting; see {host.console_log}")
            pending[host] = unready_checks(host, init, _init_system(state, host.name), pending[host])
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
    stray_netns = lab_netns()
    victims = {process.pid for process in recorded if process.running()}
    for netns in stray_netns:
        victims |= {int(pid) for pid in ip("netns", "pids", netns).stdout.split()}
    victims |= processes_rooted_under(STATE_DIR)
    victims |= {int(pid) for cgroup in lab_cgroups() for pid in read_lines(cgroup / "cgroup.procs")}
    kill_and_wait(victims)
    for cgroup in lab_cgroups():
        cgroup.rmdir()
    for netns in stray_netns:
        ip("netns", "delete", netns)
    delete_lab_links()
    for launched in LAUNCHED.values():
        launched.wait()
    LAUNCHED.clear()
    unmount_under(STATE_DIR)
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)


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
        return all((init := _recorded_init(state, host.name)) is not None and booted(host, init, _init_system(state, host.name))
                   for host in hosts)
    except LabError:
        return False  # a degraded host: the fleet is rebuilt


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
