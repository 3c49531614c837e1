"""A sliced heal job as AWX runs one: the inventory cut into slices, each slice a job of its own on an execution node of
its own, all at the same time, the memory on PostgreSQL.

AWX makes a sliced job template's launch a workflow job whose nodes are the slice jobs, each given the slice's hosts and
AWX's variables (``awx_job_id`` its own, ``awx_workflow_job_id`` the workflow's). Here each slice is shipped over
ansible-runner's streaming interface (tests/ee/stream.py) to a container of the execution environment with a host name
of its own, limited to its slice's hosts, with those variables. What is checked is that the slices are one heal: a
failure their hosts share is one fleet incident with one canary, the blast radius, the kill switch, silences and
flapping hold across them, whichever node a slice runs on, and a plan a slice stored on one node is approved by the
workflow's approve job on another.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import ROOT, Faults, one_line, sh
from postgres_server import PostgresServer, bridged_url

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silences
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

sys.path.insert(0, str(ROOT / "tests" / "ee"))

import image  # tests/ee is not a package, as tests/lab
from job import Job, lab_inventory
from stream import ExecutionNode, StreamedJob, stream_job

# as the lab's other heals run (tests/integration/conftest.py LAB_DEFAULTS): each launch breaks again what the last healed;
# and ssh's connection retried: with two nodes' containers connecting at once, a connection from a container to a lab
# host through podman's network now and then gets no answer (seen in two runs of four, on node1; not understood yet)
LAB_DEFAULTS = {"autoheal_relapse_window": 0, "autoheal_settle_seconds": 1, "ansible_ssh_retries": 2}


@pytest.fixture(scope="module")
def ee_image() -> str:
    return image.build()


class SlicedJob:
    """One launch of a sliced job template: its slices (host -> node) shipped at once, one workflow job of AWX."""

    def __init__(self, tmp_path: Path, image_name: str, server: PostgresServer) -> None:
        self.tmp_path, self.image, self.server = tmp_path, image_name, server
        self.launches = 0

    def launch(self, slices: dict[str, str], **extravars: Any) -> dict[str, Job]:
        """Each slice (its host) on its node, all started before any is waited for: the slices' jobs by host."""
        self.launches += 1
        workflow = 100 + self.launches
        started = {}
        for number, (host, node) in enumerate(slices.items(), start=1):
            private_data_dir = self.tmp_path / f"workflow-{workflow}-slice-{number}"
            lab_inventory(private_data_dir)
            variables = {"autoheal_memory_url": bridged_url(self.server), "awx_job_id": workflow * 10 + number, "awx_workflow_job_id": workflow,
                         **LAB_DEFAULTS, **extravars}
            started[host] = StreamedJob(private_data_dir, "sentinel.heal.heal", ExecutionNode(node, self.image), limit=host,
                                        extravars=variables, envvars={"PGPASSWORD": self.server.password}).start()
        return {host: job.wait() for host, job in started.items()}

    def outcomes(self) -> list[tuple[str, str]]:
        with psycopg.connect(self.server.url_with_password) as conn:
            return [(str(host), str(outcome)) for host, outcome in conn.execute("SELECT host, outcome FROM episodes ORDER BY id")]

    def memory(self, state_dir: Path) -> Memory:
        return Memory(state_dir, url=self.server.url, password=self.server.password)


def said(jobs: dict[str, Job]) -> dict[str, str]:
    return {host: one_line(job.stdout) for host, job in jobs.items()}


def shown(output: dict[str, str]) -> str:
    """Every slice's output in full, for a failed assertion (pytest would cut a dict's)."""
    return "\n\n".join(f"== {host}\n{text}" for host, text in output.items())


def active(lab: Any, host: str) -> bool:
    return sh(lab, host, "systemctl", "is-active", "nginx").strip() == "active"


def test_the_slices_of_one_heal_on_two_nodes_share_one_fleet_incident_one_canary_and_every_limit(
        lab: Any, faults: Faults, ee_image: str, bridged_postgres: PostgresServer, tmp_path: Path) -> None:
    sliced = SlicedJob(tmp_path, ee_image, bridged_postgres)

    # nginx fails alike on the hosts of two slices: one fleet incident across them, its plan tried on one host first
    for host in ("node1", "node2"):
        faults.inject(host, "nginx-killed")
    jobs = sliced.launch({"node1": "exec-a", "node2": "exec-b"}, autoheal_fleet_min_hosts=2)
    output = said(jobs)
    for host, job in jobs.items():
        assert job.rc == 0 and f"{host}: nginx healed in 1 attempt" in output[host], job.stdout
        assert active(lab, host)
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        [(incident, closed_at)] = conn.execute("SELECT id, closed_at FROM fleet_incidents").fetchall()
        members = {row[0] for row in conn.execute("SELECT host FROM fleet_incident_hosts WHERE incident_id = %s", (incident,))}
        canaries = conn.execute("SELECT host, outcome FROM canaries WHERE run_id = %s", (f"fleet-incident-{incident}",)).fetchall()
    assert members == {"node1", "node2"} and closed_at is not None, shown(output)
    assert len(canaries) <= 1 and all(outcome == "verified" for _host, outcome in canaries), canaries
    assert sorted(sliced.outcomes()) == [("node1", "healed"), ("node2", "healed")]

    # the run's cap on hosts counts the slices together: one slice heals its host, the other's waits for the next run
    faults.undo_all()
    for host in ("node1", "node2"):
        faults.inject(host, "nginx-killed")
    jobs = sliced.launch({"node1": "exec-b", "node2": "exec-a"}, autoheal_max_hosts_per_run=1, autoheal_fleet_min_hosts=0)
    output = said(jobs)
    healed = [host for host in jobs if f"{host}: nginx healed in 1 attempt" in output[host]]
    deferred = [host for host in jobs if "this run already remediated 1 hosts (the cap per run is 1)" in output[host]]
    assert len(healed) == 1 and len(deferred) == 1, shown(output)
    assert active(lab, healed[0]) and not active(lab, deferred[0])

    # the kill switch, thrown once, holds every slice on every node: nothing runs
    state = tmp_path / "operator"
    state.mkdir()
    with sliced.memory(state) as memory:
        KillSwitch(memory.database).suspend(by="alice", reason="change freeze", at=time.time())
    faults.inject(healed[0], "nginx-killed")
    before = sliced.outcomes()
    jobs = sliced.launch({"node1": "exec-a", "node2": "exec-b"})
    output = said(jobs)
    for host, job in jobs.items():
        assert job.rc == 0 and re.search(rf"{host}: .*change freeze", output[host]), job.stdout
        assert not active(lab, host)
    assert [outcome for _host, outcome in sliced.outcomes()[len(before):]] == ["suspended", "suspended"]

    # resumed: a silence set once holds its host in whichever slice and node it is; flapping counts the remediations
    # every slice made (node2 was remediated by a slice on exec-b, then on exec-a)
    with sliced.memory(state) as memory:
        KillSwitch(memory.database).resume(by="alice", at=time.time())
        Silences(memory.database).silence(hosts="node1", service="nginx", until=time.time() + 3600, reason="disk swap", by="alice", at=time.time())
        remediated = len(memory.remediations("node2", "nginx", since=0.0))
    assert remediated in (1, 2)  # healed by the first launch's slice on exec-b, maybe by the second's on exec-a
    before = sliced.outcomes()
    jobs = sliced.launch({"node1": "exec-b", "node2": "exec-a"}, autoheal_flap_limit=remediated)
    output = said(jobs)
    assert "disk swap" in output["node1"] and not active(lab, "node1"), shown(output)
    assert re.search(rf"node2: nginx .*remediated {remediated} time", output["node2"]) and not active(lab, "node2"), shown(output)
    assert dict(sliced.outcomes()[len(before):]) == {"node1": "silenced", "node2": "flapping"}

    # in review mode a slice on exec-a stores its plan; the workflow's approve job, on exec-b, runs exactly that plan
    jobs = sliced.launch({"node1": "exec-b", "node2": "exec-a"}, autoheal_mode="review")
    assert "awaits approval of plan" in said(jobs)["node2"], shown(said(jobs))
    [pending] = jobs["node2"].stats()["artifact_data"]["autoheal_pending_plans"]
    assert (pending["host"], pending["service"]) == ("node2", "nginx")
    private_data_dir = tmp_path / "approve"
    lab_inventory(private_data_dir)
    approved = stream_job(private_data_dir, "sentinel.heal.approve", ExecutionNode("exec-b", ee_image),
                          extravars={"autoheal_memory_url": bridged_url(bridged_postgres), **LAB_DEFAULTS,
                                     **jobs["node2"].stats()["artifact_data"], "awx_user_name": "alice"},
                          envvars={"PGPASSWORD": bridged_postgres.password})
    assert approved.rc == 0 and "healed" in one_line(approved.stdout), approved.stdout
    assert active(lab, "node2") and not active(lab, "node1")
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        assert conn.execute("SELECT host, status, decided_by FROM plans").fetchall() == [("node2", "executed", "alice")]
