"""The heal graph: which path an incident takes for each kind of outcome (healed, escalated, waiting for approval,
blocked, unreachable, check mode), and what the run reports of it.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import audit_records
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, decoded_episode
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure


def test_healed_on_the_first_attempt(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(nginx_failure(), _tools(tmp_path, executor, [HEALTHY]))
    assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "healed"]
    assert outcome.state.status == "healed"
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    assert outcome.state.episodes and outcome.state.changed


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
