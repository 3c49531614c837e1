"""How much the heal loop costs against a hand-written playbook, on the lab fleet.

Both run in this process's loop, interleaved, on the same hosts:
  * healthy sweep: playbooks/heal.yml over the healthy 3-host fleet vs bench/handwritten_check.yml, and the same
    sweep keeping each service's last known good configuration on the host vs with known_good: false (its cost)
  * one heal: nginx killed on node1, playbooks/heal.yml (fresh memory, so the runbook path with
    its evidence run) vs bench/handwritten_restart.yml; the same runbook heal without its settle window
    (autoheal_settle_seconds=0: what the window adds); and heal.yml again with the fix in memory.
  * the same heal from memory with enforcement on the host (every step a request to the executor that
    the lab installed on node1) vs the heal from memory with the steps run directly. Every other heal.yml row runs
    its steps directly (autoheal_enforcement=controller), as the rows before the executor did.
Prints medians and ratios against the targets (sweep within 1.5x, one heal within 3x, through the executor within 1.2x,
keeping the last known good within 1.1x).
Run as root: `make bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

import fleet  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
# the steps run directly by sudo, as before the executor (the lab's default is the executor), as the lab's operator
DIRECT = ("-e", "autoheal_enforcement=controller", *fleet.AS_ADMIN)
# the heals from memory are incidents of their own, as if days apart: seconds after the last heal they would be its relapses,
# whose plan is no longer replayed as verified
SEPARATE = ("-e", "autoheal_relapse_window=0")
# the runbook heal with its verification checking once, as before the settle window
UNSETTLED = ("-e", "autoheal_settle_seconds=0")
# the lab's services as declared, each without its last known good configuration kept (what keeping it costs)
WITHOUT_KNOWN_GOOD = ("-e", json.dumps({"autoheal_services": [dict(spec, known_good=False) for spec in yaml.safe_load(
    (ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text())["autoheal_services"]]}))
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def timed_playbook(playbook: str, *args: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run(["ansible-playbook", playbook, "-i", "inventories/lab", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{playbook} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def nginx_is_healthy() -> bool:
    return fleet.run_in("node1", ["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1/"]).returncode == 0


def measure(rounds: int) -> list[str]:
    """The rows of the report, measured on a fleet that is up and healthy; leaves it healthy."""
    inits = ", ".join(f"{host.name} {host.init_system}" for host in fleet.status())
    state = Path(tempfile.mkdtemp(prefix="sentinel-bench-"))
    timed_playbook("playbooks/heal.yml", *DIRECT, "-e", f"autoheal_state_dir={state}")  # warm caches and ssh control masters
    timed_playbook("bench/handwritten_check.yml", *fleet.AS_ADMIN)
    sweep, sweep_without, check, heal_runbook, heal_memory, restart, heal_on_host, heal_unsettled = [], [], [], [], [], [], [], []
    for round_number in range(rounds):
        check.append(timed_playbook("bench/handwritten_check.yml", *fleet.AS_ADMIN))
        sweep.append(timed_playbook("playbooks/heal.yml", *DIRECT, "-e", f"autoheal_state_dir={state}"))
        sweep_without.append(timed_playbook("playbooks/heal.yml", *DIRECT, *WITHOUT_KNOWN_GOOD, "-e", f"autoheal_state_dir={state}"))

        fleet.inject("node1", "nginx-killed")
        restart.append(timed_playbook("bench/handwritten_restart.yml", "--limit", "node1", *fleet.AS_ADMIN))
        assert nginx_is_healthy()

        fleet.inject("node1", "nginx-killed")
        fresh = state / f"fresh-{round_number}"
        heal_runbook.append(timed_playbook("playbooks/heal.yml", "--limit", "node1", *DIRECT, "-e", f"autoheal_state_dir={fresh}"))
        assert nginx_is_healthy()

        fleet.inject("node1", "nginx-killed")
        heal_unsettled.append(timed_playbook("playbooks/heal.yml", "--limit", "node1", *DIRECT, *UNSETTLED, "-e",
                                             f"autoheal_state_dir={state / f'unsettled-{round_number}'}"))
        assert nginx_is_healthy()

        fleet.inject("node1", "nginx-killed")
        heal_memory.append(timed_playbook("playbooks/heal.yml", "--limit", "node1", *DIRECT, *SEPARATE, "-e", f"autoheal_state_dir={fresh}"))
        assert nginx_is_healthy()

        fleet.inject("node1", "nginx-killed")
        heal_on_host.append(timed_playbook("playbooks/heal.yml", "--limit", "node1", *SEPARATE, "-e", f"autoheal_state_dir={fresh}",
                                           "-e", "autoheal_enforcement=host"))
        assert nginx_is_healthy()
    shutil.rmtree(state)

    def row(name: str, samples: list[float], baseline: list[float], target: float | None) -> str:
        ratio = statistics.median(samples) / statistics.median(baseline)
        verdict = "" if target is None else f"  target <= {target:.1f}x: {'met' if ratio <= target else 'MISSED'}"
        return f"{name:<44} median {statistics.median(samples):6.2f} s  ratio {ratio:4.2f}x{verdict}"

    return [
        f"sentinel.heal speed on the lab fleet ({inits}), {rounds} interleaved rounds",
        row("hand-written check (3 hosts, 3 services)", check, check, None),
        row("heal.yml healthy sweep (3 hosts)", sweep, check, 1.5),
        row("the same sweep with known_good: false", sweep_without, sweep_without, None),
        row("keeping the last known good (the sweep)", sweep, sweep_without, 1.1),
        row("hand-written restart of killed nginx", restart, restart, None),
        row("heal.yml, killed nginx, runbook path", heal_runbook, restart, 3.0),
        row("what its settle window adds (against none)", heal_runbook, heal_unsettled, None),
        row("heal.yml, killed nginx, fix from memory", heal_memory, restart, 3.0),
        row("the same, through the executor on the host", heal_on_host, heal_memory, 1.2),
    ]


def main() -> None:
    with fleet.fresh():
        print("\n".join(measure(ROUNDS)))


if __name__ == "__main__":
    main()
