"""From fault to healthy with nobody watching: the EDA rulebooks on the lab fleet, against Monit's cycle.

Each round starts ansible-rulebook afresh (so neither its throttle nor the flapping limit of a shared memory holds the
next round back), lets it settle, kills nginx on node1 (kill -9, its systemd unit ends failed) and polls
http://10.77.0.11/ every 0.1 s until it answers 200:
  * watchdog: sentinel.heal.watchdog (rounds every 2 s) - from the kill to healthy, nothing else done (target <= 10 s);
  * webhook: sentinel.heal.heal_on_alert - an Alertmanager alert posted right after the kill; from the alert to healthy
    (target <= 5 s).
Monit, the usual watchdog, is printed for reference: it notices a dead process at its next cycle (`set daemon 30`, the
interval its documentation and most setups use), 15 s on average and 30 s at worst, then starts it.
Run as root (the lab fleet): `python bench/eda_speed.py`; BENCH_ROUNDS (5) sets the rounds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

import fleet  # noqa: E402
from rulebook import Rulebook, alertmanager_payload, answers, eda_inventory, post_json  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
NGINX = "http://10.77.0.11/"
PORT = 5099
WATCH_INTERVAL_S = 2
MONIT_CYCLE_S = 30
# how long a rulebook is left running before the fault: its sources up, the watchdog's first rounds done
SETTLE_S = 5.0


def until_healthy(started: float, timeout: float = 120.0) -> float:
    while not answers(NGINX, timeout=1.0):
        if time.monotonic() - started > timeout:
            raise SystemExit(f"nginx on node1 did not answer within {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - started


def one_round(mode: str, workdir: Path) -> float:
    inventory = eda_inventory(workdir / "inventory", workdir / "state")
    if mode == "watchdog":
        rulebook = Rulebook.of("watchdog", inventory, workdir / "rulebook.log", ready="watching",
                               variables={"SENTINEL_HEAL_INTERVAL": str(WATCH_INTERVAL_S), "SENTINEL_HEAL_HOSTS": "node1"})
    else:
        rulebook = Rulebook.of("heal_on_alert", inventory, workdir / "rulebook.log", ready="listening on",
                               variables={"SENTINEL_HEAL_PORT": str(PORT)})
    with rulebook:
        time.sleep(SETTLE_S)
        fleet.inject("node1", "nginx-killed")
        started = time.monotonic()
        if mode == "webhook":
            assert not answers(NGINX, timeout=1.0)
            started = time.monotonic()
            status, answer = post_json(f"http://127.0.0.1:{PORT}/alerts", alertmanager_payload("node1", "nginx", alertname="NginxDown"))
            assert status == 202 and answer["accepted"], answer
        elapsed = until_healthy(started)
        rulebook.wait_for(r"^PLAY RECAP", timeout=60)
    return elapsed


def measure(rounds: int) -> list[str]:
    """The rows of the report, measured on a fleet that is up and healthy; leaves it healthy."""
    inits = ", ".join(f"{host.name} {host.init_system}" for host in fleet.status())
    samples: dict[str, list[float]] = {"watchdog": [], "webhook": []}
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-eda-") as scratch:
        for round_number in range(rounds):
            for mode, times in samples.items():
                times.append(one_round(mode, Path(scratch) / f"{mode}-{round_number}"))

    def row(name: str, times: list[float], target: float) -> str:
        median = statistics.median(times)
        spread = ", ".join(f"{sample:.1f}" for sample in times)
        return (f"{name:<46} median {median:5.1f} s  target <= {target:g} s: {'met' if median <= target else 'MISSED'}  "
                f"(rounds: {spread}; Monit: {MONIT_CYCLE_S / 2:g} s on average, {MONIT_CYCLE_S} s at worst, to notice)")

    return [
        f"sentinel.heal on events, on the lab fleet ({inits}), {rounds} rounds, nginx killed on node1",
        row(f"watchdog ({WATCH_INTERVAL_S} s rounds): kill -> healthy", samples["watchdog"], 10.0),
        row("Alertmanager alert: alert -> healthy", samples["webhook"], 5.0),
    ]


def main() -> None:
    with fleet.fresh():
        print("\n".join(measure(ROUNDS)))


if __name__ == "__main__":
    main()
