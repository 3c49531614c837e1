"""A heal inside the execution environment against the same heal outside it, on the lab fleet.

Both are ansible-runner jobs of sentinel.heal.heal on node1 after nginx was killed, interleaved in this process: one
with process isolation (podman and the image `make ee` builds, as AWX runs a job), one without (the collection of
this checkout, on this machine). Each job starts with a memory of its own, so each takes the runbook path; each must
end with nginx answering. Prints the medians and their ratio against the goal (within 1.3x once the image is built).
Run as root: `make bench`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))
sys.path.insert(0, str(ROOT / "tests" / "ee"))

import fleet  # noqa: E402
import image  # noqa: E402
from job import STATE_IN_CONTAINER, give_to_image_user, lab_inventory, run_job  # noqa: E402
from medians import median_rows, ratio  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
NODE = "node1"
GOAL = 1.3


def one_heal(work: Path, ee_image: str | None) -> float:
    """Kill nginx, heal it with one job; the job's seconds."""
    fleet.inject(NODE, "nginx-killed")
    state = work / "state"
    state.mkdir(mode=0o700)
    private_data_dir = work / "job"
    if ee_image is None:
        lab_inventory(private_data_dir, mounted_at=str(private_data_dir))
        extravars, volumes = {"autoheal_state_dir": str(state)}, ()
        envvars = {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections")}
    else:
        lab_inventory(private_data_dir)
        give_to_image_user(state)
        extravars, volumes, envvars = {"autoheal_state_dir": STATE_IN_CONTAINER}, (f"{state}:{STATE_IN_CONTAINER}:Z",), {}
    started = time.perf_counter()
    done = run_job(private_data_dir, "sentinel.heal.heal", ee_image, extravars={**extravars, "autoheal_target": NODE},
                   volumes=volumes, envvars=envvars)
    elapsed = time.perf_counter() - started
    healthy = fleet.run_in(NODE, ["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1/"]).returncode == 0
    if done.rc != 0 or not healthy:
        raise SystemExit(f"the heal {'in ' + ee_image if ee_image else 'without the image'} failed (rc {done.rc}, nginx "
                         f"{'answers' if healthy else 'down'}):\n{done.stdout[-3000:]}")
    return elapsed


def measure(rounds: int) -> list[str]:
    """The rows of the report, measured on a fleet that is up and healthy; leaves it healthy."""
    built = time.perf_counter()
    ee_image = image.build()
    rows = [f"a heal in the execution environment {ee_image} (ready in {time.perf_counter() - built:.1f} s, cached layers reused) "
            f"and without it, nginx killed on {NODE}, {rounds} interleaved rounds"]
    times: dict[str, list[float]] = {"without the image": [], "in the image": []}
    for _round in range(rounds):
        for label, used in (("without the image", None), ("in the image", ee_image)):
            with tempfile.TemporaryDirectory(prefix="sentinel-heal-ee-bench.") as work:
                times[label].append(one_heal(Path(work), used))
    rows += median_rows(times)
    in_the_image = ratio(times, "in the image", "without the image")
    rows.append(f"in the image / without: {in_the_image:.2f}x (goal within {GOAL}x): {'met' if in_the_image <= GOAL else 'MISSED'}")
    return rows


def main() -> None:
    with fleet.fresh():
        print("\n".join(measure(ROUNDS)))


if __name__ == "__main__":
    main()
