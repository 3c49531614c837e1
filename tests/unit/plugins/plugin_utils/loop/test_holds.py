"""The heal graph held: the kill switch, the flapping limit, silences, maintenance markers, observe and review modes,
and an incident another run is remediating.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

from loop_cases import audited

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silence, hands_off
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import summary_line
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import iso_utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import next_step
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure

THROWN = "suspended by alice at 2026-11-24 00:30:00 UTC: database failover"


def test_the_kill_switch_thrown_before_the_remediation_stops_it_and_nothing_runs(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], suspension=lambda: THROWN)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "record", "suspended"]
    assert outcome.state.status == "suspended" and THROWN in outcome.state.reason and "nothing ran" in outcome.state.reason
    assert executor.remediations == [] and not outcome.state.changed
    [episode] = tools.memory.episodes() if tools.memory else []
    assert episode["outcome"] == "suspended"


def test_the_kill_switch_thrown_during_the_run_stops_the_steps_not_yet_started(tmp_path: Path) -> None:
    polls = iter([None, None, THROWN])  # before the run; before its first step; before its second
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], suspension=lambda: next(polls, THROWN))
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "suspended"
    assert [(r.argv, r.status) for r in outcome.state.attempt.results] == [
        (("rm", "-f", "/run/nginx.pid"), "ok"), (("service", "nginx", "start"), "skipped")]
    assert "stopped after rm -f /run/nginx.pid" in outcome.state.reason


def test_the_kill_switch_says_itself_in_the_episode_the_audit_trail_and_what_to_do_next(tmp_path: Path) -> None:
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY], suspension=lambda: THROWN)
    incident = heal_incident(nginx_failure(), tools).to_dict()
    lift = "sentinel.heal.suspension state=absent decided_by=YOU (the playbook: ansible-playbook sentinel.heal.suspend -e resume=true)"
    assert incident["reason"] == (f"nginx: autonomous remediation is {THROWN}; nothing ran; the suspension limit holds until a person "
                                  f"resumes healing; to lift it now: {lift}")
    assert tools.memory is not None
    [episode] = tools.memory.episodes()
    assert json.loads(episode["results_json"])["limit"] == {"limit": "suspension", "said": THROWN, "lift": lift, "until": None,
                                                            "ends": "until a person resumes healing"}
    outcome = audited(tmp_path, incident)[-1]
    assert outcome["detail"]["outcome"] == "suspended" and outcome["episode_id"] == episode["id"]
    assert outcome["detail"]["limit"] == {"name": "suspension", "said": THROWN, "until": None, "ends": "until a person resumes healing",
                                          "lift": lift}
    assert next_step(incident) == f"Nothing ran on web1: the suspension limit holds nginx until a person resumes healing. To lift it now: {lift}"


def test_a_service_remediated_flap_limit_times_in_the_window_is_escalated_as_flapping_and_nothing_runs(tmp_path: Path) -> None:
    """Separate heals that worked count (the service keeps breaking); the refusal is an episode and an audit record that
    say the limit, until when and the command, and it is no remediation: it never counts toward the limit itself."""
    now = [time.time() - 1200]  # the third incident is now, as the report reads it
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY, HEALTHY], flap_limit=2, clock=lambda: now[0],
                   relapse_window=60)  # ten minutes apart: no relapse, each a failure of its own
    for _round in range(2):
        assert heal_incident(nginx_failure(), tools).state.status == "healed"
        now[0] += 600
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(), dataclasses.replace(tools, executor=executor))
    assert outcome.trace.path == ["diagnose", "record", "escalate"]
    incident = outcome.to_dict()
    assert outcome.state.status == "escalated" and incident["attempts"] == 0 and executor.runs == []
    reason = outcome.state.reason
    assert "nginx: flapping: remediated 2 times in the last 60 min (episodes 1, 2; the limit is 2: flap_limit=2, flap_window=3600)" in reason
    # the first of the two counted started 20 min ago: the window lets go of it in 40 min
    assert re.search(r"; nothing runs; the flapping limit holds until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d, in 40 min; "
                     r"to lift it now: sentinel\.heal\.flapping_reset host=web1 service=nginx decided_by=YOU$", reason), reason
    assert tools.memory is not None
    [refusal] = tools.memory.episodes(outcome="flapping")
    assert refusal["id"] == outcome.state.episodes[0] == incident["attempt_log"][0]["id"] and refusal["plan_json"] is None
    assert [row["id"] for row in tools.memory.remediations("web1", "nginx", since=0)] == [1, 2]  # the refusal is not one
    # the audit trail of the run (what the timeline callback appends) says it
    records = audited(tmp_path, incident)
    assert [record["kind"] for record in records] == ["incident_opened", "evidence", "outcome"]
    limit = records[-1]["detail"]["limit"]
    assert records[-1]["detail"]["outcome"] == "flapping" and records[-1]["episode_id"] == refusal["id"]
    assert limit["name"] == "flapping" and limit["until"] == iso_utc(now[0] - 1200 + 3600)
    assert limit["lift"] == "sentinel.heal.flapping_reset host=web1 service=nginx decided_by=YOU"
    # the report's next: the limit, until when and the command, not "fix the cause by hand"
    said = next_step(incident)
    assert re.match(r"Nothing ran on web1: the flapping limit holds nginx until \S+, in (39 min \d+ s|40 min) ", said), said
    assert said.endswith("To lift it now: sentinel.heal.flapping_reset host=web1 service=nginx decided_by=YOU") and "by hand" not in said
    assert summary_line("web1", incident, False) == f"web1: nginx escalated: {reason}"
    # off, it is not counted
    assert heal_incident(nginx_failure(), dataclasses.replace(tools, flap_limit=0, verify=lambda spec: HEALTHY)).state.status == "healed"


def test_a_first_incident_is_never_refused_by_the_flapping_limit_however_many_attempts_it_takes(tmp_path: Path) -> None:
    """Its own retries are max_attempts' to bound: at a limit of one, the first incident still gets every attempt."""
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [STILL_DOWN, HEALTHY], flap_limit=1, max_attempts=3)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "healed", outcome.state.reason
    assert outcome.to_dict()["attempts"] == 2 and len(executor.remediations) == 2
    assert tools.memory is not None and tools.memory.episodes(outcome="flapping") == []
    # the next incident is one too many
    assert heal_incident(nginx_failure(), tools).state.status == "escalated"


def test_a_silenced_service_is_checked_and_nothing_is_planned_or_run(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    now = time.time()  # the loop's clock stands still, so the span it reads is the one the silence was set for
    silence = Silence(id=7, hosts="web1", service="nginx", reason="disk swap", set_by="alice", set_at=0.0, until=now + 7200)
    tools = _tools(tmp_path, executor, [], silence=lambda failure: silence.hold() if failure.service == "nginx" else None, clock=lambda: now)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "record", "silenced"] and outcome.state.status == "silenced"
    assert outcome.state.reason.startswith("nginx: silenced by alice (silence 7): disk swap; checked, nothing planned or run; "
                                           "the silence limit holds until ")
    assert outcome.state.reason.endswith(", in 2 h; to lift it now: sentinel.heal.silence state=absent silence_id=7 decided_by=YOU")
    # the refusal is an episode, not a heal attempt
    assert executor.runs == [] and outcome.to_dict()["attempts"] == 0
    assert tools.memory is not None and [episode["outcome"] for episode in tools.memory.episodes()] == ["silenced"]


def test_a_maintenance_marker_on_the_host_holds_the_loop_and_a_malformed_one_warns(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], silence=lambda failure: hands_off(None, failure.facts.get("maintenance"), (), failure.service, 0.0,
                                                                             failure.host))
    marker = {"path": "/etc/sentinel-heal/maintenance", "reason": "new disk", "services": [], "until": None, "by": "alice", "problem": None}
    held = heal_incident(dataclasses.replace(nginx_failure(), facts={"maintenance": marker}), tools)
    assert held.trace.path == ["diagnose", "record", "silenced"] and executor.runs == []
    assert "nginx: in maintenance by alice until it is removed (/etc/sentinel-heal/maintenance): new disk" in held.state.reason
    assert held.state.reason.endswith("the maintenance_marker limit holds until the marker is removed; to lift it now: ansible web1 -b -m "
                                      "ansible.builtin.file -a 'path=/etc/sentinel-heal/maintenance state=absent' (a person's marker: "
                                      "remove it only once the work on the host is done)")
    broken = dict(marker, problem="is not owned by root (uid 1000)")
    warned = heal_incident(dataclasses.replace(nginx_failure(), facts={"maintenance": broken}), tools)
    assert warned.state.status == "silenced" and executor.runs == []
    assert warned.state.warnings == ["web1: the maintenance marker /etc/sentinel-heal/maintenance is not owned by root (uid 1000)"]


def test_observe_mode_plans_and_reports_what_it_would_run_and_runs_writes_and_waits_for_nothing(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], mode="observe")
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "observed"] and outcome.state.status == "observed"
    assert "nginx: observe mode, nothing ran and nothing waits: the plan from runbook nginx-stale-pid would be allow:" in outcome.state.reason
    assert [purpose for purpose, _argv in executor.runs] == ["evidence"]  # reads only
    assert outcome.to_dict()["plan"] is not None and tools.memory is not None and tools.memory.episodes() == []


def test_review_mode_makes_every_plan_wait_for_a_person_and_a_services_own_mode_wins(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], mode="review")
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "awaiting_approval" and outcome.state.plan_id is not None and executor.remediations == []
    assert outcome.state.reason == "review mode: a human approves every plan, even one the policy allows"
    autonomous = dataclasses.replace(nginx_failure(), spec={**nginx_failure().spec, "mode": "autonomous"})
    assert heal_incident(autonomous, dataclasses.replace(tools, verify=lambda spec: HEALTHY)).state.status == "healed"


def test_an_incident_another_run_is_remediating_is_not_started_again_and_names_that_run(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [])
    assert tools.memory is not None
    with tools.memory._conn:  # another job's remediation of nginx on web1, running now
        tools.memory._conn.execute("""INSERT INTO leases (run_id, host, service, acquired_at, expires_at, owner)
                                      VALUES ('awx-job-42', 'web1', 'nginx', 0, 4e9, 'elsewhere/1/1')""")
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path[-2:] == ["record", "in_progress_elsewhere"] and executor.remediations == []
    assert outcome.state.reason == ("nginx: in progress elsewhere, nothing ran here: a remediation of nginx on web1 by another run "
                                    "(awx-job-42) is running")
    assert tools.memory.episodes()[0]["outcome"] == "in_progress_elsewhere"
