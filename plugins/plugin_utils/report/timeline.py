"""The timeline of a whole run for a terminal: per host and service, the path through the heal loop and every step of it
(with -v, the plans and the guard's verdicts too). The HTML report is report/run.py."""

from __future__ import annotations

import shlex
import time
from typing import Any, Mapping


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
