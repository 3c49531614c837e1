"""A sliced heal on two execution nodes against the same heal in one job on one node, on the lab fleet.

Both heal nginx, killed on every host of the lab's executor group, with jobs shipped over ansible-runner's streaming
interface to containers of the execution environment (tests/ee/stream.py), the memory on a PostgreSQL server of each heal's own: the
sliced heal as two slices of one AWX workflow job (one host each, on exec-a and exec-b, started together), the other as
one job of both hosts on exec-a. Interleaved rounds; each must end with nginx answering on every host. Prints the
medians and the sliced / one-job ratio. Run as root: `make bench`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "lab"))
sys.path.insert(0, str(ROOT / "tests" / "ee"))

import fleet  # noqa: E402
import image  # noqa: E402
from job import lab_inventory  # noqa: E402
from medians import median_rows, ratio  # noqa: E402
from postgres_server import PostgresServer, bridged_server, bridged_url  # noqa: E402
from stream import ExecutionNode, StreamedJob  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
HOSTS = ("node1", "node2")


def one_heal(work: Path, ee_image: str, server: PostgresServer, slices: list[tuple[str, str]], workflow: int) -> float:
    """Kill nginx on every host, heal it with one job per (node, hosts) slice, all started together; the seconds until
    the last ends."""
    for host in HOSTS:
        fleet.inject(host, "nginx-killed")
    jobs = []
    started = time.perf_counter()
    for number, (node, hosts) in enumerate(slices, start=1):
        private_data_dir = work / f"slice-{number}"
        lab_inventory(private_data_dir)
        # ssh retried, as tests/integration/test_sliced_jobs_lab.py does (two containers connecting at once)
        extravars = {"autoheal_memory_url": bridged_url(server), "awx_job_id": workflow * 10 + number, "ansible_ssh_retries": 2,
                     **({"awx_workflow_job_id": workflow} if len(slices) > 1 else {})}
        jobs.append(StreamedJob(private_data_dir, "sentinel.heal.heal", ExecutionNode(node, ee_image), limit=hosts, extravars=extravars,
                                envvars={"PGPASSWORD": server.password}).start())
    done = [job.wait() for job in jobs]
    elapsed = time.perf_counter() - started
    down = [host for host in HOSTS if fleet.run_in(host, ["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1/"]).returncode != 0]
    failed = [job for job in done if job.rc != 0]
    if down or failed:
        raise SystemExit(f"the heal in {len(slices)} job(s) failed (nginx down on {down or 'no host'}):\n"
                         + "\n".join(job.stdout[-3000:] for job in failed))
    return elapsed


def measure(rounds: int) -> list[str]:
    """The rows of the report, measured on a fleet that is up and healthy; leaves it healthy."""
    ee_image = image.build()
    ways = {"one job on one node": [("exec-a", ",".join(HOSTS))], "two slices on two nodes": [("exec-a", HOSTS[0]), ("exec-b", HOSTS[1])]}
    times: dict[str, list[float]] = {label: [] for label in ways}
    for round_number in range(rounds):
        for index, (label, slices) in enumerate(ways.items()):
            # a memory of its own for each heal, started before the clock: no heal counts another's (flapping)
            server = bridged_server().up()
            try:
                with tempfile.TemporaryDirectory(prefix="sentinel-heal-sliced-bench.") as work:
                    times[label].append(one_heal(Path(work), ee_image, server, slices, workflow=100 + round_number * 10 + index))
            finally:
                server.down()
    rows = [f"a heal of nginx killed on {', '.join(HOSTS)}, shipped to execution nodes of {ee_image}, memory on PostgreSQL, "
            f"{rounds} interleaved rounds"]
    rows += median_rows(times)
    rows.append(f"two slices / one job: {ratio(times, 'two slices on two nodes', 'one job on one node'):.2f}x")
    return rows


def main() -> None:
    with fleet.fresh():
        print("\n".join(measure(ROUNDS)))


if __name__ == "__main__":
    main()
