"""The heal graph: which path an incident takes for each kind of outcome.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are
scripted here because these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jsonschema
import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._host.systemd import journal_cause
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import (
    LEASE_GRACE_S,
    LEASE_RENEW_S,
    BlastRadius,
    HeldLease,
    LeaseRequest,
    process_owner,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import Canary, CanaryKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silence, hands_off
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy, starts_the_service
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import REFUSED_BY_THE_HOST, Attempt, Failure, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import evidence_ahead
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import summary_line
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.rollout import CANARY_POLL_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import append_audit, audit_records, iso_utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import next_step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, decoded_episode
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure

AUDIT_SCHEMA = json.loads((Path(__file__).resolve().parents[5] / "docs" / "audit-schema.json").read_text())


def test_healed_on_the_first_attempt(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "healed"]
    assert outcome.state.status == "healed"
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    assert outcome.state.episodes and outcome.state.changed


def test_second_identical_incident_is_planned_from_memory_without_a_second_call_for_its_evidence(tmp_path: Path) -> None:
    """The remembered fix is judged against the present evidence: what the check read ahead (nginx -t) is that."""
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY, HEALTHY], relapse_window=0)  # days apart: no relapse
    heal_incident(nginx_failure(pid=10), tools)
    executor = ScriptedExecutor()
    tools.executor = executor
    read = {"argv": ["nginx", "-t"], "become": True, "rc": 0, "output": CONFIG_OK["nginx -t"], "duration": 0.1}
    outcome = heal_incident(_read_ahead(nginx_failure(pid=20), read), tools)
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
AS_GOOD = {"good_at": 900.0, "files": [], "packages": []}


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


def _killed_into_the_start_limit(service: str, unit: str, ending: Mapping[str, Any], journal_lines: Sequence[str]) -> Failure:
    """A unit of a systemd host whose main process was killed again and again, brought back by its Restart= each time
    until systemd gave up (#52: apache2, haproxy, memcached alike); its journal as systemd and the service wrote it."""
    journal = "\n".join(f"2026-12-02T04:00:00+0000 web1 {line}" for line in journal_lines)
    state = {"Id": unit, "ActiveState": "failed", "SubState": "failed", "NRestarts": "5", "journal": journal, "cause": journal_cause(journal),
             **ending}
    return Failure(host="web1", service=service, failure_class="restart_loop", summary=f"{service}: unit {unit} failed",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "unit": state, "changes": AS_GOOD},
                   spec={"name": service, "ports": [80]}, facts={"service_manager": "systemd"})


# as systemd shows them: the failed step is the main process's own, ExecStart=
KILLED = {"Result": "signal", "ExecMainCode": "2", "ExecMainStatus": "9",
          "failed_step": {"step": "ExecStart", "path": "/usr/sbin/haproxy", "code": "killed", "status": "9"}}
SYSTEMD_GAVE_UP = ("systemd[1]: haproxy.service: Main process exited, code=killed, status=9/KILL",
                   "systemd[1]: haproxy.service: Failed with result 'signal'.",
                   "systemd[1]: haproxy.service: Scheduled restart job, restart counter is at 5.",
                   "systemd[1]: haproxy.service: Start request repeated too quickly.",
                   "systemd[1]: Failed to start haproxy.service - HAProxy Load Balancer.")


@pytest.mark.parametrize("ending", [
    KILLED,  # killed from outside at each start, the killer gone since
    {"Result": "core-dump", "ExecMainCode": "3", "ExecMainStatus": "11",  # crashes, on something no longer there
     "failed_step": {"step": "ExecStart", "path": "/usr/sbin/haproxy", "code": "dumped", "status": "11"}},
    {"Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "1"},  # exited with an error, and said nothing of it
], ids=["killed", "crashed", "exited"])
def test_a_unit_looped_into_its_start_limit_with_no_cause_said_is_reset_and_started_once(tmp_path: Path, ending: Mapping[str, str]) -> None:
    """One reset-failed and one start bring it back: no page (#52). Whatever the service is."""
    executor = ScriptedExecutor()
    failure = _killed_into_the_start_limit("haproxy", "haproxy.service", ending, SYSTEMD_GAVE_UP)
    outcome = heal_incident(failure, _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.state.status == "healed" and outcome.to_dict()["plan"]["reference"] == "systemd-restart-loop-no-cause"
    assert executor.remediations == [[("systemctl", "reset-failed", "haproxy"), ("systemctl", "start", "haproxy")]]


def test_a_loop_whose_cause_is_still_there_is_tried_once_and_escalated(tmp_path: Path) -> None:
    """The killer still at work: the start is killed too, and the next attempt escalates instead of trying again."""
    executor = ScriptedExecutor()
    failure = _killed_into_the_start_limit("haproxy", "haproxy.service", KILLED, SYSTEMD_GAVE_UP)
    outcome = heal_incident(failure, _tools(tmp_path, executor, [STILL_DOWN] * 10, max_attempts=3))
    assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["reference"] == "systemd-restart-loop"
    assert executor.remediations == [[("systemctl", "reset-failed", "haproxy"), ("systemctl", "start", "haproxy")]]
    # the page says both give-ups: what the first attempt did, and that it failed again after it
    assert "attempt 1 ran systemctl reset-failed haproxy; systemctl start haproxy and it failed again: " in outcome.state.reason
    assert outcome.state.reason.index("attempt 1 ran") < outcome.state.reason.index("keeps failing under systemd's own Restart=")


@pytest.mark.parametrize("ending", [
    {"Result": "oom-kill", "ExecMainCode": "2", "ExecMainStatus": "9"},  # the kernel killed it for its memory: it would again
    # an admin's ExecStartPre= check failed each time: the unit names what it checks (the think loop reads it)
    {"Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "0",
     "failed_step": {"step": "ExecStartPre", "path": "/usr/bin/test", "code": "exited", "status": "1"}},
], ids=["oom-kill", "start-pre-check"])
def test_a_unit_killed_for_its_memory_or_stopped_by_a_check_of_its_unit_is_not_restarted(tmp_path: Path, ending: Mapping[str, Any]) -> None:
    executor = ScriptedExecutor()
    failure = _killed_into_the_start_limit("haproxy", "haproxy.service", ending, SYSTEMD_GAVE_UP)
    outcome = heal_incident(failure, _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["reference"] == "systemd-restart-loop"
    assert executor.remediations == []


def test_a_unit_killed_into_its_start_limit_whose_own_words_name_a_cause_is_escalated_with_them(tmp_path: Path) -> None:
    """Killed each time, but redis says its configuration is wrong: the cause is that, a restart would not help."""
    executor = ScriptedExecutor()
    said = (*SYSTEMD_GAVE_UP[:1], "redis-server[80]: *** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***", "redis-server[80]: >>> 'lab-unknown yes'",
            "redis-server[80]: Bad directive or wrong number of arguments", *SYSTEMD_GAVE_UP[1:])
    outcome = heal_incident(_killed_into_the_start_limit("redis", "redis-server.service", KILLED, said), _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["reference"] == "systemd-restart-loop"
    assert executor.remediations == []


def test_a_remembered_fix_is_sent_away_before_it_runs_when_the_configuration_test_fails_now(tmp_path: Path) -> None:
    """The fix remembered for a killed master (nginx -t passed then) is no fix for a typo: nginx -t fails now."""
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], relapse_window=0)  # each failure long after the last heal: no relapse
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    typo = {"argv": ["nginx", "-t"], "become": True, "rc": 1, "duration": 0.1,
            "output": 'nginx: [emerg] unknown directive "server_nmae" in /etc/nginx/sites-enabled/default:3\n'
                      "nginx: configuration file /etc/nginx/nginx.conf test failed"}
    outcome = heal_incident(_read_ahead(nginx_failure(pid=20), typo), tools)
    assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["source"] == "runbook"
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    [line] = [entry["message"] for entry in outcome.state.timeline if "not replayed" in entry["message"]]
    assert "was verified on no fact of trouble, and now configuration test nginx -t fails: not replayed" in line
    # with the same facts as then, the fix is replayed
    passes = dict(typo, rc=0, output=CONFIG_OK["nginx -t"])
    tools.verify = lambda spec: HEALTHY
    assert heal_incident(_read_ahead(nginx_failure(pid=30), passes), tools).to_dict()["plan"]["source"] == "memory"


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


def test_a_failure_no_runbook_knows_gets_one_blind_start_then_escalates_with_what_the_evidence_says(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    said = '[emerg] open() "/run/nginx/x.sock" failed (13: Permission denied)'
    evidence = dict(nginx_failure("not_running").evidence, logs={"/var/log/nginx/error.log": said})
    failure = dataclasses.replace(nginx_failure("not_running"), evidence=evidence)
    outcome = heal_incident(failure, _tools(tmp_path, executor, [STILL_DOWN] * 5, max_attempts=3))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "diagnose", "plan", "record", "escalate"]
    assert outcome.state.status == "escalated"
    # one start, not a restart after it: a second blind try cannot help where the first failed
    assert executor.remediations == [[("service", "nginx", "start")]]
    assert "so it is not restarted blindly again" in outcome.state.reason
    assert 'what it says: "[emerg] open() "/run/nginx/x.sock" failed (13: Permission denied)' in outcome.state.reason
    assert len(outcome.state.episodes) == 2


def test_config_error_escalates_without_running_any_remediation(tmp_path: Path) -> None:
    executor = ScriptedExecutor({"nginx -t": "nginx: [emerg] unknown directive \"bogus\" in /etc/nginx/sites-enabled/default:3"})
    outcome = heal_incident(nginx_failure("not_running"), _tools(tmp_path, executor, []))
    assert outcome.trace.path == ["diagnose", "plan", "record", "escalate"]
    assert 'unknown directive "bogus"' in outcome.state.reason
    assert executor.remediations == [] and [purpose for purpose, _argvs in executor.runs] == ["evidence"]
    assert not outcome.state.changed


UPGRADE = {"action": "upgrade", "package": "nginx", "before": "1.22.1-9", "after": "1.22.1-9+deb12u1", "at": 1500.0}
CHANGED = {"good_at": 1000.0, "packages": [UPGRADE],
           "files": [{"path": "/etc/nginx/sites-enabled/default", "change": "modified", "changed_at": 1700.0, "before_failure_s": 240,
                      "diff": "--- /etc/nginx/sites-enabled/default (last known good)\n+++ /etc/nginx/sites-enabled/default\n"
                              "@@ -1,2 +1,2 @@\n server {\n-    listen 80 default_server;\n+    listen 80 defualt_server;\n"}]}


def test_an_escalation_leads_with_what_changed_since_the_service_last_worked_and_the_audit_record_keeps_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor({"nginx -t": "nginx: [emerg] invalid parameter \"defualt_server\" in /etc/nginx/sites-enabled/default:2"})
    failure = nginx_failure("not_running")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "changes": CHANGED, "collected_at": 1940.0})
    tools = _tools(tmp_path, executor, [])
    outcome = heal_incident(failure, tools)
    assert outcome.trace.path == ["diagnose", "plan", "record", "escalate"] and executor.remediations == []
    assert outcome.state.reason.startswith(
        "what changed since it last worked: /etc/nginx/sites-enabled/default modified 4 min before the failure: "
        "'-    listen 80 default_server;' '+    listen 80 defualt_server;'; package nginx upgraded 1.22.1-9 -> 1.22.1-9+deb12u1 "
        "7 min before the failure. "), outcome.state.reason
    assert 'invalid parameter "defualt_server"' in outcome.state.reason
    [episode] = tools.memory.episodes(limit=5)  # type: ignore[union-attr]
    [opened] = [record for record in audit_records(decoded_episode(episode)) if record["kind"] == "incident_opened"]
    assert opened["detail"]["changes"] == CHANGED
    schema = json.loads((Path(__file__).resolve().parents[5] / "docs" / "audit-schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(opened)


def test_a_restore_is_handed_to_the_host_with_the_services_own_configuration_test_and_no_other_step_is(tmp_path: Path) -> None:
    """Without the executor on the host, the module that puts the file back runs the test the step carries: this
    service's declared one (a configuration nginx -t alone does not read), which undoes a restore it fails."""
    site, good = "/etc/nginx/sites-available/default", "a" * 64
    executor = ScriptedExecutor({"nginx -t": f'nginx: [emerg] invalid parameter "defualt_server" in {site}:2\n'
                                             "nginx: configuration file /etc/nginx/nginx.conf test failed"})
    failure = nginx_failure("not_running")
    changed = {"good_at": 1000.0, "packages": [], "files": [dict(CHANGED["files"][0], path=site, good_sha256=good)]}
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "changes": changed}, spec={
        **failure.spec, "restore_known_good": "auto", "config_test": "/usr/sbin/nginx -t -c /etc/nginx/prod.conf"})
    outcome = heal_incident(failure, _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.state.status == "healed"
    restore, restart = executor.steps[-1]
    assert restore.argv == ("sentinel-heal-restore", site, good) and restart.argv == ("service", "nginx", "restart")
    assert (restore.restore_test, restart.restore_test) == (("/usr/sbin/nginx", "-t", "-c", "/etc/nginx/prod.conf"), ())


def test_plan_needing_approval_is_stored_and_nothing_runs(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    policy_file = tmp_path / "strict.yml"
    policy_file.write_text("version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n")
    tools = _tools(tmp_path, executor, [], policy=load_policy(policy_file))
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "ask_human", "record", "await_approval"]
    assert outcome.state.status == "awaiting_approval" and outcome.state.plan_id
    assert executor.remediations == []
    stored = tools.memory.plan(outcome.state.plan_id)  # type: ignore[union-attr]
    assert stored is not None and stored["status"] == "pending" and "rm" in stored["plan_json"]


def test_blocked_plan_escalates_and_nothing_runs(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "evil.md").write_text(
        "---\nid: evil\ntitle: evil\nservices: [nginx]\nsteps: ['service {init_service} start', 'dd if=/dev/zero of=/dev/sda']\n"
        "priority: 1000\n---\n"
    )
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, executor, [], planner=Planner(RunbookLibrary.load([runbooks]), None)))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "record", "escalate"]
    assert "blocked" in outcome.state.reason and "dd" in outcome.state.reason
    assert executor.remediations == []


def test_check_mode_stops_at_the_guard_and_writes_nothing(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], check_mode=True, memory=None)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "check_only"]
    assert outcome.state.status == "planned"
    assert executor.runs == []  # not even evidence commands run in check mode
    assert Memory(tmp_path).episodes() == []


def test_unreachable_host_ends_unreachable(tmp_path: Path) -> None:
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, ScriptedExecutor(CONFIG_OK, unreachable=True), []))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "record", "unreachable"]
    assert outcome.state.status == "unreachable"


def test_verification_is_retried_before_an_attempt_counts_as_failed(tmp_path: Path) -> None:
    waits: list[float] = []
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [STILL_DOWN, STILL_DOWN, HEALTHY], verify_retries=3, verify_wait=2.0, sleep=waits.append)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "healed" and len(outcome.state.attempts) == 1
    assert waits == [2.0, 2.0]


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_attempt_budget_is_respected(tmp_path: Path, max_attempts: int) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, executor, [STILL_DOWN] * 10, max_attempts=max_attempts))
    assert outcome.state.status == "escalated"
    assert len(executor.remediations) <= max_attempts


def test_the_timeline_report_escapes_host_output(tmp_path: Path) -> None:
    from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import host_result
    from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import run_report_html
    from ansible_collections.sentinel.heal.plugins.plugin_utils.report.timeline import timeline_text

    failure = nginx_failure()
    hostile = type(failure)(**{**failure.__dict__, "summary": "<script>alert('pwned')</script> nginx is not running"})
    outcome = heal_incident(hostile, _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY]))
    hosts = {"web1": host_result("web1", [outcome], check_mode=False)}
    text = timeline_text(hosts)
    assert text.startswith("web1 nginx: healed after 1 attempt(s) [diagnose > plan > guard > rollout > execute > verify > record > healed]")
    page = run_report_html(hosts, title="run <1>")
    assert "<script>" not in page and "&lt;script&gt;" in page and "<title>run &lt;1&gt;</title>" in page
    assert "<code class='argv'>rm -f /run/nginx.pid</code></td><td>allow" in page


def test_a_unit_a_person_masked_is_left_alone_with_no_attempt(tmp_path: Path) -> None:
    masked = nginx_failure("masked")
    unit = {"Id": "nginx.service", "LoadState": "masked", "UnitFileState": "masked", "ActiveState": "inactive"}
    masked = dataclasses.replace(masked, evidence={**masked.evidence, "unit": unit})
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [])
    outcome = heal_incident(masked, tools)
    assert outcome.trace.path == ["diagnose", "left_alone"]
    assert outcome.state.status == "masked" and outcome.state.attempts == [] and executor.runs == []
    assert outcome.state.reason == "nginx: nginx.service is masked by a person: not healed, nothing run"
    assert tools.memory.episodes() == [] and not outcome.state.changed  # type: ignore[union-attr]


def _redis_on_systemd(failure_class: str, **unit: Any) -> dict[str, Any]:
    """A failed redis as service_check reports it on a systemd host (the form Failure.from_check reads)."""
    state = {"Id": "redis-server.service", "ActiveState": "activating", "SubState": "auto-restart", "Restart": "always",
             "RestartUSec": "6s", "restart_delay_s": 6.0, "NRestarts": "0", "cause": None, **unit}
    return {"name": "redis", "healthy": False, "failure_class": failure_class, "summary": f"redis: {failure_class}",
            "spec": {"name": "redis", "service": "redis-server", "ports": [6379]}, "checks": [],
            "evidence": {"status": {"output": ""}, "logs": {}, "port_owners": [], "pidfile": None, "processes": [], "unit": state}}


def _systemd_failure(check: Mapping[str, Any]) -> Failure:
    return Failure.from_check("web1", check, {"service_manager": "systemd", "os": {"id": "debian"}})


def test_a_unit_systemd_restarts_by_itself_is_waited_for_and_nothing_runs(tmp_path: Path) -> None:
    slept: list[float] = []
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [STILL_DOWN, HEALTHY], sleep=slept.append, verify_wait=2.0)
    outcome = heal_incident(_systemd_failure(_redis_on_systemd("auto_restart", restart_in_s=1.5)), tools)
    assert outcome.trace.path == ["diagnose", "await_systemd", "recovered"]
    assert outcome.state.status == "recovered" and not outcome.state.attempts and not outcome.state.episodes
    assert executor.runs == [] and slept == [1.5, 2.0]  # what was left of its RestartSec, then one more look


def test_a_unit_still_failing_after_systemds_restart_is_escalated_with_its_cause_not_restarted(tmp_path: Path) -> None:
    again = _redis_on_systemd("auto_restart", NRestarts="3", cause="Bad directive or wrong number of arguments")
    executor = ScriptedExecutor()
    tools = _tools(tmp_path, executor, [again], systemd_restart_grace=0.0)
    outcome = heal_incident(_systemd_failure(_redis_on_systemd("auto_restart")), tools)
    assert outcome.trace.path == ["diagnose", "await_systemd", "diagnose", "plan", "record", "escalate"]
    assert outcome.state.status == "escalated" and "Bad directive or wrong number of arguments" in outcome.state.reason
    assert executor.remediations == []


def test_a_start_limit_hit_unit_is_reset_and_started_with_systemctl(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    failure = _systemd_failure(_redis_on_systemd("start_limit_hit", ActiveState="failed", SubState="failed", Result="start-limit-hit"))
    outcome = heal_incident(failure, _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.state.status == "healed"
    assert executor.remediations == [[("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")]]


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


def audited(tmp_path: Path, incident: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The records the timeline callback appends to the run's audit.jsonl for the incident, read back from the file and
    each held to docs/audit-schema.json."""
    audit = tmp_path / "audit.jsonl"
    audit.unlink(missing_ok=True)
    append_audit(incident["attempt_log"], audit)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    for record in records:
        jsonschema.Draft202012Validator(AUDIT_SCHEMA).validate(record)
    return records


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
    running = tools.memory.acquire_lease(LeaseRequest(radius=tools.blast_radius, incident_id="web2-incident", failure=other,
                                                      attempt=Attempt(number=1, started_at=now), at=now, ttl=600, owner=process_owner(),
                                                      steps_started=tools.steps_started))
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
                assert next_job.reap_interrupted(at=now[0] + LEASE_GRACE_S + 1, steps_started=tools.steps_started) != []
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


def _generic_fleet(tmp_path: Path, executor: ScriptedExecutor, verdicts: list[Mapping[str, Any]], **overrides: Any) -> Toolkit:
    """Hosts of one run where no runbook matches: the generic plan is new, so it needs a canary."""
    tools = _tools(tmp_path, executor, verdicts, blast_radius=BlastRadius(run_id="run-1", **overrides))
    tools.planner = Planner(RunbookLibrary.load(builtin=False), tools.memory)
    return tools


def _on(tools: Toolkit, host: str, **changes: Any) -> Toolkit:
    return dataclasses.replace(tools, target=Target(name=host, host_vars={}), **changes)


def _canary_of(tools: Toolkit, host: str) -> CanaryKey:
    plan = tools.planner.plan(nginx_failure("not_running", host=host), Diagnosis("x", None, {}), frozenset(), None)
    key = CanaryKey.of("run-1", nginx_failure("not_running", host=host), plan)
    assert key is not None
    return key


def test_a_new_plan_runs_on_its_canary_first_and_once_verified_there_on_the_other_hosts(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY, HEALTHY])
    first = heal_incident(nginx_failure("not_running", host="web1"), _on(tools, "web1"))
    assert first.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "healed"]
    assert "tried here first, the canary of this run" in " ".join(line["message"] for line in first.state.timeline)
    # planned once it verified: memory holds it now, and a verified plan needs no canary
    second = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2"))
    assert second.state.status == "healed" and second.to_dict()["plan"]["source"] == "memory"
    assert not any(line["node"] == "rollout" for line in second.state.timeline)
    assert executor.remediations == [[("service", "nginx", "restart")]] * 2
    # the canary ran at once, by itself (the others wait for its verdict, none would join its run); the proven plan did not
    assert executor.alone == [True, False]


@pytest.mark.parametrize(("canary_outcome", "status", "ran"), [("failed", "deferred", False), ("healed", "healed", True)])
def test_a_host_waits_for_the_canary_of_a_new_plan_and_runs_it_only_if_it_verified(
    tmp_path: Path, canary_outcome: str, status: str, ran: bool,
) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    assert tools.memory.claim_canary(key, host="web1", owner=process_owner(), at=time.time()).host == "web1"  # another fork has it
    waits: list[float] = []
    now = [time.time()]

    def canary_settles(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        if len(waits) == 12 and tools.memory is not None:  # web1's fork records its attempt while web2 waits
            plan = tools.planner.plan(nginx_failure("not_running", host="web1"), Diagnosis("x", None, {}), frozenset(), None)
            tools.memory.record_attempt(incident_id="web1", failure=nginx_failure("not_running", host="web1"), run_id="run-1",
                                        attempt=Attempt(number=1, plan=plan, outcome=canary_outcome), canary=key)

    outcome = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2", sleep=canary_settles, clock=lambda: now[0]))
    assert outcome.state.status == status and waits == [CANARY_POLL_S] * 12
    assert executor.remediations == ([[("service", "nginx", "restart")]] if ran else [])
    assert executor.alone == ([False] if ran else [])
    if ran:
        assert "verified on web1 first in this run (3 s waited)" in " ".join(line["message"] for line in outcome.state.timeline)
    else:
        assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "deferred"]
        assert "failed verification on web1, the first host to try it in this run; it runs on no other host" in outcome.state.reason


def test_a_canary_freed_while_a_host_waits_is_taken_over_by_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    tools.memory.claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    waits: list[float] = []

    def canary_gives_up(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2 and tools.memory is not None:  # web1's attempt ended without running (its host went away)
            plan = tools.planner.plan(nginx_failure("not_running", host="web1"), Diagnosis("x", None, {}), frozenset(), None)
            tools.memory.record_attempt(incident_id="web1", failure=nginx_failure("not_running", host="web1"), run_id="run-1",
                                        attempt=Attempt(number=1, plan=plan, outcome="unreachable"), canary=key)

    outcome = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2", sleep=canary_gives_up))
    assert outcome.state.status == "healed" and len(waits) == 2
    assert "tried here first, the canary of this run" in " ".join(line["message"] for line in outcome.state.timeline)
    assert executor.alone == [True]


def test_a_host_waiting_for_a_canary_reads_it_while_another_fork_holds_the_memorys_write_lock(tmp_path: Path) -> None:
    tools = _generic_fleet(tmp_path, ScriptedExecutor(), [HEALTHY])
    assert tools.memory is not None and tools.memory.path is not None
    key = _canary_of(tools, "web1")
    tools.memory.claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    writer = sqlite3.connect(tools.memory.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another fork records its episode
    try:
        began = time.monotonic()
        assert tools.memory.canary(key, host="web2", owner=process_owner(), at=time.time()) == Canary(host="web1", outcome="running")
        assert time.monotonic() - began < 1  # a claim would wait for the lock (the memory's busy timeout)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_the_canary_of_a_job_that_died_is_taken_over_and_one_never_verified_in_time_defers(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    dead = f"{process_owner().split('/')[0]}/999999999/0"
    tools.memory.claim_canary(key, host="web1", owner=dead, at=time.time())
    assert heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2")).state.status == "healed"
    assert executor.remediations == [[("service", "nginx", "restart")]]

    tools = _generic_fleet(tmp_path / "slow", ScriptedExecutor(), [HEALTHY])
    assert tools.memory is not None
    tools.memory.claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    now = [1000.0]
    waiting = _on(tools, "web2", clock=lambda: now[0], sleep=lambda seconds: now.__setitem__(0, now[0] + seconds), incident_timeout=60)
    outcome = heal_incident(nginx_failure("not_running", host="web2"), waiting)
    assert outcome.state.status == "deferred" and "tried on web1 first, and had not verified there before the incident's deadline" \
        in outcome.state.reason
    assert tools.memory.episodes(host="web2")[0]["outcome"] == "deferred"


def test_a_run_past_its_error_threshold_halts_and_nothing_more_runs_in_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    # each host tries the same plan (the others' failures of it not held against it)
    tools = _tools(tmp_path, executor, [HEALTHY] + [STILL_DOWN] * 2 + [HEALTHY],
                   blast_radius=BlastRadius(run_id="run-1", max_fail_percentage=25, run_hosts=4), max_attempts=1, failed_plan_ttl=-10)
    assert heal_incident(nginx_failure(host="web0"), _on(tools, "web0")).state.status == "healed"  # a heal is no failure
    for host in ("web1", "web2"):  # 1 of 4 failed: 25%, not more than the threshold, so web2 runs
        assert heal_incident(nginx_failure(host=host), _on(tools, host)).state.status == "escalated"
    halted = heal_incident(nginx_failure(host="web3"), _on(tools, "web3"))
    assert halted.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "halted"]
    assert halted.state.status == "halted"
    assert ("remediations failed verification on 2 of the 4 hosts of this run (50%: web1, web2), more than max_fail_percentage 25%"
            in halted.state.reason)
    assert len(executor.remediations) == 3
    assert tools.memory is not None and [row["outcome"] for row in tools.memory.episodes(host="web3")] == ["halted"]
    # another run starts afresh
    other = _on(tools, "web3", blast_radius=BlastRadius(run_id="run-2", max_fail_percentage=25, run_hosts=4))
    assert heal_incident(nginx_failure(host="web3"), other).state.status == "healed"


def _read_ahead(failure: Failure, *answers: dict[str, Any]) -> Failure:
    """The failure as service_check reports it when it read the evidence commands itself (evidence_commands)."""
    return dataclasses.replace(failure, evidence=dict(failure.evidence, commands=list(answers)))


def test_evidence_the_check_already_read_is_not_read_again(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    said = 'nginx: [emerg] unknown directive "bogus" in /etc/nginx/sites-enabled/default:3'
    failure = _read_ahead(nginx_failure("not_running"), {"argv": ["nginx", "-t"], "become": True, "rc": 1, "output": said, "duration": 0.1})
    outcome = heal_incident(failure, _tools(tmp_path, executor, []))
    assert executor.runs == []  # neither an evidence run nor a remediation
    assert outcome.trace.path == ["diagnose", "plan", "record", "escalate"]
    assert 'unknown directive "bogus"' in outcome.state.reason
    # the episode keeps what was read, as when diagnosis reads it
    with sqlite3.connect(tmp_path / "memory.sqlite3") as conn:
        [(results,)] = conn.execute("SELECT results_json FROM episodes").fetchall()
    assert [read["argv"] for read in json.loads(results)["evidence"].values()] == [["nginx", "-t"]]


def test_evidence_read_with_another_privilege_than_the_guard_gives_is_read_again(tmp_path: Path) -> None:
    executor = ScriptedExecutor({"nginx -t": "nginx: [emerg] unknown directive \"bogus\" in /etc/nginx/sites-enabled/default:3"})
    as_user = {"argv": ["nginx", "-t"], "become": False, "rc": 0, "output": "syntax is ok", "duration": 0.1}
    failure = _read_ahead(nginx_failure("not_running"), as_user)
    outcome = heal_incident(failure, _tools(tmp_path, executor, []))
    assert [purpose for purpose, _argvs in executor.runs] == ["evidence"]
    assert 'unknown directive "bogus"' in outcome.state.reason


def test_the_check_is_told_only_the_evidence_commands_the_policy_allows_for_each_service(tmp_path: Path) -> None:
    services = [{"name": "nginx", "ports": [80]}, {"name": "postgresql", "process": "postgres"}, {"name": "cron"}]
    planner = Planner(RunbookLibrary.load(), None)
    ahead = evidence_ahead(services, planner, load_policy(), "web1")
    assert {"service": "nginx", "argv": ["nginx", "-t"], "become": True} in ahead
    assert {"service": "postgresql", "argv": ["pg_lsclusters"], "become": False} in ahead
    assert {entry["service"] for entry in ahead} == {"nginx", "postgresql"}  # cron's runbooks read nothing first
    # a runbook's evidence command the policy does not allow is never handed to the check
    policy_file = tmp_path / "strict.yml"
    policy_file.write_text("version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: approve, become: true}\n")
    assert evidence_ahead(services, planner, load_policy(policy_file), "web1") == []


def test_a_service_the_loop_would_not_diagnose_now_is_not_read_ahead() -> None:
    """Silenced, suspended, flapping: its evidence is read once the loop may act, not at every check."""
    services = [{"name": "nginx", "ports": [80]}, {"name": "postgresql", "process": "postgres"}]
    ahead = evidence_ahead(services, Planner(RunbookLibrary.load(), None), load_policy(), "web1",
                           held=lambda service: "silenced by alice" if service == "nginx" else None)
    assert {entry["service"] for entry in ahead} == {"postgresql"}


REDIS_CONF_CHANGED = {"good_at": 1000.0, "packages": [], "files": [
    {"path": "/etc/redis/redis.conf", "change": "modified", "changed_at": 1700.0, "before_failure_s": 20, "good_sha256": "b" * 64,
     "diff": "--- /etc/redis/redis.conf (last known good)\n+++ /etc/redis/redis.conf\n@@ -2276,0 +2277 @@\n+lab-bad-directive yes\n"}]}
SYSV_REDIS_START = ("Starting redis-server: failed\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n"
                    "Reading the configuration file, at line 2277\n>>> 'lab-bad-directive yes'\nBad directive or wrong number of arguments")


def _redis_on_sysv(restore: str) -> Failure:
    """redis down on a sysv host, its configuration changed since its last healthy check: the status says only "not
    running", and redis's words are in no log (it refuses its configuration before it opens one)."""
    return Failure(host="web1", service="redis", failure_class="not_running", summary="redis-server is not running ... failed!",
                   evidence={"status": {"command": "/etc/init.d/redis-server status", "rc": 3, "output": "redis-server is not running ... failed!"},
                             "logs": {"/var/log/redis/redis-server.log": ""}, "port_owners": [], "pidfile": None, "processes": [],
                             "changes": REDIS_CONF_CHANGED},
                   spec={"name": "redis", "service": "redis-server", "ports": [6379], "logs": ["/var/log/redis/redis-server.log"],
                         "restore_known_good": restore},
                   facts={"service_manager": "sysv", "os": {"id": "debian"}})


@pytest.mark.parametrize("restore", ["approve", "off"])
def test_a_start_that_exits_0_while_the_check_still_fails_is_recorded_as_failed_and_its_output_is_read(
        tmp_path: Path, restore: str) -> None:
    executor = ScriptedExecutor({"service redis-server start": SYSV_REDIS_START})
    tools = _tools(tmp_path, executor, [STILL_DOWN], max_attempts=3)
    outcome = heal_incident(_redis_on_sysv(restore), tools)
    first = outcome.state.attempts[0]
    assert executor.remediations[0] == [("service", "redis-server", "start")]
    [start] = first.results
    assert (start.status, start.rc, start.stdout) == ("failed", 0, SYSV_REDIS_START)
    assert any("service redis-server start exited 0, yet redis still fails its checks: recorded as a failed start" in event["message"]
               for event in outcome.state.timeline)
    # the episode keeps it so: memory and the report say the start failed, with what it printed
    episode = sorted(tools.memory.episodes(), key=lambda row: row["id"])[0]  # type: ignore[union-attr]
    assert [(step["status"], step["stdout"]) for step in json.loads(episode["results_json"])["steps"]] == [("failed", SYSV_REDIS_START)]
    # the next attempt reads redis's own words: the configuration error, what changed, and the restore as policy allows
    assert len(executor.remediations) == 1
    said = outcome.state.attempts[-1].diagnosis
    assert "read as invalid_config" in said and "Bad directive or wrong number of arguments" in said and "'lab-bad-directive yes'" in said
    reason = outcome.state.reason
    if restore == "off":
        assert "Bad directive or wrong number of arguments" in reason, reason
        assert outcome.state.status == "escalated" and outcome.to_dict()["plan"]["reference"] == "service-config-invalid"
        assert reason.startswith("what changed since it last worked: /etc/redis/redis.conf modified"), reason
    else:
        assert outcome.state.status == "awaiting_approval" and outcome.to_dict()["plan"]["reference"] == "restore-known-good"
        steps = [step["argv"] for step in outcome.to_dict()["plan"]["steps"]]
        assert steps[0] == ["sentinel-heal-restore", "/etc/redis/redis.conf", "b" * 64] and steps[-1] == ["service", "redis-server", "restart"]
        # what it puts back, where a job without a terminal shows it: the reason (the task's summary) and the timeline
        assert reason.endswith("; puts back /etc/redis/redis.conf: '-lab-bad-directive yes'"), reason
        assert outcome.state.timeline[-1]["message"].endswith("puts back /etc/redis/redis.conf: '-lab-bad-directive yes'")


@pytest.mark.parametrize(("argv", "manager", "start"), [
    (("service", "redis-server", "start"), "sysv", True),
    (("service", "redis-server", "restart"), "sysv", True),
    # forms no rule of the policy gives an effect (a person's own command, approved): not taken for a start
    (("/etc/init.d/redis-server", "start"), "sysv", False),
    (("invoke-rc.d", "redis-server", "restart"), "sysv", False),
    (("pg_ctlcluster", "15", "main", "start"), "sysv", False),
    (("systemctl", "start", "redis-server"), "systemd", True),
    (("systemctl", "restart", "redis-server.service"), "systemd", True),
    (("service", "redis-server", "stop"), "sysv", False),
    (("systemctl", "reset-failed", "redis-server"), "systemd", False),
    (("service", "nginx", "start"), "sysv", False),  # another service's
    (("rm", "-f", "/run/redis/redis-server.pid"), "sysv", False),
])
def test_only_a_start_or_restart_of_the_incidents_own_service_is_a_start(argv: tuple[str, ...], manager: str, start: bool) -> None:
    failure = _redis_on_sysv("approve")
    if manager == "systemd":
        failure = _systemd_failure(_redis_on_systemd("failed"))
    assert starts_the_service(argv, PolicyContext.from_failure(failure), load_policy()) is start


class RefusedAsHealthy(ScriptedExecutor):
    """The host's executor, whose own check finds the service answering again when the plan's first step arrives."""

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, **options: Any) -> RunReport:
        if purpose != "remediation":
            return super().run(target, steps, purpose=purpose, **options)
        self.runs.append((purpose, [step.argv for step in steps]))
        reason = REFUSED_BY_THE_HOST.format(rule="service-healthy", reason="nginx is healthy on this host (tcp 127.0.0.1:80: ok)")
        results = [StepResult(argv=steps[0].argv, status="refused", rc=77, stderr=reason),
                   *(StepResult(argv=step.argv, status="skipped", stderr="not run") for step in steps[1:])]
        return RunReport(results=tuple(results), artifacts="/dev/null", duration_s=0.0, stopped=False)


def test_a_service_back_before_the_plans_first_step_ends_recovered_with_nothing_run_never_escalated(tmp_path: Path) -> None:
    """systemd's Restart= (or a socket's activation) brought it back between the check and the step: the host refuses a
    plan for a failure on a healthy service, and that is no page (#52)."""
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, RefusedAsHealthy(), [STILL_DOWN]))
    assert outcome.state.status == "recovered", outcome.state.reason
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "recovered"]
    assert outcome.state.reason.startswith("nginx answered again before the plan ran: the host found it healthy")


def test_a_step_the_host_refuses_for_any_other_reason_is_escalated(tmp_path: Path) -> None:
    class RefusedByPolicy(RefusedAsHealthy):
        def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, **options: Any) -> RunReport:
            report = super().run(target, steps, purpose=purpose, **options)
            if purpose != "remediation":
                return report
            first = dataclasses.replace(report.results[0], stderr=REFUSED_BY_THE_HOST.format(rule="policy-version", reason="apply the role again"))
            return dataclasses.replace(report, results=(first, *report.results[1:]))

    outcome = heal_incident(nginx_failure(), _tools(tmp_path, RefusedByPolicy(), [STILL_DOWN]))
    assert outcome.state.status == "escalated" and "the host refused the plan" in outcome.state.reason
