"""The audit trail: JSON Lines whose fields stay what docs/audit-schema.json and the guide reports.rst say (a golden file), from
the memory on both backends and, the same records, from a run's results as the callback appends them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
from guides import code_blocks
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import (
    Attempt,
    Decision,
    PendingPlan,
    Plan,
    PlanSource,
    Step,
    StepResult,
    Verdict,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import (
    APPROVAL_REQUEST_KIND,
    KINDS,
    NOTIFICATION_KIND,
    SCHEMA_VERSION,
    append_audit,
    approval_request_records,
    audit_records,
    iso_utc,
    notification_records,
    to_lines,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.approval_requests import REFUSALS, ApprovalRequest
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure

ROOT = Path(__file__).resolve().parents[5]
SCHEMA = json.loads((ROOT / "docs" / "audit-schema.json").read_text())
GOLDEN = Path(__file__).with_name("audit.golden.jsonl")
T0 = 1_795_000_000.25  # 2026-11-18T11:06:40.250Z


def _verdict(argv: tuple[str, ...], decision: Decision, rule: str) -> Verdict:
    return Verdict(command=" ".join(argv), argv=argv, decision=decision, reason=f"{rule} says so", rule=rule, become=True, policy_version="v7")


def record_fixed_incidents(memory: Memory) -> None:
    """Three incidents with fixed times and ids: healed on the second attempt, approved; escalated; waiting for a person."""
    start = ("service", "nginx", "start")
    clean = ("rm", "-f", "/run/nginx.pid")
    failure = nginx_failure()
    restart = Plan(PlanSource.GENERIC, "restart", "restart it", (Step("service {init_service} start", start),))
    first = Attempt(number=1, diagnosis="nginx is not running", plan=restart,
                    verdicts=[_verdict(start, Decision.ALLOW, "service-control")], policy_version="v7",
                    results=[StepResult(start, "failed", rc=1, stderr="Job for nginx.service failed.", duration_s=1.5)],
                    verification={"healthy": False, "summary": "nginx is not running"}, outcome="failed",
                    artifacts=["/state/runs/web1/run-1"], started_at=T0, finished_at=T0 + 3)
    second = Attempt(number=2, diagnosis="stale pid file", plan=Plan(PlanSource.RUNBOOK, "nginx-stale-pid", "remove the pid file",
                                                                     (Step("rm -f {pidfile}", clean), Step("service {init_service} start", start))),
                     verdicts=[_verdict(clean, Decision.APPROVE, "pidfile-cleanup"), _verdict(start, Decision.ALLOW, "service-control")],
                     policy_version="v7", approved_by="alice",
                     results=[StepResult(clean, "ok", rc=0, duration_s=0.25), StepResult(start, "ok", rc=0, stdout="started", duration_s=1.0)],
                     verified=True, verification={"healthy": True, "summary": ""}, outcome="healed",
                     artifacts=["/state/runs/web1/run-2"], started_at=T0 + 10, finished_at=T0 + 14)
    memory.record_attempt(incident_id="incident-healed", failure=failure, attempt=first, run_id="run-a")
    memory.record_attempt(incident_id="incident-healed", failure=failure, attempt=second, run_id="run-a")
    said = 'nginx: [emerg] unknown directive "server_nmae" in /etc/nginx/sites-enabled/default:24'
    broken = dataclasses.replace(nginx_failure("not_running", host="web2"), summary="nginx: configuration test failed")
    escalated = Attempt(number=1, diagnosis="invalid configuration",
                        evidence_results={"nginx -t": StepResult(("nginx", "-t"), "failed", rc=1, stdout=said, duration_s=0.1)},
                        plan=Plan(PlanSource.RUNBOOK, "nginx-config-error", "a person fixes the configuration",
                                  escalation=f"nginx: its configuration is invalid: {said}"),
                        outcome="escalated", artifacts=["/state/runs/web2/run-3"], started_at=T0 + 20, finished_at=T0 + 21)
    memory.record_attempt(incident_id="incident-escalated", failure=broken, attempt=escalated, run_id="run-a")
    truncate = ("truncate", "-s", "0", "/var/log/redis/redis-server.log")
    waiting = Attempt(number=1, diagnosis="the log filesystem is full",
                      plan=Plan(PlanSource.RUNBOOK, "redis-log-disk-full", "free the log filesystem", (Step("truncate -s 0 {log}", truncate),)),
                      verdicts=[_verdict(truncate, Decision.APPROVE, "log-truncate")],
                      policy_version="v7", outcome="awaiting_approval", started_at=T0 + 30, finished_at=T0 + 31)
    pending = PendingPlan(plan_hash="bound", policy_file="policies/default.yml", created_at=T0 + 31, expires_at=T0 + 86400)
    memory.record_attempt(incident_id="incident-waiting", failure=nginx_failure(host="web3"), attempt=waiting, run_id="run-a", pending=pending)


def _records(memory_place: MemoryPlace) -> list[dict[str, Any]]:
    with memory_place.open() as memory:
        record_fixed_incidents(memory)
        episodes = memory.episodes_between(T0, T0 + 3600)
    return [record for episode in episodes for record in audit_records(episode)]


def test_the_export_of_a_window_is_the_golden_file_on_both_backends(memory_place: MemoryPlace) -> None:
    """The fields, their order of records and their values are a contract with whatever reads the trail (a SIEM's
    parser): a change here is a change of docs/audit-schema.json's version."""
    assert to_lines(_records(memory_place)) == GOLDEN.read_text()


def test_every_record_validates_against_the_documented_schema(memory_place: MemoryPlace) -> None:
    records = _records(memory_place)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for record in records:
        validator.validate(record)
    not_an_episodes = {NOTIFICATION_KIND, APPROVAL_REQUEST_KIND}
    assert {record["kind"] for record in records} == set(KINDS) == set(SCHEMA["properties"]["kind"]["enum"]) - not_an_episodes
    assert SCHEMA["properties"]["schema"]["const"] == SCHEMA_VERSION
    assert set(SCHEMA["required"]) == set(records[0])


def test_the_window_is_read_from_the_start_of_each_episode(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        record_fixed_incidents(memory)
        assert [e["incident_id"] for e in memory.episodes_between(T0 + 10, T0 + 30)] == ["incident-healed", "incident-escalated"]
        waiting = memory.episodes_between(T0 + 30, T0 + 31)
    assert [(e["outcome"], bool(e["plan_id"])) for e in waiting] == [("awaiting_approval", True)]


def test_times_are_utc_iso_8601_with_milliseconds() -> None:
    assert iso_utc(T0) == "2026-11-18T11:06:40.250Z"
    assert iso_utc(59.9996) == "1970-01-01T00:01:00.000Z"  # a rounded millisecond carries into the second


def test_the_callbacks_live_records_are_those_the_memory_exports_for_the_same_run(tmp_path: Path) -> None:
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY])
    outcome = heal_incident(nginx_failure(), tools)
    live = tmp_path / "audit.jsonl"
    written = append_audit(outcome.to_dict()["attempt_log"], live)
    assert tools.memory is not None
    exported = [record for episode in tools.memory.episodes_between(0, 2e9) for record in audit_records(episode)]
    assert live.read_text() == to_lines(exported) and written == len(exported)
    kinds = [record["kind"] for record in exported]
    assert kinds == ["incident_opened", "evidence", "plan", "verdict", "verdict", "step_executed", "step_executed", "verification", "outcome"]
    assert all(record["episode_id"] == outcome.state.episodes[0] and set(record["artifact_dirs"]) == {"/dev/null"} for record in exported)


def test_the_line_docs_reports_md_shows_is_a_valid_record() -> None:
    [example] = code_blocks("reports", "json")
    jsonschema.validate(json.loads(example.body), SCHEMA)


def test_a_notification_record_validates_against_the_documented_schema() -> None:
    sent = {"destination": "notify[0] (slack)", "type": "slack", "event": "escalated", "key": "sentinel.heal/web1/nginx/f", "incident_id": "i1",
            "delivered": False, "tries": 3, "error": "HTTP 500 Internal Server Error", "skipped": False}
    [record] = notification_records("web1", [sent], T0)
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert (record["kind"], record["incident_id"], record["detail"]["tries"]) == (NOTIFICATION_KIND, "i1", 3)


def test_an_approval_request_record_validates_against_the_documented_schema() -> None:
    taken = ApprovalRequest(at=T0, via="page", outcome="accepted", reason="plan p approved by alice", plan_id="p", host="web1",
                            decision="approved", approver="alice", remote="127.0.0.1")
    refused = [ApprovalRequest(at=T0, via="slack", outcome="refused", reason="why", refusal=kind, claimed_by="U0123") for kind in REFUSALS]
    records = approval_request_records(request.to_dict() for request in [taken, *refused])
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for record in records:
        validator.validate(record)
    assert (records[0]["kind"], records[0]["approver"], records[0]["detail"]["plan_id"]) == (APPROVAL_REQUEST_KIND, "alice", "p")
    assert records[1]["approver"] is None and {record["detail"]["refusal"] for record in records[1:]} == set(REFUSALS)
