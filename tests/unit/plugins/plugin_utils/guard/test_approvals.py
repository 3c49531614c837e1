"""Approvals: bound to the exact plan, host, service and policy; expiring; decided once."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import FlowError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import BlastRadius
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import ApprovalRefused
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Decision, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident, run_approved_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure

STRICT = (
    "version: 1\n"
    "blocked: [{reason: power, executables: [reboot]}]\n"
    "rules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n"
)


def _waiting(place: MemoryPlace, **overrides: Any) -> tuple[Toolkit, ScriptedExecutor, approvals.StoredPlan]:
    """heal an nginx incident under a policy that allows none of its steps: the plan waits (in the memory of the place)."""
    tmp_path = place.state_dir
    policy_file = tmp_path / "strict.yml"
    if not policy_file.exists():
        policy_file.write_text(STRICT)
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY, HEALTHY], policy=load_policy(policy_file), memory=place.open(), **overrides)
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "awaiting_approval" and executor.remediations == []
    assert tools.memory is not None and outcome.state.plan_id is not None
    return tools, executor, approvals.load(tools.memory, outcome.state.plan_id)


def test_an_approved_plan_runs_exactly_once_and_is_verified(memory_place: MemoryPlace) -> None:
    tools, executor, stored = _waiting(memory_place)
    assert tools.memory is not None
    verdicts = approvals.authorize(stored, host="web1", policy=tools.policy)
    assert [v.decision.value for v in verdicts] == ["approve", "approve"]
    assert tools.memory.claim_plan(stored.plan_id, by="alice", at=time.time())
    outcome = run_approved_plan(stored, verdicts, "alice", tools)
    assert outcome.trace.path == ["rollout", "execute", "verify", "record", "healed"]
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    row = tools.memory.plan(stored.plan_id)
    assert row is not None and row["status"] == "executed" and row["decided_by"] == "alice"
    episode = next(e for e in tools.memory.episodes() if e["id"] == row["executed_episode_id"])
    assert episode["approved_by"] == "alice" and episode["outcome"] == "healed" and episode["incident_id"] == stored.incident_id
    with pytest.raises(ApprovalRefused, match="already executed by alice"):
        approvals.authorize(approvals.load(tools.memory, stored.plan_id), host="web1", policy=tools.policy)


def test_only_one_of_two_racing_approvals_claims_the_plan(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place)
    assert tools.memory is not None
    assert tools.memory.claim_plan(stored.plan_id, by="alice", at=1.0)
    assert not tools.memory.claim_plan(stored.plan_id, by="bob", at=2.0)


def test_a_failed_approved_plan_escalates_instead_of_trying_something_else(memory_place: MemoryPlace) -> None:
    tools, executor, stored = _waiting(memory_place)
    tools.verify = lambda spec: {"healthy": False, "summary": "still down"}
    assert tools.memory is not None and tools.memory.claim_plan(stored.plan_id, by="alice", at=time.time())
    outcome = run_approved_plan(stored, approvals.authorize(stored, host="web1", policy=tools.policy), "alice", tools)
    assert outcome.trace.path == ["rollout", "execute", "verify", "record", "escalate"]
    assert len(executor.remediations) == 1


def test_an_approved_plan_in_a_run_past_its_error_threshold_does_not_run_and_waits_again(memory_place: MemoryPlace) -> None:
    tools, executor, stored = _waiting(memory_place)
    assert tools.memory is not None
    tools.memory.record_attempt(incident_id="other", failure=nginx_failure(host="web9"), attempt=Attempt(number=1, outcome="failed"),
                                run_id="approvals-1")
    halting = replace(tools, blast_radius=BlastRadius(run_id="approvals-1", max_fail_percentage=0, run_hosts=2))
    assert tools.memory.claim_plan(stored.plan_id, by="alice", at=time.time())
    outcome = run_approved_plan(stored, approvals.authorize(stored, host="web1", policy=tools.policy), "alice", halting)
    assert outcome.trace.path == ["rollout", "record", "halted"] and executor.remediations == []
    row = tools.memory.plan(stored.plan_id)
    assert row is not None and row["status"] == "pending"  # held back before it ran: approved again, it runs


def test_a_plan_that_needs_a_person_never_runs_without_one_named(memory_place: MemoryPlace) -> None:
    """The execute node's own refusal, behind the guard and approvals: a plan the policy sends to a person runs only
    with who approved it, and one it blocks never runs, whoever approved it."""
    tools, executor, stored = _waiting(memory_place)
    verdicts = approvals.authorize(stored, host="web1", policy=tools.policy)
    with pytest.raises(FlowError, match="execute reached without ALLOW or a human's approval"):
        run_approved_plan(stored, verdicts, "", tools)
    reboot = (Step(template="reboot", argv=("reboot",)),)
    blocked, _decision = evaluate_plan([step.argv for step in reboot], PolicyContext.from_failure(stored.failure), tools.policy)
    assert [verdict.decision for verdict in blocked] == [Decision.BLOCK]
    with pytest.raises(FlowError, match="execute reached without ALLOW or a human's approval"):
        run_approved_plan(replace(stored, plan=replace(stored.plan, steps=reboot)), blocked, "alice", tools)
    assert executor.remediations == []


def test_a_prompt_that_approves_without_saying_who_runs_nothing(memory_place: MemoryPlace) -> None:
    (memory_place.state_dir / "strict.yml").write_text(STRICT)
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(memory_place.state_dir, executor, [HEALTHY], policy=load_policy(memory_place.state_dir / "strict.yml"),
                   ask_approval=lambda *asked: ("approved", ""), memory=memory_place.open())
    with pytest.raises(FlowError, match="execute reached without ALLOW or a human's approval"):
        heal_incident(nginx_failure(), tools)
    assert executor.remediations == []


def test_an_approval_for_another_host_is_refused(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place)
    with pytest.raises(ApprovalRefused, match="made for host web1, not web2") as caught:
        approvals.authorize(stored, host="web2", policy=tools.policy)
    assert caught.value.field == "host"


def test_an_expired_approval_is_refused(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place, approval_ttl=60)
    with pytest.raises(ApprovalRefused, match="expired at") as caught:
        approvals.authorize(stored, host="web1", policy=tools.policy, now=stored.created_at + 61)
    assert caught.value.field == "expires_at"
    assert approvals.authorize(stored, host="web1", policy=tools.policy, now=stored.created_at + 59)


def test_a_changed_policy_is_refused(memory_place: MemoryPlace) -> None:
    _toolkit, _executor, stored = _waiting(memory_place)
    (memory_place.state_dir / "strict.yml").write_text(STRICT + "# reviewed\n")
    with pytest.raises(ApprovalRefused, match="the policy is now") as caught:
        approvals.authorize(stored, host="web1", policy=load_policy(memory_place.state_dir / "strict.yml"))
    assert caught.value.field == "policy_version"


def test_a_plan_edited_in_the_database_is_refused(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place)
    memory_place.sql("UPDATE plans SET plan_json = replace(plan_json, '/run/nginx.pid', '/etc/passwd') WHERE plan_id = ?", (stored.plan_id,))
    assert tools.memory is not None
    tampered = approvals.load(tools.memory, stored.plan_id)
    assert "/etc/passwd" in tampered.plan.steps[0].argv
    with pytest.raises(ApprovalRefused, match="changed after it was stored") as caught:
        approvals.authorize(tampered, host="web1", policy=tools.policy)
    assert caught.value.field == "plan_hash"


@pytest.mark.parametrize(("column", "value"), [("service", "redis"), ("fingerprint", "0" * 32)])
def test_a_stored_plan_moved_to_another_service_or_fingerprint_is_refused(memory_place: MemoryPlace, column: str, value: str) -> None:
    """The same steps on the same host, but for another failure: approved and verified, they would be remembered as its fix."""
    tools, _executor, stored = _waiting(memory_place)
    memory_place.sql(f"UPDATE plans SET {column} = ? WHERE plan_id = ?", (value, stored.plan_id))
    assert tools.memory is not None
    moved = approvals.load(tools.memory, stored.plan_id)
    assert getattr(moved, column) == value and moved.plan == stored.plan
    with pytest.raises(ApprovalRefused, match="changed after it was stored") as caught:
        approvals.authorize(moved, host="web1", policy=tools.policy)
    assert caught.value.field == "plan_hash"


def test_a_step_the_policy_blocks_today_is_refused_even_with_a_matching_hash(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place)
    evil = replace(stored.plan, steps=(Step(template="reboot", argv=("reboot",)),))
    forged = replace(stored, plan=evil, plan_hash=approvals.binding_hash(
        evil, host=stored.host, service=stored.service, fingerprint=stored.fingerprint, policy_version=stored.policy_version))
    with pytest.raises(ApprovalRefused, match="the policy blocks 'reboot'"):
        approvals.authorize(forged, host="web1", policy=tools.policy)


def test_a_denied_plan_cannot_be_approved(memory_place: MemoryPlace) -> None:
    tools, _executor, stored = _waiting(memory_place)
    assert tools.memory is not None
    assert tools.memory.deny_plan(stored.plan_id, by="carol", at=time.time(), note="not during business hours")
    assert not tools.memory.deny_plan(stored.plan_id, by="dave", at=time.time(), note="again")
    with pytest.raises(ApprovalRefused, match="already denied by carol"):
        approvals.authorize(approvals.load(tools.memory, stored.plan_id), host="web1", policy=tools.policy)


def test_an_unknown_plan_id_is_a_clear_error(memory_place: MemoryPlace) -> None:
    tools, _executor, _stored = _waiting(memory_place)
    assert tools.memory is not None
    with pytest.raises(ApprovalRefused) as caught:
        approvals.load(tools.memory, "nope")
    assert (caught.value.field, caught.value.value) == ("plan_id", "nope")


def test_interactive_approval_runs_the_plan_at_once(memory_place: MemoryPlace) -> None:
    tmp_path = memory_place.state_dir
    asked: list[list[str]] = []

    def operator(failure: Any, plan: Any, verdicts: Any) -> tuple[str, str]:
        asked.append([v.command for v in verdicts])
        return ("approved", "interactive:alice")

    (tmp_path / "strict.yml").write_text(STRICT)
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [HEALTHY], policy=load_policy(tmp_path / "strict.yml"), ask_approval=operator, memory=memory_place.open())
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "ask_human", "rollout", "execute", "verify", "record", "healed"]
    assert asked == [["rm -f /run/nginx.pid", "service nginx start"]]
    assert outcome.state.attempt.approved_by == "interactive:alice"
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]


def test_interactive_denial_escalates_and_nothing_runs(memory_place: MemoryPlace) -> None:
    tmp_path = memory_place.state_dir
    (tmp_path / "strict.yml").write_text(STRICT)
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(tmp_path, executor, [], policy=load_policy(tmp_path / "strict.yml"), ask_approval=lambda *a: ("denied", "interactive:bob"),
                   memory=memory_place.open())
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.trace.path == ["diagnose", "plan", "guard", "ask_human", "record", "escalate"]
    assert "interactive:bob denied the plan" in outcome.state.reason
    assert executor.remediations == []
