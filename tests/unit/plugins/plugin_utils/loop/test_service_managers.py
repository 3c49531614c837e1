"""The heal graph and the service manager: a unit systemd restarts or a person masked, a unit looped into its start
limit, a SysV start that exits 0 while the service stays down, and a service back before the first step.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest
from loop_cases import AS_GOOD

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._host.systemd import journal_cause
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy, starts_the_service
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import REFUSED_BY_THE_HOST, Failure, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure


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
