"""The heal, approve and rulebook jobs as AWX runs them on execution nodes, against the lab fleet.

A job is shipped over ansible-runner's streaming interface (tests/ee/stream.py): ``transmit`` here, ``ansible-runner
worker`` inside a container of the execution environment (one container per execution node, each with a host name of
its own), ``process`` here again. What is checked is what that path can get wrong and a job run in place cannot: the
job's files and settings crossing in the stream (inventory, keys, extra variables, limit, environment), the events,
``set_stats`` and the files the job writes into its artifact directory (the run report, the audit trail) coming back as
AWX's job page shows them, a plan stored by a job on one node and approved by a job on another, and a node lost in
the middle of a remediation.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import jinja2
import psycopg
import pytest
import yaml
from conftest import ROOT, Faults, RollOut, episodes, one_line, sh, slow_plan, wait_for
from guides import code_block
from postgres_server import PostgresServer, bridged_url

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import LEASE_GRACE_S

sys.path.insert(0, str(ROOT / "tests" / "ee"))

import image  # tests/ee is not a package, as tests/lab
from job import STATE_IN_CONTAINER, give_to_image_user, lab_inventory
from stream import WORKER_DIR, ExecutionNode, StreamedJob, stream_job

NODE = "node1"
# the timeline callback, its report and audit trail written into the job's artifact directory (ansible-runner names it
# in AWX_ISOLATED_DATA_DIR; Ansible expands variables in a path option), so that they come back with the artifacts
TIMELINE = {"ANSIBLE_CALLBACKS_ENABLED": "sentinel.heal.timeline", "SENTINEL_HEAL_REPORT_DIR": "$AWX_ISOLATED_DATA_DIR/sentinel-heal",
            "SENTINEL_HEAL_AUDIT_FILE": "$AWX_ISOLATED_DATA_DIR/sentinel-heal/audit.jsonl"}


@pytest.fixture(scope="module")
def ee_image() -> str:
    return image.build()


def shared_state(tmp_path: Path) -> Path:
    """A directory of this machine mounted on every node at the memory's place: one node's persistent volume, or
    several nodes' shared one."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    give_to_image_user(state)
    return state


def test_the_heal_job_shipped_to_an_execution_node_heals_and_its_events_report_and_audit_come_back(
        lab: Any, faults: Faults, ee_image: str, tmp_path: Path) -> None:
    faults.inject(NODE, "nginx-killed")
    state = shared_state(tmp_path)
    node = ExecutionNode("exec-a", ee_image, volumes=(f"{state}:{STATE_IN_CONTAINER}:Z",))
    private_data_dir = tmp_path / "heal"
    lab_inventory(private_data_dir)
    job = StreamedJob(private_data_dir, "sentinel.heal.heal", node, extravars={"autoheal_state_dir": STATE_IN_CONTAINER}, limit=NODE,
                      envvars=TIMELINE)
    done = job.start().wait()
    said = one_line(done.stdout)
    assert (done.rc, done.status) == (0, "successful"), (done.stdout, job.worker_said())
    assert f"{NODE}: nginx healed in 1 attempt with: systemctl start nginx" in said, done.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    # the job ran on the node: the heal's own host name is the node's, and the limit crossed in the stream
    assert done.stats()["changed"] == {NODE: 1} and set(done.stats()["ok"]) == {NODE}
    assert any(event.get("event_data", {}).get("host") == NODE for event in done.events())
    # what the job wrote into its artifact directory on the node came back with its artifacts
    [report] = (done.artifacts / "sentinel-heal").glob("*.html")
    assert "nginx" in report.read_text(encoding="utf-8")
    audit = [json.loads(line) for line in (done.artifacts / "sentinel-heal" / "audit.jsonl").read_text(encoding="utf-8").splitlines()]
    assert audit and {record["host"] for record in audit} == {NODE} and any(record["kind"] == "outcome" for record in audit), audit


def test_a_plan_a_job_on_one_node_stored_is_approved_by_the_workflows_next_job_on_another_node(
        lab: Any, faults: Faults, ee_image: str, bridged_postgres: PostgresServer, tmp_path: Path) -> None:
    """An AWX workflow (heal -> approval node -> approve), its two jobs on two nodes of the instance group sharing the
    memory on PostgreSQL: the heal job's set_stats becomes the approve job's extra variables, the approval node's
    person is AWX's user of the job."""
    memory = {"autoheal_memory_url": bridged_url(bridged_postgres)}
    password = {"PGPASSWORD": bridged_postgres.password}
    faults.inject(NODE, "nginx-killed")
    heal_dir, approve_dir = tmp_path / "heal", tmp_path / "approve"
    lab_inventory(heal_dir)
    waiting = stream_job(heal_dir, "sentinel.heal.heal", ExecutionNode("exec-a", ee_image), limit=NODE,
                         extravars={**memory, "autoheal_mode": "review"}, envvars=password)
    assert waiting.rc == 0 and "awaits approval of plan" in one_line(waiting.stdout), waiting.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() != "active"
    # the artifacts AWX keeps of the job, which its workflow hands to the next job
    artifacts = waiting.stats()["artifact_data"]
    [pending] = artifacts["autoheal_pending_plans"]
    assert (pending["host"], pending["service"]) == (NODE, "nginx") and re.fullmatch(r"[0-9a-f]{32}", pending["plan_id"]), pending

    lab_inventory(approve_dir)
    approved = stream_job(approve_dir, "sentinel.heal.approve", ExecutionNode("exec-b", ee_image),
                          extravars={**memory, **artifacts, "awx_user_name": "alice"}, envvars=password)
    assert approved.rc == 0 and "healed" in one_line(approved.stdout), approved.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        assert conn.execute("SELECT host, status, decided_by FROM plans").fetchall() == [(NODE, "executed", "alice")]
        assert conn.execute("SELECT host, outcome, approved_by FROM episodes ORDER BY id").fetchall()[-1] == (NODE, "healed", "alice")


def test_the_job_an_alert_launches_through_the_eda_activation_heals_on_an_execution_node(
        lab: Any, faults: Faults, ee_image: str, tmp_path: Path) -> None:
    """The job of eda.rst's activation (run_job_template: its limit and its survey's text), launched by the alert's
    event as the EDA controller renders it, shipped to a node."""
    job_args = yaml.safe_load(code_block("eda", "activation").body)[0][
        "rules"][0]["action"]["run_job_template"]["job_args"]
    event = {"sentinel": {"host": NODE, "service": "nginx"}}
    render = jinja2.Environment(undefined=jinja2.StrictUndefined)
    limit = render.from_string(job_args["limit"]).render(event=event)
    extravars = {name: render.from_string(value).render(event=event) for name, value in job_args["extra_vars"].items()}
    assert (limit, extravars) == (NODE, {"autoheal_target": NODE, "autoheal_target_services": "nginx"})
    faults.inject(NODE, "nginx-killed")
    state = shared_state(tmp_path)
    private_data_dir = tmp_path / "alert"
    lab_inventory(private_data_dir)
    done = stream_job(private_data_dir, "sentinel.heal.heal", ExecutionNode("exec-a", ee_image, volumes=(f"{state}:{STATE_IN_CONTAINER}:Z",)),
                      limit=limit, extravars={**extravars, "autoheal_state_dir": STATE_IN_CONTAINER})
    assert done.rc == 0 and f"{NODE}: nginx healed in 1 attempt" in one_line(done.stdout), done.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    assert [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state)] == [(NODE, "nginx", "healed")]


def test_a_node_lost_mid_remediation_leaves_an_interrupted_record_the_next_job_on_another_node_heals_from(
        lab: Any, faults: Faults, roll_out: RollOut, ee_image: str, bridged_postgres: PostgresServer, tmp_path: Path) -> None:
    """The execution node dies (its container killed, the job's worker with it) while its remediation runs: no process
    of it is left to be seen gone, so its lease ends when its renewals stop, and the instance group's next job, on
    another node, records the remediation interrupted and heals."""
    memory = {"autoheal_memory_url": bridged_url(bridged_postgres)}
    password = {"PGPASSWORD": bridged_postgres.password}
    killed_dir, next_dir = tmp_path / "killed", tmp_path / "next"
    lab_inventory(killed_dir)
    (killed_dir / "slow").mkdir()
    # the slow plan's runbook and policy travel in the job's private data directory, read at its place on the node
    plan = slow_plan(killed_dir / "slow", 40)
    roll_out(*plan)
    on_node = json.loads(plan[1].replace(str(killed_dir), WORKER_DIR))
    faults.inject(NODE, "nginx-killed")
    job = StreamedJob(killed_dir, "sentinel.heal.heal", ExecutionNode("exec-a", ee_image), limit=NODE, extravars={**memory, **on_node},
                      envvars=password).start()
    try:
        assert wait_for(lambda: "sleep 40" in sh(lab, NODE, "ps", "-eo", "args"), 240), ("the remediation never started", job.worker_said())
    finally:
        job.node.kill()
    job.wait(timeout=60)
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        assert conn.execute("SELECT count(*) FROM episodes").fetchone() == (0,)  # nothing half-written
        [(owner, renewed_at)] = conn.execute("SELECT owner, renewed_at FROM leases").fetchall()
    assert owner.startswith("exec-a/"), owner

    roll_out.undo()  # the next job heals with the lab's own policy
    # before its grace is over, the lost node's lease still holds the service: nothing runs twice
    time.sleep(max(0.0, renewed_at + LEASE_GRACE_S + 1 - time.time()))
    lab_inventory(next_dir)
    healed = stream_job(next_dir, "sentinel.heal.heal", ExecutionNode("exec-b", ee_image), limit=NODE, extravars=memory, envvars=password)
    said = one_line(healed.stdout)
    assert healed.rc == 0, healed.stdout
    assert re.search(rf"{NODE}: nginx remediation of an earlier job interrupted \(episode \d+\): interrupted: its job stopped renewing its "
                     r"lease \(\d+ s ago\) during the remediation; what it had started is not known on this controller", said), said
    assert f"{NODE}: nginx healed in 1 attempt" in said, said
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        assert conn.execute("SELECT host, outcome FROM episodes ORDER BY id").fetchall() == [(NODE, "interrupted"), (NODE, "healed")]
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)
