"""What the heal action returns for a host: status, counts, per-incident detail and a summary."""

from __future__ import annotations

from typing import Any, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.healing import IncidentOutcome
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Status


def host_result(host: str, outcomes: Sequence[IncidentOutcome], *, check_mode: bool) -> dict[str, Any]:
    incidents = [outcome.to_dict() for outcome in outcomes]
    status = Status.worst([Status(i["status"]) for i in incidents]).value
    plan_ids = [i["plan_id"] for i in incidents if i["plan_id"]]
    return {
        "changed": any(i["changed"] for i in incidents),
        "status": status,
        "attempts": sum(i["attempts"] for i in incidents),
        "episodes": [episode for i in incidents for episode in i["episodes"]],
        "plan_id": plan_ids[0] if plan_ids else None,
        "plan_ids": plan_ids,
        "incidents": incidents,
        "timeline": [event for outcome in outcomes for event in outcome.state.timeline],
        "summary": [summary_line(host, i, check_mode) for i in incidents] or [f"{host}: every declared service is healthy"],
        "warnings": [warning for i in incidents for warning in i["warnings"]],
    }


def summary_line(host: str, incident: dict[str, Any], check_mode: bool) -> str:
    service, status = incident["service"], incident["status"]
    plan = incident["plan"] or {}
    commands = "; ".join(" ".join(step["argv"]) for step in plan.get("steps", []))
    source = f"{plan.get('source')} {plan.get('reference')}" if plan else "no plan"
    if check_mode:
        return f"{host}: {service} would be {status} (check mode): {commands or incident['reason']} [from {source}]"
    if status == Status.HEALED.value:
        tries = "attempt" if incident["attempts"] == 1 else "attempts"
        return f"{host}: {service} healed in {incident['attempts']} {tries} with: {commands} [plan from {source}]"
    if status == Status.AWAITING_APPROVAL.value:
        return f"{host}: {service} awaits approval of plan {incident['plan_id']}: {commands} ({incident['reason']})"
    return f"{host}: {service} {status}: {incident['reason']}"
