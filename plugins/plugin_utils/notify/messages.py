"""What is said, before any format: one :class:`Notice` per incident and state change, never per attempt, made once the
incident's outcome is final - escalated (the cause in the service's words, what was tried, what changed, the next
action), awaiting approval (each step's argv, the diff a restore puts back, the expiry), healed (after a wait, a relapse
or more than one attempt: ``resolved``; on the first try: ``healed``, which destinations ask for), a plan approved (and
what follows names who approved it) or denied (who and why), and a fleet incident opened or closed (one notice for all
its hosts).

Everything a host or a model wrote is a :class:`Fact`'s text: data that each format quotes and escapes, never markup;
:func:`redacted` masks the run's secrets in all of it before a notice leaves. A waiting plan's notice carries its signed
approval link (:func:`with_approvals`, notify/links.py), or says why it is approved with approve.yml only."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import StoredPlan
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentOutcome
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import ApprovalLink, LinkClaim, LinkSigner

# PagerDuty's limit on a summary, which the other formats keep to as well: a title is a line, not the evidence
MAX_SUMMARY = 1024
# characters of one fact's text (a diff, what was tried): a message is read on a phone
MAX_FACT = 1500
SEVERITY = {"escalated": "error", "awaiting_approval": "warning", "fleet_opened": "critical", "approved": "info", "denied": "warning",
            "resolved": "info", "healed": "info", "fleet_closed": "info"}
# the events that close what another one opened (PagerDuty resolves its incident)
CLOSING = ("resolved", "healed", "fleet_closed")


@dataclass(frozen=True)
class Fact:
    """One labelled piece of a message: the label is ours, the text is data. ``code``: shown as code (argv, a diff)."""

    label: str
    text: str
    code: bool = False


@dataclass(frozen=True)
class Notice:
    """One message about one incident (or fleet incident) in one state."""

    event: str
    title: str
    host: str
    service: str
    # what names the incident across runs and state changes (PagerDuty's dedup_key)
    key: str
    facts: tuple[Fact, ...] = ()
    hosts: tuple[str, ...] = ()
    incident_id: str = ""
    plan_id: str | None = None
    expires_at: float | None = None
    steps: tuple[tuple[str, ...], ...] = ()
    fleet_incident: int | None = None
    at: float = 0.0
    # a waiting plan's signed link to the approval page (ours, not host text: never redacted, each format links it)
    approval: ApprovalLink | None = None
    # who approved or denied the incident's plan
    decided_by: str | None = None

    @property
    def severity(self) -> str:
        return SEVERITY[self.event]

    @property
    def summary(self) -> str:
        return clip(self.title, MAX_SUMMARY)

    def to_dict(self) -> dict[str, Any]:
        """The plain webhook's message (docs/notify-schema.json)."""
        return {"schema": 1, "source": "sentinel.heal", "event": self.event, "severity": self.severity, "summary": self.summary,
                "key": self.key, "host": self.host, "service": self.service, "hosts": list(self.hosts), "incident_id": self.incident_id,
                "plan_id": self.plan_id, "fleet_incident": self.fleet_incident, "expires_at": self.expires_at, "at": self.at,
                "decided_by": self.decided_by,
                "steps": [list(argv) for argv in self.steps], "approval_url": self.approval.url if self.approval else None,
                "facts": [{"label": fact.label, "text": fact.text, "code": fact.code} for fact in self.facts]}


def clip(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def incident_key(host: str, service: str, fingerprint: str) -> str:
    """The same failure of the same service on the same host is one incident on call, whatever run sees it next."""
    return f"sentinel.heal/{host}/{service}/{fingerprint}"


def event_of(outcome: IncidentOutcome) -> str | None:
    """What the incident's final state says, or None when it says nothing to a person (healthy, silenced, deferred,
    suspended, observed, checked: a person chose those, or the next run sees it again; escalated by its fleet incident
    with nothing run here: the fleet incident's message says it)."""
    state = outcome.state
    if state.status == Status.ESCALATED.value:
        # part of a fleet incident with nothing run here (held, or every known plan tried on its canary): the fleet
        # incident's one message names this host with the others - a storm of a hundred hosts is one message, not a
        # hundred and one; the canary that tried a plan says what it tried
        ran_here = any(result.status != "skipped" for attempt in state.attempts for result in attempt.results)
        return None if state.fleet_incident is not None and not ran_here else "escalated"
    if state.status == Status.AWAITING_APPROVAL.value:
        return "awaiting_approval"
    if state.status in (Status.HEALED.value, Status.RECOVERED.value):
        waited = state.relapse is not None or len(state.attempts) > 1 or state.awaited_systemd or state.awaited_dependencies or any(
            attempt.approved_by for attempt in state.attempts)
        return "resolved" if waited else "healed"
    return None


def notices_of(outcomes: Iterable[IncidentOutcome], *, approval_ttl: float, now: float) -> list[Notice]:
    """The notices of a host's incidents, once their outcomes are final: one each (an approved heal says it was approved
    first, which on call acknowledges the page)."""
    notices = []
    for outcome in outcomes:
        event = event_of(outcome)
        if event is None:
            continue
        approver = next((attempt.approved_by for attempt in reversed(outcome.state.attempts) if attempt.approved_by), None)
        if approver:
            notices.append(_incident_notice(outcome, "approved", approval_ttl, now, approver))
        notices.append(_incident_notice(outcome, event, approval_ttl, now, approver))
    return notices


def _title(outcome: IncidentOutcome, event: str, approver: str | None) -> str:
    state = outcome.state
    where = f"{state.failure.service} on {state.failure.host}"
    tries = f"{len(state.attempts)} attempt{'s' if len(state.attempts) != 1 else ''}"
    # what follows a person's approval says who it was, in chat too (which is not told of the approval itself by default)
    approved = f" (plan {state.plan_id or state.approved_plan_id} approved by {approver})" if approver else ""
    return {
        "escalated": f"{where} needs a person{approved}: {state.reason}",
        "awaiting_approval": f"{where} waits for approval of plan {state.plan_id}",
        "approved": f"{where}: plan {state.plan_id or state.approved_plan_id} approved by {approver}",
        "resolved": f"{where} healed after {tries}" + (" (a relapse)" if state.relapse else "") + approved,
        "healed": f"{where} healed{approved}",
    }[event]


def _incident_notice(outcome: IncidentOutcome, event: str, approval_ttl: float, now: float, approver: str | None) -> Notice:
    state, failure = outcome.state, outcome.state.failure
    last = state.attempts[-1] if state.attempts else None
    facts = [Fact("Failure", failure.summary)]
    if failure.cause:
        facts.append(Fact("Cause (the journal)", failure.cause))
    steps: tuple[tuple[str, ...], ...] = ()
    if event == "escalated":
        facts.append(Fact("Why", state.reason))
        tried = list(_tried(state.attempts))
        facts.append(Fact("Tried", "\n".join(tried) if tried else "nothing ran", code=bool(tried)))
        if failure.what_changed:
            facts.append(Fact("Changed", failure.what_changed))
        facts.append(Fact("Next", "a person looks at the host: the run's report and sentinel.heal.memory_info have the evidence and "
                                  "every attempt; sentinel.heal.silence keeps the loop off it meanwhile"))
    elif event == "awaiting_approval" and last is not None:
        steps = tuple(tuple(verdict.argv) for verdict in last.verdicts)
        facts.append(Fact("Steps", "\n".join(f"{verdict.decision.value}: {shlex.join(verdict.argv)}" for verdict in last.verdicts), code=True))
        for restore in failure.puts_back(last.plan) if last.plan else []:
            facts.append(Fact(f"Puts back {restore['path']}", clip(restore.get("diff") or "(the same content)", MAX_FACT), code=True))
        facts.append(Fact("Next", f"ansible-playbook sentinel.heal.approve -e plan_id={state.plan_id} (or -e deny=true)", code=True))
    elif event in ("resolved", "healed") and last is not None and last.plan is not None:
        facts.append(Fact("Healed with", "\n".join(shlex.join(step.argv) for step in last.plan.steps) or last.plan.reference, code=True))
    return Notice(event=event, title=_title(outcome, event, approver), host=failure.host, service=failure.service,
                  key=incident_key(failure.host, failure.service, failure.fingerprint),
                  facts=tuple(Fact(fact.label, clip(fact.text, MAX_FACT), fact.code) for fact in facts),
                  incident_id=state.incident_id, plan_id=state.plan_id or state.approved_plan_id, steps=steps, at=now, decided_by=approver,
                  expires_at=now + approval_ttl if event == "awaiting_approval" else None,
                  fleet_incident=state.fleet_incident.id if state.fleet_incident else None)


def _tried(attempts: Sequence[Any]) -> Iterable[str]:
    for attempt in attempts:
        if attempt.plan is None or not attempt.plan.steps:
            continue
        commands = "; ".join(shlex.join(step.argv) for step in attempt.plan.steps)
        yield f"attempt {attempt.number}: {commands} -> {attempt.outcome or 'not run'}"


def fleet_notice(incident: FleetIncident, *, opened: bool, now: float) -> Notice:
    """A fleet incident opened or closed: one notice for all its hosts."""
    event = "fleet_opened" if opened else "fleet_closed"
    said = (f"fleet incident {incident.id}: {incident.service} fails the same way on {len(incident.hosts)} hosts" if opened
            else f"fleet incident {incident.id} closed: {incident.service} is back on its {len(incident.hosts)} hosts")
    facts = [Fact("Failure", incident.summary), Fact("Hosts", ", ".join(incident.hosts))]
    if opened:
        facts.append(Fact("In common", "; ".join(incident.common) or "nothing their evidence shows"))
        facts.append(Fact("Next", "no new plan runs host by host while it is open; a plan verified before runs on one host first"))
    return Notice(event=event, title=said, host=incident.hosts[0] if incident.hosts else "", service=incident.service,
                  key=f"sentinel.heal/fleet/{incident.id}", facts=tuple(Fact(f.label, clip(f.text, MAX_FACT)) for f in facts),
                  hosts=incident.hosts, fleet_incident=incident.id, at=now)


def denied_notice(stored: StoredPlan, *, by: str, note: str, now: float) -> Notice:
    """A plan a person denied (sentinel.heal.approval): who and why, said once - a plan is denied once, while pending -
    under the key of the incident whose wait it ends (PagerDuty acknowledges the page the wait opened)."""
    facts = [Fact("Failure", stored.failure.summary), Fact("Why", note or "(no reason given)"),
             Fact("Denied", "\n".join(shlex.join(step.argv) for step in stored.plan.steps) or stored.plan.reference, code=True),
             Fact("Next", "nothing of the plan ran: a person looks at the host; sentinel.heal.silence keeps the loop off it meanwhile")]
    return Notice(event="denied", title=f"{stored.service} on {stored.host}: plan {stored.plan_id} denied by {by}" + (f": {note}" if note else ""),
                  host=stored.host, service=stored.service, key=incident_key(stored.host, stored.service, stored.fingerprint),
                  facts=tuple(Fact(fact.label, clip(fact.text, MAX_FACT), fact.code) for fact in facts), incident_id=stored.incident_id,
                  plan_id=stored.plan_id, steps=tuple(tuple(step.argv) for step in stored.plan.steps), at=now, decided_by=by)


def redacted(notice: Notice, secrets: Sequence[str]) -> Notice:
    """The notice with the run's secrets and the secret patterns masked in every text a host or a model wrote."""
    return replace(notice, title=redact(notice.title, secrets), host=redact(notice.host, secrets),
                   decided_by=None if notice.decided_by is None else redact(notice.decided_by, secrets),
                   facts=tuple(Fact(redact(fact.label, secrets), redact(fact.text, secrets), fact.code) for fact in notice.facts),
                   steps=tuple(tuple(redact(list(argv), secrets)) for argv in notice.steps), hosts=tuple(redact(list(notice.hosts), secrets)))


def with_approvals(notices: Sequence[Notice], outcomes: Iterable[IncidentOutcome], *, approvable_from_chat: Callable[[str], bool],
                   plan: Callable[[str], Mapping[str, Any] | None], signer: LinkSigner | None) -> list[Notice]:
    """The notices, a waiting plan's with how it is approved where the message is read: a plan with a step the policy
    keeps out of chat (a rule's ``approve_from_chat: false``) says so and names approve.yml; any other, while it still
    waits in the memory (``plan``: its row), carries its signed link, expiring with the plan (none without ``signer``)."""
    by_plan = {outcome.state.plan_id: outcome for outcome in outcomes if outcome.state.plan_id and outcome.state.attempts}
    offered = []
    for notice in notices:
        outcome = by_plan.get(notice.plan_id) if notice.event == "awaiting_approval" and notice.plan_id else None
        if outcome is None:
            offered.append(notice)
            continue
        kept_out = [verdict for verdict in outcome.state.attempts[-1].verdicts
                    if verdict.decision is Decision.APPROVE and not approvable_from_chat(verdict.rule)]
        row = plan(notice.plan_id) if not kept_out and signer is not None and notice.plan_id else None
        if kept_out:
            said = "; ".join(f"{shlex.join(verdict.argv)} ({verdict.rule}: {verdict.reason})" for verdict in kept_out)
            offered.append(replace(notice, facts=(*notice.facts, Fact("Not from chat", clip(
                f"the policy has a person approve this plan with approve.yml only (the command above), not from a chat message: {said}",
                MAX_FACT)))))
        elif row is not None and signer is not None and row["status"] == "pending":
            claim = LinkClaim(plan_id=row["plan_id"], plan_hash=row["plan_hash"], host=row["host"], expires_at=int(row["expires_at"]))
            offered.append(replace(notice, approval=signer.link(claim), expires_at=float(row["expires_at"])))
        else:
            offered.append(notice)
    return offered


__all__ = ["CLOSING", "Fact", "Notice", "denied_notice", "event_of", "fleet_notice", "incident_key", "notices_of", "redacted", "with_approvals"]
