"""A storm tells people once: the heal job of a fleet event (the watchdog's or the alert source's, heal.yml for all the
hosts the event names) says one fleet message for its hosts, not one per host, and a later job that sees the same fleet
incident says nothing again. Each host a forked process of the job, as Ansible's workers are, with a real memory on SQLite and on
PostgreSQL, and a real HTTP server on 127.0.0.1 recording what was sent."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from memory_places import MemoryPlace
from notify_cases import recording_server, task_of, validated

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import blast_radius
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncidents, FleetSettings, see
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import HEAL_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession
from helpers import HEALTHY, STILL_DOWN, ScriptedExecutor, _tools

STORM = tuple(f"web{number}" for number in range(1, 6))
APP = {"name": "app", "process": "app"}


@dataclass(frozen=True)
class Job:
    """A heal job: where it runs (its controller or execution node's view of the memory), its hosts, its AWX variables."""

    place: MemoryPlace
    hosts: tuple[str, ...]
    variables: dict[str, Any]


def heal_jobs(jobs: list[Job], notify: list[dict[str, Any]], *, heals: bool) -> dict[str, dict[str, Any]]:
    """Heal jobs at once, each host failing alike (app, which no runbook knows, not running) in a forked process as
    Ansible forks its workers: each host's check meets the others' in the memory (fleet/incidents.py see), then its
    incident goes through the loop - the fallback runbook's restart tried on the fleet incident's canary first, which
    ``heals`` or not - and its people are told. The result of each host."""
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    children = {}
    for job in jobs:
        for host in job.hosts:
            children[host] = _fork(job, host, notify, heals, ready_write, go_read)
    for _host in children:
        os.read(ready_read, 1)
    os.write(go_write, b"." * len(children))  # the checks of a storm end together
    results = {}
    for host, (pid, result_read) in children.items():
        with os.fdopen(result_read) as given:
            outcome = json.load(given)
        os.waitpid(pid, 0)
        assert "error" not in outcome, f"{host}: {outcome}"
        results[host] = outcome["result"]
    for fd in (ready_read, ready_write, go_read, go_write):
        os.close(fd)
    return results


def _fork(job: Job, host: str, notify: list[dict[str, Any]], heals: bool, ready: int, go: int) -> tuple[int, int]:
    """The worker of one host of the job: its pid, and where its result comes."""
    failure = Failure(host=host, service="app", failure_class="not_running", summary="app is not running", evidence={}, spec=APP)
    args = validated(HEAL_SPEC, services=[APP], failures=[failure.to_dict()], notify=notify, fleet_min_hosts=5, max_attempts=1,
                     **job.place.options())
    task = task_of(host, {**job.variables, "ansible_play_hosts_all": list(job.hosts), "ansible_play_batch": list(job.hosts)})
    session, radius = HealSession(args, task), blast_radius(args, task.task_vars)
    result_read, result_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(result_write)
        return pid, result_read
    outcome: dict[str, Any] = {}
    try:
        memory = job.place.open()
        tools = _tools(job.place.state_dir, ScriptedExecutor(), [HEALTHY if heals else STILL_DOWN], memory=memory, max_attempts=1,
                       target=Target(name=host, host_vars={}), blast_radius=radius)
        os.write(ready, b".")
        os.read(go, 1)
        fleet = see(FleetIncidents(memory.database), host, [failure], [], session.fleet, run_id=radius.run_id, run_hosts=len(job.hosts),
                    batch_hosts=len(job.hosts), at=time.time())
        outcome = {"result": session.handle([failure], tools, fleet)}
        memory.close()
    except Exception as exc:  # noqa: BLE001 - whatever it is, the parent fails the test with it
        outcome = {"error": repr(exc)}
    finally:  # a worker never returns into the test session
        with os.fdopen(result_write, "w") as out:
            json.dump(outcome, out, default=str)
        os._exit(0)


def test_a_fleet_events_job_tells_one_message_for_its_hosts_and_one_when_they_are_back(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        notify = [{"type": "webhook", "url": f"{recorder.url}/hook"}]
        results = heal_jobs([Job(memory_place, STORM, {"awx_job_id": 31})], notify, heals=True)
    assert {result["incidents"][0]["status"] for result in results.values()} == {"healed"}
    opened, closed = recorder.bodies("/hook")
    assert (opened["event"], closed["event"]) == ("fleet_opened", "fleet_closed")
    assert tuple(sorted(opened["hosts"])) == STORM and opened["key"] == closed["key"] == f"sentinel.heal/fleet/{opened['fleet_incident']}"


def test_a_fleet_events_job_whose_canary_fails_tells_the_fleet_incident_and_the_canarys_attempt_and_a_later_job_nothing(
        memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        notify = [{"type": "webhook", "url": f"{recorder.url}/hook"}]
        first = heal_jobs([Job(memory_place, STORM, {"awx_job_id": 31})], notify, heals=False)
        again = heal_jobs([Job(memory_place, STORM, {"awx_job_id": 32})], notify, heals=False)
    assert {result["incidents"][0]["status"] for result in [*first.values(), *again.values()]} == {"escalated"}
    canary, opened = sorted(recorder.bodies("/hook"), key=lambda body: body["event"])  # the forks say theirs in any order
    assert opened["event"] == "fleet_opened" and tuple(sorted(opened["hosts"])) == STORM
    # the one host that tried the plan says what it tried; the others, with nothing run, are the fleet message's
    tried = [host for host, result in first.items() if any(attempt["outcome"] == "failed" for attempt in result["incidents"][0]["attempt_log"])]
    assert canary["event"] == "escalated" and [canary["host"]] == tried
    assert "attempt 1: service app start -> failed" in {fact["label"]: fact["text"] for fact in canary["facts"]}["Tried"]


def test_the_slices_of_a_sliced_job_on_two_nodes_tell_their_fleet_incident_once(memory_place: MemoryPlace) -> None:
    """Two slices of one AWX workflow job at once, each on an execution node of its own (a state dir each) sharing the
    memory: one fleet incident of their six hosts, said by one slice - the memory marks who said it first, the nodes'
    state dirs do not meet - and its canary's attempt, said once."""
    workflow = {"awx_workflow_job_id": 40}
    slices = [Job(memory_place.node("exec-a"), ("web1", "web2", "web3"), {**workflow, "awx_job_id": 41}),
              Job(memory_place.node("exec-b"), ("web4", "web5", "web6"), {**workflow, "awx_job_id": 42})]
    with recording_server() as recorder:
        results = heal_jobs(slices, [{"type": "webhook", "url": f"{recorder.url}/hook"}], heals=False)
    assert len(results) == 6 and {result["incidents"][0]["status"] for result in results.values()} == {"escalated"}
    canary, opened = sorted(recorder.bodies("/hook"), key=lambda body: body["event"])
    assert (opened["event"], canary["event"]) == ("fleet_opened", "escalated")
    # the hosts it had when it was said; every host of both slices is in it
    assert {result["incidents"][0]["fleet_incident"]["id"] for result in results.values()} == {opened["fleet_incident"]}


def test_a_healthy_host_that_leaves_a_fleet_incident_last_says_it_closed_once(memory_place: MemoryPlace) -> None:
    """The last host of a fleet incident seen healthy closes it and says so (its check found nothing to heal: the memory
    is opened only for that); its next healthy run says nothing."""
    settings = FleetSettings(min_hosts=2)
    memory = memory_place.open()
    incidents = FleetIncidents(memory.database)
    for host in ("web1", "web2"):
        failure = Failure(host=host, service="app", failure_class="not_running", summary="app is not running", evidence={}, spec=APP)
        see(incidents, host, [failure], [], settings, run_id="earlier", run_hosts=1, batch_hosts=1, at=time.time())
    assert incidents.clear_fleet_incidents("web2", ["app"], at=time.time()) == []
    with recording_server() as recorder:
        args = validated(HEAL_SPEC, services=[APP], failures=[], notify=[{"type": "webhook", "url": f"{recorder.url}/hook"}],
                         **memory_place.options())
        closed = HealSession(args, task_of("web1")).run()
        again = HealSession(args, task_of("web1")).run()
    [said] = recorder.bodies("/hook")
    assert (said["event"], sorted(said["hosts"])) == ("fleet_closed", ["web1", "web2"])
    assert [incident["id"] for incident in closed["fleet_incidents_closed"]] == [said["fleet_incident"]] and not again["fleet_incidents_closed"]
