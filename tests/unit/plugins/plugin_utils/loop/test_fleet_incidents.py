"""The loop in a fleet incident, with a real memory: no new plan runs on any host, a verified plan runs on the incident's
canary first and on the others only once it verified there, never once it failed there; and the hosts' checks, met in
memory, open the incident, a healed host leaves it and the last one closes it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident, FleetIncidents, FleetSettings, see, signature_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import BlastRadius, process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import Canaries, CanaryKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure

HOSTS = ("web1", "web2", "web3", "web4", "web5")
START = [("service", "nginx", "start")]  # the runbook service-not-running, verified by its authors


def _incident(memory: Memory) -> FleetIncident:
    """Five hosts of one run whose nginx is not running, met in memory as their forks meet: one fleet incident."""
    failures = [nginx_failure("not_running", host=host) for host in HOSTS]
    incidents = FleetIncidents(memory.database)
    views = [see(incidents, failure.host, [failure], ["redis"], FleetSettings(), run_id="run-1", run_hosts=5, batch_hosts=1, at=1000.0 + n)
             for n, failure in enumerate(failures)]
    # the third host makes half of the run's five (min_percent 50, from three hosts on); the others join it
    assert [bool(view.incidents) for view in views] == [False, False, True, True, True]
    assert views[2].incidents["nginx"].hosts == HOSTS[:3]
    incident = views[-1].incidents["nginx"]
    assert incident.hosts == HOSTS and incident.signature == signature_of(failures[0])
    return incident


def _on(tools: Toolkit, host: str, **changes: Any) -> Toolkit:
    return dataclasses.replace(tools, target=Target(name=host, host_vars={}), **changes)


def test_in_a_fleet_incident_a_new_plan_runs_on_no_host_and_each_escalates_naming_the_incident(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [], blast_radius=BlastRadius(run_id="run-1", run_hosts=5))
    tools.planner = Planner(RunbookLibrary.load(builtin=False), tools.memory)  # no runbook: the generic plan, never verified
    assert tools.memory is not None
    incident = _incident(tools.memory)
    for host in HOSTS[:2]:
        outcome = heal_incident(nginx_failure("not_running", host=host), _on(tools, host), fleet_incident=incident)
        assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "escalate"]
        assert outcome.state.status == "escalated"
        assert f"fleet incident {incident.id}: nginx fails the same way on 5 hosts" in outcome.state.reason
        assert "a new plan (generic) is not tried host by host in a fleet incident" in outcome.state.reason
        assert outcome.to_dict()["fleet_incident"]["hosts"] == list(HOSTS)
    assert executor.remediations == []
    assert [episode["outcome"] for episode in tools.memory.episodes()] == ["fleet", "fleet"]


def test_a_verified_plan_runs_on_the_incidents_canary_first_then_on_the_others_and_healed_hosts_close_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [HEALTHY] * 5, blast_radius=BlastRadius(run_id="run-1", run_hosts=5))
    assert tools.memory is not None
    incident = _incident(tools.memory)
    outcomes = [heal_incident(nginx_failure("not_running", host=host), _on(tools, host), fleet_incident=incident) for host in HOSTS]
    assert [outcome.state.status for outcome in outcomes] == ["healed"] * 5
    said = [" ".join(line["message"] for line in outcome.state.timeline) for outcome in outcomes]
    assert "the fleet incident's plan: tried here first, the canary of the fleet incident" in said[0]
    assert all("the fleet incident's plan, verified on web1 first in the fleet incident" in text for text in said[1:])
    assert executor.remediations == [START] * 5
    for host in HOSTS[:-1]:
        assert FleetIncidents(tools.memory.database).clear_fleet_incidents(host, ["nginx"], at=2000.0) == []
    (closed,) = FleetIncidents(tools.memory.database).clear_fleet_incidents(HOSTS[-1], ["nginx"], at=2001.0)
    assert closed.id == incident.id and closed.closed_at == 2001.0


def test_once_the_canary_failed_the_plan_runs_on_no_other_host_of_the_incident_in_any_run(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [STILL_DOWN], max_attempts=1, blast_radius=BlastRadius(run_id="run-1", run_hosts=5))
    assert tools.memory is not None
    incident = _incident(tools.memory)
    canary = heal_incident(nginx_failure("not_running", host="web1"), _on(tools, "web1"), fleet_incident=incident)
    assert canary.state.status == "escalated" and executor.remediations == [START]
    # another host of the same kind: the plan failed for this fingerprint, so the planner has none left; its page names the incident
    later = _on(tools, "web2", blast_radius=BlastRadius(run_id="eda-9", run_hosts=1))
    same_kind = heal_incident(nginx_failure("not_running", host="web2"), later, fleet_incident=incident)
    assert same_kind.trace.path == ["diagnose", "plan", "record", "escalate"]
    assert f"fleet incident {incident.id}: nginx fails the same way on 5 hosts" in same_kind.state.reason
    # a host of another release (another fingerprint, the same failure), in a later run: the incident's canary failed there
    other_kind = dataclasses.replace(nginx_failure("not_running", host="web3"), facts={"os": {"id": "ubuntu"}})
    outcome = heal_incident(other_kind, _on(tools, "web3", blast_radius=BlastRadius(run_id="eda-10", run_hosts=1)), fleet_incident=incident)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "escalate"]
    assert "the plan failed verification on web1, the incident's canary: it runs on no other host" in outcome.state.reason
    assert executor.remediations == [START]


def test_a_host_waits_for_the_incidents_canary_running_elsewhere(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [HEALTHY], blast_radius=BlastRadius(run_id="run-1", run_hosts=5))
    memory = tools.memory
    assert memory is not None
    incident = _incident(memory)
    plan = tools.planner.plan(nginx_failure("not_running"), Diagnosis("x", None, {}), frozenset(), None)
    key = CanaryKey.of_fleet_incident(incident.id, incident.signature, plan)
    assert Canaries(memory.database).claim_canary(key, host="web1", owner=process_owner(), at=time.time()).host == "web1"  # web1's fork has it
    now, waits = [time.time()], []

    def canary_heals(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        if len(waits) == 2:
            episode_id, _plan_id = memory.record_attempt(incident_id="web1", failure=nginx_failure("not_running"), run_id="run-1",
                                                         attempt=Attempt(number=1, plan=plan, outcome="healed"))
            Canaries(memory.database).settle_canary(key, host="web1", outcome="healed", episode_id=episode_id)

    outcome = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2", sleep=canary_heals, clock=lambda: now[0]),
                            fleet_incident=incident)
    assert outcome.state.status == "healed" and len(waits) == 2 and executor.remediations == [START]
