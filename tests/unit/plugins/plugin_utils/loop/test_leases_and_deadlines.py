"""The heal graph within its limits: the blast radius and max running (leases, held and renewed while a run polls),
the run's attempt budget and the incident's deadline.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from loop_cases import audited

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import (
    LEASE_GRACE_S,
    LEASE_RENEW_S,
    BlastRadius,
    HeldLease,
    LeaseRequest,
    Leases,
    process_owner,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import iso_utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import next_step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure


def test_a_remediation_over_the_blast_radius_is_deferred_and_nothing_runs(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    radius = BlastRadius(max_hosts_per_run=1, run_id="run-1")
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], blast_radius=radius)
    assert heal_incident(nginx_failure(host="web1"), tools).state.status == "healed"
    outcome = heal_incident(nginx_failure(host="web2"), dataclasses.replace(tools, target=Target(name="web2", host_vars={})))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "record", "deferred"]
    assert outcome.state.status == "deferred" and "the cap per run is 1" in outcome.state.reason
    assert len(executor.remediations) == 1  # web1's only
    assert tools.memory is not None and tools.memory.episodes(host="web2")[0]["outcome"] == "deferred"
    lift = "ansible-playbook sentinel.heal.heal -i INVENTORY -e autoheal_max_hosts_per_run=2 (a higher cap; 0 is none)"
    assert outcome.state.reason == ("nginx: deferred, nothing ran: this run already remediated 1 hosts (the cap per run is 1); the next run "
                                    f"takes it up; the max_hosts_per_run limit holds until this run ends; to lift it now: {lift}")
    incident = outcome.to_dict()
    limit = audited(tmp_path, incident)[-1]["detail"]["limit"]
    assert (limit["name"], limit["until"], limit["ends"], limit["lift"]) == ("max_hosts_per_run", None, "until this run ends", lift)
    assert next_step(incident) == f"Nothing ran on web2: the max_hosts_per_run limit holds nginx until this run ends. To lift it now: {lift}"


def test_a_remediation_over_max_running_is_deferred_until_the_running_one_ends_at_the_latest(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], blast_radius=BlastRadius(max_running=1, run_id="run-1"))
    assert tools.memory is not None
    now = time.time()
    other = nginx_failure(host="web2")
    # another fork remediates web2 now: its lease ends in 10 min at the latest
    running = Leases(tools.memory.database).acquire_lease(LeaseRequest(
        radius=tools.blast_radius, incident_id="web2-incident", failure=other, attempt=Attempt(number=1, started_at=now), at=now, ttl=600,
        owner=process_owner(), steps_started=tools.steps_started))
    assert isinstance(running, HeldLease)
    incident = heal_incident(nginx_failure(), tools).to_dict()
    assert incident["status"] == "deferred" and executor.remediations == []
    assert "1 remediations are running (the cap on remediations at the same time is 1); the next run takes it up; " in incident["reason"]
    assert re.search(r"the max_running limit holds until \S+, in (9 min \d+ s|10 min); to lift it now: ansible-playbook sentinel\.heal\.heal "
                     r"-i INVENTORY -e autoheal_max_running=2 \(a higher cap; 0 is none\)$", incident["reason"]), incident["reason"]
    limit = audited(tmp_path, incident)[-1]["detail"]["limit"]
    assert limit["name"] == "max_running" and limit["until"] == iso_utc(now + 600)
    assert next_step(incident).startswith("Nothing ran on web1: the max_running limit holds nginx until ")


def test_every_remediation_holds_a_lease_while_it_runs_and_releases_it(tmp_path: Path) -> None:
    seen: list[tuple[int, str]] = []

    def verify(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        assert tools.memory is not None
        seen.extend((row["id"], row["run_dir"]) for row in tools.memory._conn.execute("SELECT id, run_dir FROM leases"))
        return HEALTHY

    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], verify=verify)

    class Watching(ScriptedExecutor):
        def run(self, target: Target, steps: Sequence[RunStep], **kwargs: Any) -> RunReport:
            report = super().run(target, steps, **kwargs)
            verify({})  # what memory holds while the run is on
            return report

    watching = Watching(CONFIG_OK)
    assert heal_incident(nginx_failure(), dataclasses.replace(tools, executor=watching)).state.status == "healed"
    assert seen and seen[0][1].startswith("/nonexistent/remediation-")  # leased with its run directory, no cap set
    assert tools.memory is not None and tools.memory._conn.execute("SELECT count(*) FROM leases").fetchone()[0] == 0


def test_a_remediation_renews_its_lease_as_its_run_polls_so_another_node_knows_it_still_runs(tmp_path: Path) -> None:
    now = [1000.0]
    renewed: list[float] = []

    class Polling(ScriptedExecutor):
        def run(self, target: Target, steps: Sequence[RunStep], *, stop: Callable[[], bool] | None = None, **kwargs: Any) -> RunReport:
            if kwargs["purpose"] != "remediation":
                return super().run(target, steps, stop=stop, **kwargs)
            assert stop is not None
            for _second in range(int(LEASE_RENEW_S) * 2 + 1):  # the run polls every second for half a minute
                now[0] += 1.0
                stop()
            assert tools.memory is not None
            renewed.extend(row[0] for row in tools.memory._conn.execute("SELECT renewed_at FROM leases"))
            return super().run(target, steps, stop=stop, **kwargs)

    tools = _tools(tmp_path, Polling(CONFIG_OK), [HEALTHY], clock=lambda: now[0])
    assert heal_incident(nginx_failure(), tools).state.status == "healed"
    assert renewed == [1000.0 + 2 * LEASE_RENEW_S]  # leased at 1000, written at its second beat, read a second later


def test_a_remediation_whose_lease_another_job_took_back_is_stopped_and_says_so(tmp_path: Path) -> None:
    now = [1000.0]

    class CutOff(ScriptedExecutor):
        """A run whose job was cut off from the memory for a while: another job found its lease ended meanwhile."""

        def run(self, target: Target, steps: Sequence[RunStep], *, stop: Callable[[], bool] | None = None, **kwargs: Any) -> RunReport:
            if kwargs["purpose"] != "remediation":
                return super().run(target, steps, stop=stop, **kwargs)
            assert stop is not None and tools.memory is not None
            with Memory(tmp_path) as next_job:
                assert Leases(next_job.database).reap_interrupted(at=now[0] + LEASE_GRACE_S + 1, steps_started=tools.steps_started) != []
            for _second in range(int(LEASE_RENEW_S)):  # its next beat finds the lease gone
                now[0] += 1.0
                stopped = stop()
            assert stopped
            return super().run(target, steps, stop=stop, **kwargs)

    executor = CutOff(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], clock=lambda: now[0])
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path[-4:] == ["rollout", "execute", "record", "escalate"]
    assert outcome.state.status == "escalated" and outcome.state.attempts[-1].outcome == "interrupted"
    assert outcome.state.reason == (
        "nginx: the remediation was stopped before any step ran: this job lost its lease (another job found its lease ended and "
        "recorded this remediation as interrupted); it is not healed here, and the next run takes it up")
    assert all(result.status == "skipped" for result in outcome.state.attempts[-1].results)
    assert tools.memory is not None and tools.memory._conn.execute("SELECT count(*) FROM leases").fetchone()[0] == 0


def test_the_runs_attempt_budget_defers_what_is_past_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], blast_radius=BlastRadius(max_attempts_per_run=1, run_id="run-1"))
    assert heal_incident(nginx_failure(host="web1"), tools).state.status == "healed"
    outcome = heal_incident(nginx_failure(host="web1"), tools)
    assert outcome.state.status == "deferred" and "its budget is 1" in outcome.state.reason
    assert len(executor.remediations) == 1


def test_no_attempt_starts_past_the_incidents_deadline_and_a_run_gets_only_what_is_left(tmp_path: Path) -> None:
    now = [1000.0]
    executor = ScriptedExecutor(CONFIG_OK)
    failing = {"healthy": False, "summary": "still down", "checks": []}

    def verify(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        now[0] += 350  # each remediation and check takes its time
        return failing

    tools = _tools(tmp_path, executor, [], verify=verify, clock=lambda: now[0], incident_timeout=600, max_attempts=5)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "escalated"
    assert "the incident's deadline (600 s) passed after 2 remediation attempt(s)" in outcome.state.reason
    assert outcome.trace.path[-2:] == ["diagnose", "escalate"] and len(executor.remediations) == 2
    # evidence, then the remediation, each attempt: a run may take only what is left of the deadline
    assert executor.timeouts == [600.0, 600.0, 250.0, 250.0]


def test_a_run_that_would_start_past_the_deadline_does_not_start(tmp_path: Path) -> None:
    now = [1000.0]
    executor = ScriptedExecutor(CONFIG_OK)

    def clock() -> float:
        now[0] += 200  # slow planning: every look at the clock is later
        return now[0]

    tools = _tools(tmp_path, executor, [], clock=clock, incident_timeout=300)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "record", "escalate"]
    assert executor.remediations == [] and "deadline (300 s) passed after 0 remediation attempt(s)" in outcome.state.reason
    assert tools.memory is not None and tools.memory.episodes()[0]["outcome"] == "escalated"


def test_a_host_that_stops_answering_after_the_run_ends_unreachable_with_the_attempt_recorded(tmp_path: Path) -> None:
    def verify(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        raise HostUnreachable("the host did not answer", field="host", value="web1", hint="Timeout waiting for privilege escalation prompt")

    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], verify=verify, verify_retries=3)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "unreachable"]
    assert outcome.state.status == "unreachable" and "stopped answering after the remediation ran" in outcome.state.reason
    assert tools.memory is not None
    [episode] = tools.memory.episodes()
    assert episode["outcome"] == "unreachable" and '"status": "ok"' in episode["results_json"]  # what ran is kept
