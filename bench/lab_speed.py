"""What a lab host costs with systemd as PID 1, against the same fleet booting sysv (tini), in one run.

For each init, interleaved over rounds: `fleet.up` of 3 hosts from nothing (the image cached) until
every host is ready (systemd: `is-system-running` says running; both: sshd, nginx, postgresql and
redis answer; the executor is not installed), then the memory of each host: the PSS of every process in its network namespace.
Prints medians and the systemd/sysv ratios. Run as root: `make bench`; it leaves the default fleet down.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

import fleet  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
HOSTS = 3


def boot(init: str) -> tuple[float, float]:
    """Seconds until a fresh fleet of `init` hosts is ready, and the median PSS per host."""
    fleet.down()
    started = time.monotonic()
    hosts = fleet.up(HOSTS, init=init, executor=False)
    elapsed = time.monotonic() - started
    time.sleep(2)  # let start-up work settle before memory is read
    memory = statistics.median(fleet.host_pss_mib(host) for host in hosts)
    return elapsed, memory


def measure(rounds: int = ROUNDS) -> list[str]:
    fleet.build_image()
    results: dict[str, list[tuple[float, float]]] = {"sysv": [], "systemd": []}
    try:
        for _round in range(rounds):
            for init in results:
                results[init].append(boot(init))
    finally:
        fleet.down()
    seconds = {init: statistics.median(r[0] for r in runs) for init, runs in results.items()}
    memory = {init: statistics.median(r[1] for r in runs) for init, runs in results.items()}
    return [
        f"lab fleet of {HOSTS} hosts, {rounds} interleaved rounds (medians)",
        f"  up, sysv (tini) hosts (baseline)   {seconds['sysv']:6.1f} s   {memory['sysv']:6.1f} MiB PSS per host",
        f"  up, systemd hosts                  {seconds['systemd']:6.1f} s   {memory['systemd']:6.1f} MiB PSS per host"
        f"   ({seconds['systemd'] / seconds['sysv']:.2f}x the time, {memory['systemd'] / memory['sysv']:.2f}x the memory)",
    ]


if __name__ == "__main__":
    print("\n".join(measure()))
