"""The approve job (plugin_utils/tasks/approved.py) tells the people of its ``notify`` what became of the plans a person
approved, as the heal tells them of its incidents: a real HTTP server on 127.0.0.1 records both jobs' messages, with a
real memory on SQLite and on PostgreSQL. The checks that refuse an approval are guard/test_approvals.py's."""

from __future__ import annotations

import json
from typing import Any

from memory_places import MemoryPlace
from notify_cases import Recorder, approve_job, heal_job, recording_server, task_of, validated, waiting_failure

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import EXECUTE_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import incident_key
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.approved import run_approved

ROUTING_KEY = "R0UTINGKEY0123456789"


def _destinations(recorder: Recorder, **chat: Any) -> list[dict[str, Any]]:
    return [{"type": "pagerduty", "url": f"{recorder.url}/pd", "routing_key": ROUTING_KEY},
            {"type": "slack", "name": "ops chat", "url": f"{recorder.url}/chat", **chat}]


def test_an_approved_plan_acknowledges_then_resolves_the_page_the_heal_opened_under_the_same_key(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        _heal, plan_id = heal_job(memory_place, _destinations(recorder))
        result, executor = approve_job(memory_place, _destinations(recorder), plan_id)
    assert result["status"] == "healed" and executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    trigger, acknowledge, resolve = recorder.bodies("/pd")
    assert [event["event_action"] for event in (trigger, acknowledge, resolve)] == ["trigger", "acknowledge", "resolve"]
    # the approve job's messages land on the page the heal job's trigger opened: the key is the incident's, from what
    # the heal stored with the plan (its host's facts included), whichever job says it
    failure = waiting_failure()
    assert trigger["dedup_key"] == acknowledge["dedup_key"] == resolve["dedup_key"] == incident_key("web1", "nginx", failure.fingerprint)
    waiting, healed = recorder.bodies("/chat")  # chat is not told of the approval itself by default: what follows says who
    assert f"waits for approval of plan {plan_id}" in waiting["text"]
    assert healed["text"] == f"nginx on web1 healed after 1 attempt (plan {plan_id} approved by alice)"
    assert [(sent["event"], sent["delivered"]) for sent in result["notifications"]] == [("approved", True), ("resolved", True), ("resolved", True)]


def test_an_approved_plan_that_does_not_heal_escalates_with_what_was_tried_and_who_approved_it(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        _heal, plan_id = heal_job(memory_place, _destinations(recorder))
        result, _executor = approve_job(memory_place, _destinations(recorder, events=["escalated"]), plan_id, healed=False)
    assert result["status"] == "escalated"
    assert [event["event_action"] for event in recorder.bodies("/pd")] == ["trigger", "acknowledge", "trigger"]
    assert len({event["dedup_key"] for event in recorder.bodies("/pd")}) == 1
    _waiting, escalated = recorder.bodies("/chat")
    assert escalated["text"].startswith(f"nginx on web1 needs a person (plan {plan_id} approved by alice): ")
    sections = json.dumps(escalated["blocks"])
    assert "*Tried*" in sections and "rm -f /run/nginx.pid; service nginx start" in sections


def test_a_destination_that_is_down_never_fails_the_approval_and_is_recorded(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        _heal, plan_id = heal_job(memory_place, [])
        recorder.status["/chat"] = 503
        result, executor = approve_job(memory_place, _destinations(recorder, retries=1), plan_id)
    assert result["status"] == "healed" and len(executor.remediations) == 1
    assert len(recorder.bodies("/chat")) == 2  # one message (resolved), tried twice
    [incident] = result["incidents"]
    assert "notification resolved to ops chat not delivered after 2 tries: HTTP 503 Service Unavailable" in incident["warnings"]
    assert [(sent["destination"], sent["delivered"]) for sent in result["notifications"]] == [
        ("notify[0] (pagerduty)", True), ("notify[0] (pagerduty)", True), ("ops chat", False)]
    assert recorder.url not in json.dumps(result) and ROUTING_KEY not in json.dumps(result)


def test_a_destination_the_heal_job_found_hanging_is_asked_again_by_the_approve_job_of_its_workflow(memory_place: MemoryPlace) -> None:
    """The heal and approve jobs of an AWX workflow are one run (their caps count together) but two jobs: what the
    heal's hosts found down is skipped for the rest of the heal job only; the approve job, maybe hours later, asks."""
    with recording_server() as recorder:
        chat = [{"type": "webhook", "name": "ops chat", "url": f"{recorder.url}/chat", "timeout": 0.3}]
        recorder.sleep_s = 1.0
        healing, plan_id = heal_job(memory_place, chat, variables={"awx_workflow_job_id": 7, "awx_job_id": 8})
        recorder.sleep_s = 0
        approving, _executor = approve_job(memory_place, chat, plan_id, variables={"awx_workflow_job_id": 7, "awx_job_id": 9})
    assert [sent["delivered"] for sent in healing["notifications"]] == [False]
    assert [(sent["event"], sent["delivered"]) for sent in approving["notifications"]] == [("resolved", True)]


def test_an_approval_in_check_mode_tells_nobody(memory_place: MemoryPlace) -> None:
    with recording_server() as recorder:
        _heal, plan_id = heal_job(memory_place, [])
        args = validated(EXECUTE_SPEC, plan_ids=[plan_id], approved_by="alice", policy=str(memory_place.state_dir / "waiting.yml"),
                         notify=_destinations(recorder), **memory_place.options())
        result = run_approved(args, task_of("web1", check_mode=True))
    assert result["status"] == "planned" and recorder.received == []
