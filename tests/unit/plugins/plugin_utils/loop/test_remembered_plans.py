"""The heal graph and memory: a fix verified before is planned again, a plan that failed is not tried again
until its time is up or its cause is gone, and only a verified recovery counts.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

import pytest
from loop_cases import AS_GOOD, read_ahead

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure


def test_second_identical_incident_is_planned_from_memory_without_a_second_call_for_its_evidence(tmp_path: Path) -> None:
    """The remembered fix is judged against the present evidence: what the check read ahead (nginx -t) is that."""
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY, HEALTHY], relapse_window=0)  # days apart: no relapse
    heal_incident(nginx_failure(pid=10), tools)
    executor = ScriptedExecutor()
    tools.executor = executor
    read = {"argv": ["nginx", "-t"], "become": True, "rc": 0, "output": CONFIG_OK["nginx -t"], "duration": 0.1}
    outcome = heal_incident(read_ahead(nginx_failure(pid=20), read), tools)
    assert outcome.state.status == "healed"
    assert outcome.to_dict()["plan"]["source"] == "memory"
    assert [purpose for purpose, _argvs in executor.runs] == ["remediation"]


@pytest.mark.parametrize(("later", "tried_again"), [(600, False), (86400 + 600, True)])
def test_a_plan_that_failed_for_the_fingerprint_in_an_earlier_job_is_not_tried_again_within_failed_ttl(
    tmp_path: Path, later: float, tried_again: bool,
) -> None:
    now = [1000.0]
    failed_plan = [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]
    earlier = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, earlier, [STILL_DOWN], max_attempts=1, clock=lambda: now[0], failed_plan_ttl=86400)
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "escalated"
    assert earlier.remediations == [failed_plan]
    now[0] += later
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(pid=20), dataclasses.replace(tools, executor=executor, verify=lambda spec: HEALTHY))
    assert outcome.state.status == "healed"
    assert executor.remediations == ([failed_plan] if tried_again else [[("service", "nginx", "start")]])


def test_a_remembered_fix_that_failed_since_is_not_replayed(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, STILL_DOWN, HEALTHY], max_attempts=1, relapse_window=0)  # days apart: no relapse
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    replayed = heal_incident(nginx_failure(pid=20), tools)
    assert replayed.state.status == "escalated" and replayed.to_dict()["plan"]["source"] == "memory"
    outcome = heal_incident(nginx_failure(pid=30), tools)
    assert outcome.state.status == "healed" and outcome.to_dict()["plan"]["source"] == "runbook"
    stale_pid_plan = [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]
    assert executor.remediations == [stale_pid_plan, stale_pid_plan, [("service", "nginx", "start")]]


SITE = "/etc/nginx/sites-available/default"
EDITED = {"good_at": 900.0, "files": [{"path": SITE, "change": "modified", "changed_at": 950.0}], "packages": []}


def _changed(failure: Failure, changes: Mapping[str, Any]) -> Failure:
    """The failure as service_check reports it with what changed since the service's last known good configuration."""
    return dataclasses.replace(failure, evidence=dict(failure.evidence, changes=changes))


@pytest.mark.parametrize(("changes", "tried_again"), [(AS_GOOD, True), (EDITED, False)])
def test_a_plan_that_failed_in_an_earlier_run_is_tried_again_once_a_person_removed_the_cause_it_failed_on(
    tmp_path: Path, changes: Mapping[str, Any], tried_again: bool,
) -> None:
    """The fingerprint is the same (the check quotes the same words); the evidence of the cause is not: the file that
    changed since nginx last worked is back as it was. The plan runs again in this run and the run says why."""
    now = [1000.0]
    failed_plan = [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]
    earlier = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, earlier, [STILL_DOWN], max_attempts=1, clock=lambda: now[0], failed_plan_ttl=86400)
    assert heal_incident(_changed(nginx_failure(pid=10), EDITED), tools).state.status == "escalated"
    now[0] += 600
    executor = ScriptedExecutor(CONFIG_OK)
    failure = _changed(nginx_failure(pid=20), changes)
    assert failure.fingerprint == nginx_failure(pid=10).fingerprint
    outcome = heal_incident(failure, dataclasses.replace(tools, executor=executor, verify=lambda spec: HEALTHY))
    assert outcome.state.status == "healed"
    assert executor.remediations == ([failed_plan] if tried_again else [[("service", "nginx", "start")]])
    said = [entry["message"] for entry in outcome.state.timeline if "is gone" in entry["message"]]
    if tried_again:
        [line] = said
        assert line.startswith("nginx: the cause reported at ")
        assert (f"failed: file {SITE} modified (mtime 950.0)) is gone (now: file {SITE} as last known good); trying again, "
                "the plan that failed on it too: rm -f /run/nginx.pid && service nginx start") in line
        # what the person reads of the run: the attempt, as its episode says it
        assert "the cause reported at" in outcome.to_dict()["attempt_log"][0]["diagnosis"]
    else:
        assert said == []


def _redis_looped(changes: Mapping[str, Any]) -> Failure:
    """redis on a systemd host after its Restart= looped into the start limit on a directive a person added; its
    journal since that last start holds redis's words."""
    journal = "\n".join(f"2026-12-02T04:00:00+0000 cache1 redis-server[80]: {line}" for line in (
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***", ">>> 'lab-unknown-directive yes'", "Bad directive or wrong number of arguments"))
    unit = {"Id": "redis-server.service", "ActiveState": "failed", "journal": journal}
    return Failure(host="cache1", service="redis", failure_class="restart_loop", summary="redis-cli ping: rc=1; its journal says: Bad directive",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "unit": unit, "changes": changes},
                   spec={"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server"},
                   facts={"service_manager": "systemd"})


def test_an_escalation_whose_cause_a_person_removed_between_two_runs_is_tried_again_in_the_next(tmp_path: Path) -> None:
    """The first run escalates the loop (restarting cannot help while redis.conf holds the directive); the person puts
    redis.conf back and leaves the unit failed. The next run's failure reads the same, its fingerprint too, and the
    journal still quotes redis: the configuration is as last known good now, and the unit is reset and started."""
    edited = {"good_at": 900.0, "files": [{"path": "/etc/redis/redis.conf", "change": "modified", "changed_at": 950.0}], "packages": []}
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [HEALTHY])
    first = heal_incident(_redis_looped(edited), tools)
    assert first.state.status == "escalated" and first.to_dict()["plan"]["reference"] == "systemd-restart-loop"
    assert executor.remediations == []
    second = heal_incident(_redis_looped(AS_GOOD), tools)
    assert _redis_looped(AS_GOOD).fingerprint == _redis_looped(edited).fingerprint
    assert second.state.status == "healed" and second.to_dict()["plan"]["reference"] == "systemd-restart-loop-cause-gone"
    assert executor.remediations == [[("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")]]
    [line] = [entry["message"] for entry in second.state.timeline if "is gone" in entry["message"]]
    assert "(episode 1, escalated: file /etc/redis/redis.conf modified (mtime 950.0)) is gone" in line and line.endswith("; trying again")


def test_a_remembered_fix_is_sent_away_before_it_runs_when_the_configuration_test_fails_now(tmp_path: Path) -> None:
    """The fix remembered for a killed master (nginx -t passed then) is no fix for a typo: nginx -t fails now."""
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], relapse_window=0)  # each failure long after the last heal: no relapse
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    typo = {"argv": ["nginx", "-t"], "become": True, "rc": 1, "duration": 0.1,
            "output": 'nginx: [emerg] unknown directive "server_nmae" in /etc/nginx/sites-enabled/default:3\n'
                      "nginx: configuration file /etc/nginx/nginx.conf test failed"}
    outcome = heal_incident(read_ahead(nginx_failure(pid=20), typo), tools)
    assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["source"] == "runbook"
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    [line] = [entry["message"] for entry in outcome.state.timeline if "not replayed" in entry["message"]]
    assert "was verified on no fact of trouble, and now configuration test nginx -t fails: not replayed" in line
    # with the same facts as then, the fix is replayed
    passes = dict(typo, rc=0, output=CONFIG_OK["nginx -t"])
    tools.verify = lambda spec: HEALTHY
    assert heal_incident(read_ahead(nginx_failure(pid=30), passes), tools).to_dict()["plan"]["source"] == "memory"


def test_a_plan_that_failed_in_this_incident_is_not_tried_again_when_memory_could_not_record_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [STILL_DOWN, HEALTHY], max_attempts=2)
    assert tools.memory is not None
    with tools.memory._conn:  # the memory's disk is full: no episode is written
        tools.memory._conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON episodes BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "healed"
    assert [warning.split(":")[0] for warning in outcome.state.warnings] == ["episode of attempt 1 not recorded", "episode of attempt 2 not recorded"]
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")], [("service", "nginx", "start")]]


def test_an_episode_is_recorded_verified_only_when_verification_passed(tmp_path: Path) -> None:
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [STILL_DOWN, HEALTHY], max_attempts=2)
    assert heal_incident(nginx_failure(), tools).state.status == "healed"
    assert tools.memory is not None
    episodes = sorted(tools.memory.episodes(), key=lambda row: row["id"])
    assert [(row["outcome"], row["verified"]) for row in episodes] == [("failed", 0), ("healed", 1)]
    assert [json.loads(row["results_json"])["verification"]["healthy"] for row in episodes] == [False, True]
    # only the verified one is what memory offers the next incident
    fix = tools.memory.verified_fix(nginx_failure().fingerprint)
    assert fix is not None and fix.episode_id == episodes[1]["id"]
