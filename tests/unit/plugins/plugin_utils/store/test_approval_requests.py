"""What the approval page was asked, on both backends: one decision per plan whatever arrives after it, every refusal
kept, and both in the audit trail's export."""

from __future__ import annotations

import time

from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.approval_requests import ApprovalRequest, ApprovalRequests
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks


def _decision(at: float, approver: str, decision: str = "approved", via: str = "page") -> ApprovalRequest:
    return ApprovalRequest(at=at, via=via, outcome="accepted", reason=f"plan p {decision} by {approver}", plan_id="p", host="web1",
                           decision=decision, approver=approver, remote="127.0.0.1")


def test_a_plan_takes_one_decision_and_what_comes_after_it_is_answered_with_that_one(memory_place: MemoryPlace) -> None:
    requests = ApprovalRequests(memory_place.open().database)
    assert requests.decision_of("p") is None
    assert requests.accept(_decision(10.0, "alice")) is None
    # the same click again (a retry), and another person's other decision: the first decision stands, nothing written
    assert requests.accept(_decision(11.0, "alice")) == _decision(10.0, "alice")
    assert requests.accept(_decision(12.0, "bob", "denied", via="slack")) == _decision(10.0, "alice")
    assert requests.decision_of("p") == _decision(10.0, "alice") and len(requests.between(0, 100)) == 1
    # another plan decides on its own
    assert requests.accept(ApprovalRequest(at=13.0, via="slack", outcome="accepted", reason="r", plan_id="q", decision="denied",
                                           approver="bob")) is None


def test_refusals_are_kept_beside_the_decisions_and_exported_with_the_audit_trail(memory_place: MemoryPlace) -> None:
    now = time.time()
    requests = ApprovalRequests(memory_place.open().database)
    requests.refused(ApprovalRequest(at=now - 5, via="page", outcome="refused", reason="not signed", refusal="forged", remote="10.0.0.9"))
    requests.accept(_decision(now - 4, "alice"))
    requests.refused(ApprovalRequest(at=now - 3, via="slack", outcome="refused", reason="used", refusal="used", plan_id="p", host="web1",
                                     decision="approved", claimed_by="U0BOB", approver="bob"))
    assert [(request.outcome, request.refusal) for request in requests.between(now - 10, now)] == [
        ("refused", "forged"), ("accepted", ""), ("refused", "used")]
    assert requests.between(now - 3.5, now) == [requests.between(now - 10, now)[-1]]
    exported = memory_tasks.perform(memory_tasks.export, {**memory_place.options(), "format": "audit", "days": 1, "dest": None},
                                    check_mode=False, task_vars={})["records"]
    assert [(record["kind"], record["approver"], record["detail"]["refusal"]) for record in exported] == [
        ("approval_request", None, "forged"), ("approval_request", "alice", ""), ("approval_request", "bob", "used")]
