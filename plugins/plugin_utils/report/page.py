"""What every HTML report shares: one self-contained page (inline CSS, no script, no font or image from the network),
escaping, UTC times, the order of outcomes by how much they need a human, and what a human should do next."""

from __future__ import annotations

import html
import time
from typing import Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment

# The outcomes of an incident (incident.Status, and an episode's own outcomes), the ones that need a person first.
ATTENTION_ORDER = (
    "escalated", "flapping", "awaiting_approval", "unreachable", "halted", "interrupted", "denied", "blocked", "failed", "suspended", "deferred",
    "in_progress_elsewhere", "observed", "planned", "healed", "recovered", "silenced", "masked", "healthy",
)
NEEDS_A_HUMAN = frozenset(ATTENTION_ORDER[:ATTENTION_ORDER.index("deferred")])

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:80em}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin:0.3em 0}h3{font-size:1em;margin:0.8em 0 0.2em}"
    "table{border-collapse:collapse;margin:0.4em 0}td,th{padding:2px 8px;vertical-align:top;text-align:left;border-bottom:1px solid #ddd}"
    "section.incident{border-left:6px solid #999;padding:0.2em 1em;margin:1em 0;background:#fafafa}"
    "pre{background:#f0f0f0;padding:0.4em;white-space:pre-wrap;word-break:break-all;max-height:20em;overflow:auto;margin:0.2em 0}"
    "code{background:#eee;padding:0 2px}.cause{font-weight:bold;background:#fff3f3;border:1px solid #c22;padding:0.3em}"
    ".next{background:#fff8e0;border:1px solid #d90;padding:0.3em}"
    ".escalated,.flapping,.unreachable,.halted,.interrupted,.denied,.blocked,.failed{border-color:#c22}"
    ".awaiting_approval,.planned,.suspended,.deferred,.in_progress_elsewhere,.observed{border-color:#d90}"
    ".healed,.recovered,.healthy{border-color:#2a2}.silenced,.masked{border-color:#888}"
    "span.status{display:inline-block;padding:0 6px;border-radius:3px;border-width:2px;border-style:solid}"
    "svg{margin:0.4em 1em 0.4em 0;font-size:11px}.muted{color:#666}"
)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def utc(at: float | None) -> str:
    """A time as UTC ISO 8601 (seconds), the form every report and the audit trail use."""
    if not at:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def attention_rank(status: str) -> int:
    return ATTENTION_ORDER.index(status) if status in ATTENTION_ORDER else len(ATTENTION_ORDER)


def status_badge(status: str) -> str:
    return f"<span class='status {esc(status)}' data-status='{esc(status)}'>{esc(status.replace('_', ' '))}</span>"


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='generator' content='sentinel.heal'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body><h1>{esc(title)}</h1>{body}</body></html>\n")


def next_step(incident: Mapping[str, object]) -> str:
    """What a person should do about an incident now, in words that name its host, service and plan - or the limit that
    held it back, until when, and the command that lifts it."""
    status, host, service = str(incident.get("status")), str(incident.get("host")), str(incident.get("service"))
    plan_id = incident.get("plan_id")
    held = incident.get("limit")
    if isinstance(held, Mapping):
        until = held.get("until")
        when = (f"until {moment(float(until))} (the first run after that takes it up)" if isinstance(until, (int, float))
                else str(held.get("ends") or ""))
        return f"Nothing ran on {host}: the {held.get('limit')} limit holds {service} {when}. To lift it now: {held.get('lift')}"
    silence = f"sentinel.heal.silence host={host} service={service}"
    if status == "escalated":
        return (f"Fix the cause above on {host} by hand ({service}'s own words say what is wrong); the next heal run verifies it. "
                f"To keep the loop off {service} meanwhile: {silence} duration=2h decided_by=YOU note=WHY.")
    if status == "awaiting_approval":
        return (f"Read the plan and its verdicts below, then approve it: ansible-playbook sentinel.heal.approve -e plan_id={plan_id} "
                f"(or deny it: add -e deny=true -e note=WHY).")
    if status == "unreachable":
        return f"Find out why {host} does not answer over SSH (down, network, credentials); the next run retries it."
    if status == "halted":
        return "Too many hosts of this run failed verification: find what they share before running heal again."
    if status == "interrupted":
        return f"The job died during a remediation on {host}: check {service} there and read the steps that had started."
    if status == "denied":
        return f"A person denied the plan: fix {service} on {host} by hand, or let the next run plan again."
    if status == "suspended":
        return "Healing is suspended (the kill switch): resume it with sentinel.heal.suspension state=absent decided_by=YOU when it is safe."
    if status in ("deferred", "in_progress_elsewhere"):
        return "Nothing to do: the next run (or the run already on it) takes it up."
    return ""
