"""The heal graph and the evidence service_check reads ahead: not read again when the check read it with the
privilege the guard gives, and told only what the policy allows for each service.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from loop_cases import read_ahead

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import evidence_ahead
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from helpers import ScriptedExecutor, _tools, nginx_failure


def test_evidence_the_check_already_read_is_not_read_again(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    said = 'nginx: [emerg] unknown directive "bogus" in /etc/nginx/sites-enabled/default:3'
    failure = read_ahead(nginx_failure("not_running"), {"argv": ["nginx", "-t"], "become": True, "rc": 1, "output": said, "duration": 0.1})
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
    failure = read_ahead(nginx_failure("not_running"), as_user)
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
