"""The heal job inside the execution environment, as AWX runs it, against the lab fleet.

The image is the Debian variant of docs/execution-environment/execution-environment.yml, built on this machine by
tests/ee/image.py (`make ee`; cached: a build with nothing changed takes seconds). Each job is ansible-runner with
process isolation: podman runs the image as its own user (uid 1000), the private data directory at /runner with the
project, the inventory (the lab's, its keys as files of the job) and the extra variables (tests/ee/job.py). What is
checked is what a job in a container can get wrong: the model files and the policy inside the image, the SSH client,
ansible-runner's own runs nested in the job, the memory outside the container (a mounted directory, or PostgreSQL
over the container's network), the artifacts the job leaves, and the user the image runs as.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import ROOT, Faults, episodes, one_line, sh
from postgres_server import PostgresServer, bridged_url
from rulebook import Rulebook, alertmanager_payload, eda_inventory, post_json

sys.path.insert(0, str(ROOT / "tests" / "ee"))

import image  # tests/ee is not a package, as tests/lab
from job import IMAGE_UID, STATE_IN_CONTAINER, Job, copy_lab_keys, give_to_image_user, lab_inventory, run_job

NODE = "node1"


@pytest.fixture(scope="module")
def ee_image() -> str:
    return image.build()


def job(tmp_path: Path, name: str, playbook: str, ee_image: str, *, extravars: dict[str, Any], volumes: tuple[str, ...] = (),
        envvars: dict[str, str] | None = None) -> Job:
    private_data_dir = tmp_path / name
    lab_inventory(private_data_dir)
    return run_job(private_data_dir, playbook, ee_image, extravars=extravars, volumes=volumes, envvars=envvars)


def events(done: Job) -> list[dict[str, Any]]:
    files = sorted((done.artifacts / "job_events").glob("*.json"), key=lambda path: int(path.name.split("-")[0]))
    return [json.loads(path.read_text(encoding="utf-8")) for path in files]


def test_the_heal_job_in_the_image_heals_a_lab_host_into_the_mounted_memory_and_leaves_its_artifacts(
        lab: Any, faults: Faults, ee_image: str, tmp_path: Path) -> None:
    faults.inject(NODE, "nginx-killed")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    give_to_image_user(state)
    done = job(tmp_path, "heal", "sentinel.heal.heal", ee_image, extravars={"autoheal_state_dir": STATE_IN_CONTAINER, "autoheal_target": NODE},
               volumes=(f"{state}:{STATE_IN_CONTAINER}:Z",))
    said = one_line(done.stdout)
    assert (done.rc, done.status) == (0, "successful") and f"{NODE}: nginx healed in 1 attempt with: systemctl start nginx" in said, done.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    # the memory on the host's disk, written by the image's user; the step ran through ansible-runner inside the job
    [episode] = episodes(state)
    assert (episode["host"], episode["service"], episode["outcome"]) == (NODE, "nginx", "healed")
    assert (state / "memory.sqlite3").stat().st_uid == IMAGE_UID
    assert any(state.glob("runs/*/*/artifacts/run/job_events/*.json")), "the nested ansible-runner run kept no events"
    # the job's own artifacts, on the host after the container is gone: its rc, its status and every event
    assert (done.artifacts / "rc").read_text() == "0" and (done.artifacts / "status").read_text() == "successful"
    stats = [event for event in events(done) if event["event"] == "playbook_on_stats"]
    assert len(stats) == 1 and stats[0]["event_data"]["changed"] == {NODE: 1}, stats


def test_a_plan_one_job_stored_in_postgresql_is_approved_and_run_by_a_job_in_another_container(
        lab: Any, faults: Faults, ee_image: str, bridged_postgres: PostgresServer, tmp_path: Path) -> None:
    url = bridged_url(bridged_postgres)
    memory = {"autoheal_memory_url": url}
    password = {"PGPASSWORD": bridged_postgres.password}
    faults.inject(NODE, "nginx-killed")

    waiting = job(tmp_path, "review", "sentinel.heal.heal", ee_image, extravars={**memory, "autoheal_target": NODE, "autoheal_mode": "review"},
                  envvars=password)
    assert waiting.rc == 0 and "awaits approval of plan" in one_line(waiting.stdout), waiting.stdout
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.stdout)
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() != "active"

    approved = job(tmp_path, "approve", "sentinel.heal.approve", ee_image, extravars={**memory, "plan_id": plan_id, "approver": "alice"},
                   envvars=password)
    assert approved.rc == 0 and "healed" in one_line(approved.stdout), approved.stdout
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    with psycopg.connect(bridged_postgres.url_with_password) as conn:
        assert conn.execute("SELECT host, status, decided_by FROM plans").fetchall() == [(NODE, "executed", "alice")]
        assert conn.execute("SELECT host, outcome, approved_by FROM episodes ORDER BY id").fetchall()[-1] == (NODE, "healed", "alice")


def test_an_alert_to_the_rulebook_in_the_image_heals_in_a_job_of_the_image(lab: Any, faults: Faults, ee_image: str, tmp_path: Path) -> None:
    """The image as the rulebooks' decision environment, as an EDA controller runs an activation: ansible-rulebook in
    the container with the collection's rulebook heal_on_alert, its webhook published on the host's loopback; the
    alert's heal job runs in the same container, its memory in a mounted directory."""
    eda, state = tmp_path / "eda", tmp_path / "state"
    copy_lab_keys(eda)
    eda_inventory(eda / "inventory", Path(STATE_IN_CONTAINER), checkout="/eda")
    state.mkdir(mode=0o700)
    give_to_image_user(eda)
    give_to_image_user(state)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    variables = {"SENTINEL_HEAL_INVENTORY": "/eda/inventory", "SENTINEL_HEAL_LISTEN": "0.0.0.0", "SENTINEL_HEAL_PORT": "5000"}
    command = ["podman", "run", "--rm", "--name", f"sentinel-heal-eda-{port}", "--publish", f"127.0.0.1:{port}:5000",
               "--volume", f"{eda}:/eda:Z", "--volume", f"{state}:{STATE_IN_CONTAINER}:Z",
               *(f"--env={name}={value}" for name, value in variables.items()), ee_image,
               "ansible-rulebook", "-r", "sentinel.heal.heal_on_alert", "-i", "/eda/inventory", "-E", ",".join(variables), "-v"]
    faults.inject(NODE, "nginx-killed")
    with Rulebook(command, dict(os.environ), tmp_path / "rulebook.log", ready="listening on 0.0.0.0:5000") as rulebook:
        status, answer = post_json(f"http://127.0.0.1:{port}/alerts", alertmanager_payload(NODE, "nginx", alertname="NginxDown"))
        assert (status, answer["accepted"]) == (202, [{"host": NODE, "service": "nginx"}]), answer
        rulebook.wait_for(r"^PLAY RECAP", timeout=120)
        assert rulebook.heals() == 1, rulebook.output()
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    assert [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state)] == [(NODE, "nginx", "healed")]
    assert (state / "memory.sqlite3").stat().st_uid == IMAGE_UID
