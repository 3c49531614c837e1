"""A storm tells people once: the heal job of a fleet event (the watchdog's or the alert source's, heal.yml for all the
hosts the event names) says one fleet message for its hosts, not one per host, and a later job that sees the same fleet
incident says nothing again. Each host a forked process of the job, as Ansible's workers are, with a real memory on SQLite and on
PostgreSQL, and a real HTTP server on 127.0.0.1 recording what was sent."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from memory_places import MemoryPlace
from notify_cases import recording_server, task_of, validated

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncidents, see
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import HEAL_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession
from helpers import HEALTHY, STILL_DOWN, ScriptedExecutor, _tools

STORM = [f"web{number}" for number in range(1, 6)]
APP = {"name": "app", "process": "app"}


def heal_job(place: MemoryPlace, hosts: list[str], notify: list[dict[str, Any]], job: dict[str, Any], *, heals: bool) -> dict[str, dict[str, Any]]:
    """One heal job of ``hosts``, each failing alike (app, which no runbook knows, not running: the plan would be a new
    one), a forked process per host as Ansible forks its workers: each host's check meets the others' in the memory
    (fleet/incidents.py see), then its incident goes through the loop - the fallback runbook's restart tried on the
    fleet incident's canary first, which ``heals`` or not - and its people are told. The job's AWX variables ``job`` name
    its run; the result of each host."""
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    children = {}
    for host in hosts:
        failure = Failure(host=host, service="app", failure_class="not_running", summary="app is not running", evidence={}, spec=APP)
        args = validated(HEAL_SPEC, services=[APP], failures=[failure.to_dict()], notify=notify, fleet_min_hosts=5, max_attempts=1,
                         **place.options())
        session = HealSession(args, task_of(host, {**job, "ansible_play_hosts_all": hosts, "ansible_play_batch": hosts}))
        result_read, result_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker of one host
            outcome: dict[str, Any] = {}
            try:
                memory = place.open()
                tools = _tools(place.state_dir, ScriptedExecutor(), [HEALTHY if heals else STILL_DOWN], memory=memory, max_attempts=1,
                               target=Target(name=host, host_vars={}))
                os.write(ready_write, b".")
                os.read(go_read, 1)  # the checks of a storm end together
                fleet = see(FleetIncidents(memory.database), host, [failure], [], session.fleet, run_id=tools.blast_radius.run_id,
                            run_hosts=len(hosts), batch_hosts=len(hosts), at=time.time())
                outcome = {"result": session.handle([failure], tools, fleet)}
                memory.close()
            except Exception as exc:  # noqa: BLE001 - whatever it is, the parent fails the test with it
                outcome = {"error": repr(exc)}
            finally:  # a worker never returns into the test session
                with os.fdopen(result_write, "w") as out:
                    json.dump(outcome, out, default=str)
                os._exit(0)
        os.close(result_write)
        children[host] = (pid, result_read)
    for _host in hosts:
        os.read(ready_read, 1)
    os.write(go_write, b"." * len(hosts))
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


def test_a_fleet_events_job_tells_one_message_for_its_hosts_and_one_when_they_are_back(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        notify = [{"type": "webhook", "url": f"{recorder.url}/hook"}]
        results = heal_job(memory_place, STORM, notify, {"awx_job_id": 31}, heals=True)
    assert {result["incidents"][0]["status"] for result in results.values()} == {"healed"}
    opened, closed = recorder.bodies("/hook")
    assert (opened["event"], closed["event"]) == ("fleet_opened", "fleet_closed")
    assert sorted(opened["hosts"]) == STORM and opened["key"] == closed["key"] == f"sentinel.heal/fleet/{opened['fleet_incident']}"


def test_a_fleet_events_job_whose_canary_fails_tells_the_fleet_incident_and_the_canarys_attempt_and_a_later_job_nothing(
        memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        notify = [{"type": "webhook", "url": f"{recorder.url}/hook"}]
        first = heal_job(memory_place, STORM, notify, {"awx_job_id": 31}, heals=False)
        again = heal_job(memory_place, STORM, notify, {"awx_job_id": 32}, heals=False)
    assert {result["incidents"][0]["status"] for result in [*first.values(), *again.values()]} == {"escalated"}
    canary, opened = sorted(recorder.bodies("/hook"), key=lambda body: body["event"])  # the forks say theirs in any order
    assert opened["event"] == "fleet_opened" and sorted(opened["hosts"]) == STORM
    # the one host that tried the plan says what it tried; the others, with nothing run, are the fleet message's
    tried = [host for host, result in first.items() if any(attempt["outcome"] == "failed" for attempt in result["incidents"][0]["attempt_log"])]
    assert canary["event"] == "escalated" and [canary["host"]] == tried
    assert "attempt 1: service app start -> failed" in {fact["label"]: fact["text"] for fact in canary["facts"]}["Tried"]
