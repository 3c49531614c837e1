"""What a heal task returns for a host (the session's result, not a report): status, counts, per-incident detail, the
summary lines, the plans that wait and the --diff."""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentOutcome


def host_result(host: str, outcomes: Sequence[IncidentOutcome], *, check_mode: bool,
                fleet_closed: Sequence[FleetIncident] = ()) -> dict[str, Any]:
    incidents = [outcome.to_dict() for outcome in outcomes]
    status = Status.worst([Status(i["status"]) for i in incidents]).value
    plan_ids = [i["plan_id"] for i in incidents if i["plan_id"]]
    summary = [summary_line(host, i, check_mode) for i in incidents] or [f"{host}: every declared service is healthy"]
    return {
        # check mode reports what would change, as Ansible modules do: an allowed plan would run
        "changed": any(i["changed"] or (check_mode and i["status"] == Status.PLANNED.value) for i in incidents),
        "status": status,
        "attempts": sum(i["attempts"] for i in incidents),
        "episodes": [episode for i in incidents for episode in i["episodes"]],
        "plan_id": plan_ids[0] if plan_ids else None,
        "plan_ids": plan_ids,
        "incidents": incidents,
        "timeline": [event for outcome in outcomes for event in outcome.state.timeline],
        "summary": summary + [closed_line(host, incident) for incident in fleet_closed],
        "warnings": [warning for i in incidents for warning in i["warnings"]],
        "pending_plans": [pending_plan(host, i) for i in incidents if i["plan_id"]],
        # fleet incidents this host's check or heal closed: every host of theirs was seen without their failure
        "fleet_incidents_closed": [incident.to_dict() for incident in fleet_closed],
    }


def with_enforcement(result: dict[str, Any], host: str, asked: str, privilege: str, enforcement: Mapping[str, Any] | None) -> dict[str, Any]:
    """The result with where the policy was enforced (``enforcement``, and a summary line), when the task asked for the
    executor (``auto`` or ``executor``): a host that ran without it is said, never assumed. ``enforcement``: what the
    executor's check said of the healing account's other sudo rules."""
    if asked not in ("auto", "executor") or result.get("unreachable") or "summary" not in result:
        return result
    on_executor = privilege == "executor"
    other_rules = [str(rule) for rule in (enforcement or {}).get("other_rules") or []]
    if not on_executor:
        line = (f"{host}: not enforced on the host: it has no executor (playbooks/host.yml installs it), so the guard on the "
                "controller alone judged every step")
    elif other_rules:
        line = (f"{host}: not enforced on the host: the executor judged every step and read, but the healing account keeps other "
                f"sudo rules beside it ({'; '.join(other_rules)})")
    else:
        line = f"{host}: enforced on the host: the executor judged every step and read, and it is all the healing account may run as root"
    return {**result, "enforcement": {"executor": on_executor, "enforced": on_executor and not other_rules, "other_rules": other_rules},
            "summary": [*result["summary"], line]}


def closed_line(host: str, incident: FleetIncident) -> str:
    return (f"{host}: fleet incident {incident.id} closed: {incident.service} on its {len(incident.hosts)} hosts was seen without the "
            f"failure it opened with ({incident.summary})")


def pending_plan(host: str, incident: dict[str, Any]) -> dict[str, Any]:
    """What an approver needs, in the form set_stats hands to the next job of an AWX workflow."""
    return {
        "plan_id": incident["plan_id"],
        "host": host,
        "service": incident["service"],
        "steps": [{"argv": v["argv"], "command": shlex.join(v["argv"]), "decision": v["decision"], "reason": v["reason"]}
                  for v in incident["verdicts"]],
        "reason": incident["reason"],
        "puts_back": incident["puts_back"],
    }


def diff_of(outcomes: Sequence[IncidentOutcome]) -> list[dict[str, str]]:
    """--diff: the failure before, the plan and the guard's verdict on each step after."""
    diffs = []
    for outcome in outcomes:
        attempt = outcome.state.attempts[-1] if outcome.state.attempts else None
        if attempt is None or attempt.plan is None:
            continue
        plan = attempt.plan
        failure = outcome.state.failure
        after = [f"# {plan.escalation}"] if plan.escalation else [
            f"{verdict.decision.value:<8} {shlex.join(verdict.argv)}    # {verdict.rule}: {verdict.reason}" for verdict in attempt.verdicts
        ]
        diffs.append({
            "before_header": f"{failure.host} {failure.service}: {failure.failure_class}",
            "before": failure.summary + "\n",
            "after_header": f"plan from {plan.source.value} {plan.reference}",
            "after": "\n".join(after) + "\n",
        })
    return diffs


def summary_line(host: str, incident: dict[str, Any], check_mode: bool) -> str:
    service, status = incident["service"], incident["status"]
    plan = incident["plan"] or {}
    commands = "; ".join(" ".join(step["argv"]) for step in plan.get("steps", []))
    source = f"{plan.get('source')} {plan.get('reference')}" if plan else "no plan"
    if check_mode:
        return f"{host}: {service} would be {status} (check mode): {commands or incident['reason']} [from {source}]"
    if status == Status.HEALED.value:
        tries = "attempt" if incident["attempts"] == 1 else "attempts"
        approved = f", approved by {incident['approved_by']}" if incident["approved_by"] else ""
        if incident.get("relapsed_from") is not None:
            return (f"{host}: {incident['reason']}; healed again in {incident['attempts']} {tries} with: {commands} "
                    f"[plan from {source}{approved}]")
        return f"{host}: {service} healed in {incident['attempts']} {tries} with: {commands} [plan from {source}{approved}]"
    if status == Status.AWAITING_APPROVAL.value:
        return f"{host}: {service} awaits approval of plan {incident['plan_id']}: {commands} ({incident['reason']})"
    return f"{host}: {service} {status}: {incident['reason']}"


def interrupted_line(host: str, entry: Mapping[str, Any]) -> str:
    """A remediation whose job died, as the next run found it (:meth:`Memory.reap_interrupted`)."""
    return f"{host}: {entry['service']} remediation of an earlier job interrupted (episode {entry['episode']}): {entry['summary']}"
