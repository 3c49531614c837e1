"""What the memory's modules do (plugin_utils/tasks/memory.py), where a playbook cannot look: the checks that tell a
person what would happen before it does (the deprecated sentinel.heal.memory: test_memory_legacy.py). The modules
themselves run through playbooks in tests/integration/test_memory_action.py (each module's documented options are its
action's argument spec: tests/unit/plugins/action/test_action_options.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from memory_places import MemoryPlace
from notify_cases import heal_job, recording_server

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks
from helpers import nginx_failure

PLUGINS = Path(__file__).resolve().parents[5] / "plugins"


def _waiting(memory: Memory) -> str:
    plan = Plan(source=PlanSource.RUNBOOK, reference="r", rationale="r", steps=(Step(template="true", argv=("true",)),))
    attempt = Attempt(number=1, plan=plan, outcome="awaiting_approval", verified=False, started_at=time.time(), finished_at=time.time())
    _episode, plan_id = memory.record_attempt(incident_id="i", failure=nginx_failure(), attempt=attempt,
                                              pending=PendingPlan(plan_hash="h", policy_file="p.yml", created_at=1.0, expires_at=2.0))
    assert plan_id is not None
    return plan_id


def test_a_denial_in_check_mode_fails_as_the_denial_would_once_the_plan_is_decided(tmp_path: Path) -> None:
    args = {"state_dir": str(tmp_path), "memory_url": "", "memory_password": None, "decision": "denied", "decided_by": "alice", "note": ""}
    with Memory(tmp_path) as memory:
        args["plan_id"] = _waiting(memory)
    assert memory_tasks.perform(memory_tasks.deny, args, check_mode=True, task_vars={})["changed"] is True
    assert memory_tasks.perform(memory_tasks.deny, args, check_mode=False, task_vars={})["plan"]["status"] == "denied"
    for check_mode in (True, False):
        with pytest.raises(AnsibleActionFail, match=f"^plan {args['plan_id']} is denied, not pending: it cannot be denied$"):
            memory_tasks.perform(memory_tasks.deny, args, check_mode=check_mode, task_vars={})


def test_a_denial_says_who_denied_and_why_once_on_the_page_the_wait_opened(memory_place: MemoryPlace) -> None:
    """Through a real HTTP server on 127.0.0.1: the heal job's trigger and the denial's acknowledgement share the
    incident's key; chat is told who and why; a second denial, refused, tells nobody again, nor does check mode."""
    with recording_server() as recorder:
        notify = [{"type": "pagerduty", "url": f"{recorder.url}/pd", "routing_key": "R0UTINGKEY0123456789"},
                  {"type": "mattermost", "url": f"{recorder.url}/chat", "events": ["denied"]}]
        _heal, plan_id = heal_job(memory_place, notify)
        args = {**memory_place.options(), "plan_id": plan_id, "decision": "denied", "decided_by": "bob", "note": "not during the sale",
                "notify": notify}
        assert memory_tasks.perform(memory_tasks.deny, args, check_mode=True, task_vars={})["changed"] is True
        assert recorder.bodies("/chat") == []
        denied = memory_tasks.perform(memory_tasks.deny, args, check_mode=False, task_vars={})
        with pytest.raises(AnsibleActionFail, match="is denied, not pending"):
            memory_tasks.perform(memory_tasks.deny, args, check_mode=False, task_vars={})
    assert denied["plan"]["status"] == "denied" and [sent["delivered"] for sent in denied["notifications"]] == [True, True]
    trigger, acknowledge = recorder.bodies("/pd")
    assert (trigger["event_action"], acknowledge["event_action"]) == ("trigger", "acknowledge")
    assert trigger["dedup_key"] == acknowledge["dedup_key"]
    [said] = recorder.bodies("/chat")
    assert said["text"] == f"nginx on web1: plan {plan_id} denied by bob: not during the sale"


def test_a_memory_error_fails_the_task_with_the_password_masked(tmp_path: Path) -> None:
    args = {"state_dir": str(tmp_path), "memory_url": "postgresql://heal:s3cret-pw@127.0.0.1:1/heal", "memory_password": None,
            "kind": "suspension"}
    with pytest.raises(AnsibleActionFail) as failed:
        memory_tasks.perform(memory_tasks.info, args, check_mode=True, task_vars={})
    assert "memory_url" in str(failed.value) and "s3cret-pw" not in str(failed.value)
