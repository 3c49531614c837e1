# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A relapse: the service fails again within the relapse window after a heal. Driven through the real loop, its real
memory (SQLite) and the built-in runbooks; only the host's answers are scripted."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path
from typing import Any

import jsonschema

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident, run_approved_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import summary_line
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import audit_records, iso_utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import incident_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, decoded_episode
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"
RESTART = ("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")


class Clock:
    """The loop's clock, moved on by the test between incidents."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _episodes(memory: Memory) -> list[tuple[int, str, Any, Any]]:
    return [(row["id"], row["outcome"], row["relapsed_from"], row["relapsed_at"]) for row in reversed(memory.episodes())]


def test_a_failure_within_the_window_after_a_heal_is_its_relapse_says_so_first_and_the_fix_loses_its_trust(tmp_path: Path) -> None:
    clock, executor = Clock(), ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], clock=clock)
    first = heal_incident(nginx_failure(pid=10), tools)
    assert first.state.status == "healed" and first.to_dict()["relapsed_from"] is None
    clock.now += 130
    again = heal_incident(nginx_failure(pid=20), tools)
    assert again.state.status == "healed"
    incident = again.to_dict()
    assert incident["relapsed_from"] == 1 and incident["attempt_log"][0]["relapsed_from"] == 1
    assert re.fullmatch(rf"nginx healed at {ISO} by rm -f /run/nginx.pid; service nginx start \(episode 1\); failed again at {ISO}, "
                        r"2 min 10 s later: /etc/init.d/nginx status: rc=3: nginx is not running; .*names pid 20, which is not running",
                        again.state.reason), again.state.reason
    assert summary_line("web1", incident, False).startswith("web1: nginx healed at ")
    page = html.unescape(incident_html(incident))
    assert "a relapse: it failed again within the relapse window after the heal of episode 1" in page
    assert f"<p class='reason'>{again.state.reason}</p>" in page
    assert "; healed again in 1 attempt with: rm -f /run/nginx.pid; service nginx start [plan from runbook " in summary_line("web1", incident, False)
    assert tools.memory is not None
    assert _episodes(tools.memory) == [(1, "healed", None, clock.now), (2, "healed", 1, None)]
    # the fix that relapsed is not replayed as verified: the runbook planned again, not the memory
    assert incident["plan"]["source"] == "runbook" and first.to_dict()["plan"]["source"] == "runbook"
    # nor later: its heal since is the same plan, which relapsed
    assert tools.memory.verified_fix(nginx_failure(pid=20).fingerprint) is None
    assert executor.remediations == [list(RESTART), list(RESTART)]
    # the audit trail's outcome records say it on both sides, as the schema has them
    schema = json.loads((Path(__file__).resolve().parents[5] / "docs" / "audit-schema.json").read_text())
    outcomes = {episode_id: next(record for record in audit_records(decoded_episode(tools.memory.episode(episode_id) or {}))
                                 if record["kind"] == "outcome") for episode_id in (1, 2)}
    assert outcomes[1]["detail"]["relapsed_at"] == iso_utc(clock.now) and "relapsed_from" not in outcomes[1]["detail"]
    assert outcomes[2]["detail"]["relapsed_from"] == 1 and "relapsed_at" not in outcomes[2]["detail"]
    for record in outcomes.values():
        jsonschema.Draft202012Validator(schema).validate(record)


def test_a_second_relapse_in_a_row_escalates_with_both_heals_and_runs_nothing(tmp_path: Path) -> None:
    clock, executor = Clock(), ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], clock=clock)
    for pid in (10, 20):
        assert heal_incident(nginx_failure(pid=pid), tools).state.status == "healed"
        clock.now += 60
    third = heal_incident(nginx_failure(pid=30), tools)
    assert third.trace.path == ["diagnose", "record", "escalate"] and third.state.status == "escalated"
    assert len(executor.remediations) == 2 and third.to_dict()["attempts"] == 1 and third.to_dict()["plan"] is None
    reason = third.state.reason
    assert re.match(rf"nginx healed at {ISO} by rm -f /run/nginx.pid; service nginx start \(episode 2\); failed again at {ISO}, "
                    r"1 min later: .*names pid 30, which is not running\. nginx: its second relapse in a row: before, nginx healed at "
                    rf"{ISO} by rm -f /run/nginx.pid; service nginx start \(episode 1\); failed again at {ISO}, 1 min later: "
                    r".*names pid 20, which is not running; neither fix held, so neither is replayed: find what keeps breaking it$",
                    reason), reason
    assert tools.memory is not None
    assert [(row[0], row[1], row[2]) for row in _episodes(tools.memory)] == [(1, "healed", None), (2, "healed", 1), (3, "escalated", 2)]
    assert tools.memory.verified_fix(nginx_failure().fingerprint) is None  # neither heal is trusted any more


def test_a_relapse_whose_plan_waited_for_a_person_is_linked_to_the_heal_when_the_approved_plan_runs(tmp_path: Path) -> None:
    """The approved plan's run is the same incident: its episode names the heal the incident relapsed from, and its
    story says so first, as the run that planned it did."""
    clock, executor = Clock(), ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], clock=clock)
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    clock.now += 60
    policy = tmp_path / "approve-every-step.yml"
    policy.write_text("version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n")
    waiting_tools = dataclasses.replace(tools, policy=load_policy(policy))
    waiting = heal_incident(nginx_failure(pid=20), waiting_tools)
    assert waiting.state.status == "awaiting_approval" and waiting.state.plan_id is not None and tools.memory is not None
    stored = approvals.load(tools.memory, waiting.state.plan_id)
    assert tools.memory.claim_plan(stored.plan_id, by="alice", at=clock.now)
    clock.now += 30
    approved = run_approved_plan(stored, approvals.authorize(stored, host="web1", policy=waiting_tools.policy), "alice", waiting_tools)
    assert approved.state.status == "healed" and approved.to_dict()["relapsed_from"] == 1
    assert approved.state.reason.startswith("nginx healed at "), approved.state.reason
    assert [(row[0], row[1], row[2]) for row in _episodes(tools.memory)] == [(1, "healed", None), (2, "awaiting_approval", 1), (3, "healed", 1)]


def test_a_failure_after_the_window_is_no_relapse_and_the_verified_fix_is_replayed(tmp_path: Path) -> None:
    clock, executor = Clock(), ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], clock=clock, relapse_window=900)
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    clock.now += 901
    later = heal_incident(nginx_failure(pid=20), tools)
    assert later.state.status == "healed" and later.to_dict()["relapsed_from"] is None and later.state.reason == ""
    assert later.to_dict()["plan"]["source"] == "memory"
    assert tools.memory is not None and _episodes(tools.memory) == [(1, "healed", None, None), (2, "healed", None, None)]


RESTORE = Plan(source=PlanSource.RUNBOOK, reference="restore", rationale="put the last known good back",
               steps=(Step(template="restore", argv=("sentinel-restore", "/etc/nginx/sites-enabled/default")),))


def _config_failure(mtime: float, packages: tuple[dict[str, Any], ...] = ()) -> Failure:
    changed = {"good_at": 1000.0, "packages": list(packages),
               "files": [{"path": "/etc/nginx/sites-enabled/default", "change": "modified", "changed_at": mtime}]}
    failure = nginx_failure("not_running")
    return dataclasses.replace(failure, evidence={**failure.evidence, "changes": changed})


def test_the_same_cause_back_after_the_repair_escalates_at_once_with_the_evidence_of_both_times(tmp_path: Path) -> None:
    """A restore that a timer undoes: the same file changed again, with another mtime. Healing it again would only hide
    what undoes it."""
    clock, executor = Clock(), ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], clock=clock)
    assert tools.memory is not None
    tools.memory.record_attempt(incident_id="then", failure=_config_failure(1_799_999_000.0), attempt=Attempt(
        number=1, plan=RESTORE, outcome="healed", verified=True, started_at=clock.now - 300, finished_at=clock.now - 290))
    outcome = heal_incident(_config_failure(1_799_999_950.0), tools)
    assert outcome.trace.path == ["diagnose", "record", "escalate"] and executor.runs == []
    assert ("nginx: the same cause is back after the repair (file /etc/nginx/sites-enabled/default: modified (mtime 1799999000.0) "
            "before episode 1's repair, modified (mtime 1799999950.0) again now; no package changed since the repair): something on "
            "the host keeps undoing it, so it "
            "is not healed again; find what changes it (a timer, a configuration-management run, a person) and stop it") in outcome.state.reason
    assert outcome.state.reason.startswith("nginx healed at ")
    assert " by sentinel-restore /etc/nginx/sites-enabled/default (episode 1); " in outcome.state.reason
    assert _episodes(tools.memory)[-1][:3] == (2, "escalated", 1)
    # what the dpkg log says changed since the repair, when something did
    upgrade = {"action": "upgrade", "package": "nginx-common", "before": "1.22.1-9", "after": "1.22.1-9+deb12u1", "at": clock.now - 60}
    again = heal_incident(_config_failure(1_799_999_990.0, (upgrade, {**upgrade, "package": "old", "at": clock.now - 400})), tools)
    assert "; the dpkg log since the repair: nginx-common upgrade to 1.22.1-9+deb12u1): something on the host" in again.state.reason
    # on a systemd host, which services systemd started since the repair: a timer's push of the file among them
    pushed = _config_failure(1_799_999_995.0)
    pushed.evidence["changes"]["units"] = [{"unit": "apt-daily.service", "at": [clock.now - 400]},
                                           {"unit": "config-push.service", "at": [clock.now - 350, clock.now - 30]}]
    timed = heal_incident(pushed, tools)
    assert re.search(rf"; no package changed since the repair; systemd started since the repair: config-push\.service at {ISO}\): something",
                     timed.state.reason), timed.state.reason
    pushed.evidence["changes"]["units"] = [{"unit": "apt-daily.service", "at": [clock.now - 400]}]
    assert "; systemd started no other service since the repair): " in heal_incident(pushed, tools).state.reason


def test_the_same_file_as_it_was_at_the_heal_is_no_returning_cause(tmp_path: Path) -> None:
    """A file the heal left as it was (the same mtime) was not repaired then: it did not come back, so the relapse is healed."""
    clock = Clock()
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY], clock=clock)
    assert tools.memory is not None
    tools.memory.record_attempt(incident_id="then", failure=_config_failure(1_799_999_000.0), attempt=Attempt(
        number=1, plan=RESTORE, outcome="healed", verified=True, started_at=clock.now - 300, finished_at=clock.now - 290))
    outcome = heal_incident(_config_failure(1_799_999_000.0), tools)
    assert "the same cause is back" not in outcome.state.reason and outcome.trace.path[:2] == ["diagnose", "plan"]
    assert outcome.to_dict()["relapsed_from"] == 1
