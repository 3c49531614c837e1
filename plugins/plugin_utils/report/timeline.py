"""The timeline of a whole run for a terminal: per host and service, the path through the heal loop and every step of it
(with -v, the plans and the guard's verdicts too). The HTML report is report/run.py."""

from __future__ import annotations

import shlex
import time
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState

# an incident that takes longer than this shows, per host, which attempt and node it is in as it enters each node
LONG_WORK_S = 5.0


def timeline_text(hosts: Mapping[str, Mapping[str, Any]]) -> str:
    """The incidents of a run for a terminal: per host and service, the path and every step of the loop."""
    lines = []
    for host, result in sorted(hosts.items()):
        for incident in result.get("incidents") or []:
            lines.append(f"{host} {incident['service']}: {incident['status']} after {incident['attempts']} attempt(s) "
                         f"[{' > '.join(incident['path'])}]")
            for event in result.get("timeline") or []:
                if event["service"] == incident["service"]:
                    clock = time.strftime("%H:%M:%S", time.localtime(event["at"]))
                    lines.append(f"  {clock} {event['node']:<14} {event['message']}")
    return "\n".join(lines)


def plans_text(hosts: Mapping[str, Mapping[str, Any]]) -> str:
    """-v: each incident's last plan under its host and service, every step with the guard's decision and rule."""
    lines = []
    for host, result in sorted(hosts.items()):
        for incident in result.get("incidents") or []:
            plan = incident.get("plan")
            if not plan:
                continue
            lines.append(f"{host} {incident['service']}: plan from {plan['source']} {plan['reference']}"
                         + (f": escalates: {plan['escalation']}" if plan.get("escalation") else ""))
            for verdict in incident.get("verdicts") or []:
                lines.append(f"  {verdict['decision']:<8} {shlex.join(verdict['argv'])}    # {verdict['rule']}: {verdict['reason']}")
    return "\n".join(lines)


def progress_line(state: IncidentState, node: str, *, max_attempts: int, now: float) -> str | None:
    """Where an incident is, once it takes long (a canary awaited, a slow start, verification retries): its host and
    service, attempt n of m, the node it enters and the time so far; None while it is quick."""
    took = now - state.started_at
    if took < LONG_WORK_S:
        return None
    attempt = max(1, len(state.attempts) + (node == "diagnose"))  # diagnose opens the next attempt
    return f"{state.failure.host} {state.failure.service}: attempt {attempt} of {max_attempts}: {node} ({took:.0f} s)"
