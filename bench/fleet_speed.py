"""What healing costs as the fleet grows: nginx killed on N lab hosts, healed by heal.yml, against the hand-written restart;
and a healthy sweep of the N hosts by heal.yml, against a hand-written status check.

For each N (1, 20, 100 by default), on a lab fleet of N hosts (systemd unless SENTINEL_BENCH_INIT says sysv; no executor on
any, so every host acts the same way):
nginx is killed on every host, then bench/handwritten_restart.yml -f N restarts it; nginx is killed again, then
playbooks/heal.yml -f N heals it with a fresh memory (the runbook path, with its evidence run); then, on the healthy
fleet, bench/handwritten_check.yml -f N and playbooks/heal.yml -f N (which finds nothing to heal). All run in this
process, interleaved, on the same hosts, BENCH_ROUNDS times. Prints per N the medians, heal.yml's ratios to the
hand-written playbooks (targets 1.5x healing, 1.1x sweeping), heal.yml's time against its own time at the first N, the
peak memory of the controller's processes (ansible-playbook and everything it started, RSS summed, sampled every
50 ms) and the memory of a lab host (the median PSS of its processes, once the fleet is up).
Run as root: `make bench`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

import fleet  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SIZES = tuple(int(n) for n in os.environ.get("BENCH_FLEET_SIZES", "1,20,100").split(","))
INIT = os.environ.get("SENTINEL_BENCH_INIT", fleet.DEFAULT_INIT)
# 100 lab hosts share the machine's cores with the controller: sudo on a host may take longer than Ansible's 10 s
# connection timeout to answer, the same for the hand-written playbooks and heal.yml
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           ANSIBLE_TIMEOUT=os.environ.get("ANSIBLE_TIMEOUT", "60"))
PAGE = os.sysconf("SC_PAGE_SIZE")
TARGET = 1.5
SWEEP_TARGET = 1.1
# seconds a fleet of N hosts may take to come up: systemd boots N at once on the machine's cores
BOOT_S_PER_HOST = 3.0


def inventory(directory: Path, count: int) -> Path:
    """The lab inventory for node1..nodeN: inventories/lab's variables and group_vars, every host of the fleet."""
    lab = yaml.safe_load((ROOT / "inventories" / "lab" / "hosts.yml").read_text())["lab"]
    variables = dict(lab["vars"], ansible_ssh_private_key_file=str(fleet.STATE_DIR / "ssh" / "id_ed25519"))
    hosts = {name: {"ansible_host": fleet.address(name)} for name in fleet.host_names(count)}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump({"lab": {"hosts": hosts, "vars": variables}}))
    (directory / "group_vars").symlink_to(ROOT / "inventories" / "lab" / "group_vars")
    return directory


class PeakMemory:
    """The largest sum of RSS over a process and its descendants, sampled while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            self.peak = max(self.peak, sum(_rss(pid) for pid in _tree(self.pid)))


def _tree(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def timed_playbook(playbook: str, hosts: Path, count: int, *args: str) -> tuple[float, int]:
    """Seconds and peak controller memory (bytes) of one ansible-playbook run with -f count."""
    started = time.perf_counter()
    proc = subprocess.Popen(["ansible-playbook", playbook, "-i", str(hosts), "-f", str(count), *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = PeakMemory(proc.pid)
    output = proc.communicate()[0]
    peak = memory.stop()
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{playbook} -f {count} failed ({proc.returncode}):\n{output}")
    return elapsed, peak


def break_nginx(count: int) -> None:
    for name in fleet.host_names(count):
        fleet.inject(name, "nginx-killed")


def nginx_healthy_everywhere(count: int) -> bool:
    return all(fleet.run_in(name, ["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1/"]).returncode == 0 for name in fleet.host_names(count))


def measure(count: int, rounds: int, workdir: Path) -> dict[str, float]:
    """Medians for one fleet size, on a fleet of `count` hosts that is up and healthy; leaves it healthy."""
    hosts = inventory(workdir / f"inventory-{count}", count)
    timed_playbook("bench/handwritten_restart.yml", hosts, count, *fleet.AS_ADMIN)  # warm ssh control masters
    restart, heal, restart_memory, heal_memory, check, sweep = [], [], [], [], [], []
    for round_number in range(rounds):
        check.append(timed_playbook("bench/handwritten_check.yml", hosts, count, *fleet.AS_ADMIN)[0])
        sweep.append(timed_playbook("playbooks/heal.yml", hosts, count, "-e", f"autoheal_state_dir={workdir / f'sweep-{count}'}")[0])
        break_nginx(count)
        seconds, peak = timed_playbook("bench/handwritten_restart.yml", hosts, count, *fleet.AS_ADMIN)
        restart.append(seconds)
        restart_memory.append(peak)
        assert nginx_healthy_everywhere(count)
        break_nginx(count)
        state = workdir / f"state-{count}-{round_number}"
        seconds, peak = timed_playbook("playbooks/heal.yml", hosts, count, "-e", f"autoheal_state_dir={state}")
        heal.append(seconds)
        heal_memory.append(peak)
        assert nginx_healthy_everywhere(count)
    return {"restart": statistics.median(restart), "heal": statistics.median(heal), "check": statistics.median(check),
            "sweep": statistics.median(sweep), "restart_mib": max(restart_memory) / 2**20, "heal_mib": max(heal_memory) / 2**20}


def report(results: dict[int, dict[str, float]], rounds: int) -> list[str]:
    first = results[min(results)]["heal"]
    lines = [
        f"nginx killed on N lab hosts ({INIT}), healed with -f N; medians of {rounds} interleaved rounds; peak = controller RSS; "
        "host = PSS of a lab host's processes",
        f"| N | hand-written restart | heal.yml | ratio | heal vs heal at N={min(results)} | hand-written check | heal.yml sweep | ratio "
        "| peak memory, restart / heal | host |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for count, r in sorted(results.items()):
        ratio, sweep_ratio = r["heal"] / r["restart"], r["sweep"] / r["check"]
        lines.append(f"| {count} | {r['restart']:.1f} s | {r['heal']:.1f} s | {ratio:.2f}x ({_verdict(ratio, TARGET)}) | "
                     f"{r['heal'] / first:.1f}x | {r['check']:.1f} s | {r['sweep']:.1f} s | {sweep_ratio:.2f}x "
                     f"({_verdict(sweep_ratio, SWEEP_TARGET)}) | {r['restart_mib']:.0f} / {r['heal_mib']:.0f} MiB | {r['host_mib']:.0f} MiB |")
    return lines


def _verdict(ratio: float, target: float) -> str:
    return f"{'met' if ratio <= target else 'MISSED'} <= {target}x"


def run(sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS) -> list[str]:
    """Boot a fleet per size, measure, and tear it down; the caller brings back the fleet it wants."""
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-fleet-bench-"))
    results = {}
    try:
        for count in sizes:
            fleet.down()
            hosts = fleet.up(count=count, init=INIT, timeout=max(120.0, BOOT_S_PER_HOST * count), executor=False)
            time.sleep(2)  # let start-up work settle before memory is read
            host_mib = statistics.median(fleet.host_pss_mib(host) for host in hosts)
            results[count] = dict(measure(count, rounds, workdir), host_mib=host_mib)
            print(f"N={count}: {results[count]}", file=sys.stderr, flush=True)  # what a later size's failure leaves
    finally:
        fleet.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return report(results, rounds)


if __name__ == "__main__":
    print("\n".join(run()))
