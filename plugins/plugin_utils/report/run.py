"""The run report: one self-contained HTML page a person reads in a minute after a night of self-healing.

First the fleet: hosts by outcome, what needs a human on top. Then each incident: the failure and its evidence, the
diagnosis and where it came from, every plan with each step's argv and the guard's rule and decision, who approved it,
each step that ran (rc, duration, output: capped, already redacted), the verification, the ansible-runner run
directories, and for an incident that needs a person the cause in the service's own words and what to do next."""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import ERROR_LINE, NOTHING_SAID, evidence_digest
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, as_link, restores_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import (
    ATTENTION_ORDER,
    NEEDS_A_HUMAN,
    attention_rank,
    esc,
    next_step,
    page,
    status_badge,
    utc,
)

# characters of a step's output the page shows (its end: where the error usually is); the artifacts keep all of it
OUTPUT_CAP = 4000
OWN_WORDS_LINES = 3


def capped(text: str, cap: int = OUTPUT_CAP) -> str:
    if len(text) <= cap:
        return text
    return f"[{len(text) - cap} characters before this cut; the run's artifacts keep them]\n" + text[-cap:]


def _error_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and ERROR_LINE.search(line)]


def own_words(incident: Mapping[str, Any]) -> list[str]:
    """What the service itself said went wrong, latest attempt first: the error lines of the steps that failed, of the
    evidence commands and reads, then the journal's cause and the error lines of its status and logs."""
    said: list[str] = []
    log = list(incident.get("attempt_log") or [])
    for episode in reversed(log):
        results = episode.get("results") or {}
        texts = [f"{step.get('stdout', '')}\n{step.get('stderr', '')}" for step in results.get("steps") or [] if step.get("status") != "ok"]
        texts += [str(answer.get("stdout", "")) + "\n" + str(answer.get("stderr", "")) for answer in (results.get("evidence") or {}).values()]
        texts += [str(read.get("output", "")) for round_ in results.get("reads") or [] for read in round_.get("reads") or []]
        for text in texts:
            said += [line for line in _error_lines(text) if line not in said]
    said = said[:OWN_WORDS_LINES]
    last = log[-1] if log else {}
    failure = Failure(host=str(incident.get("host")), service=str(incident.get("service")), failure_class=str(incident.get("failure_class")),
                      summary=str(incident.get("summary") or ""), evidence=last.get("evidence") or incident.get("evidence") or {}, spec={})
    digest = evidence_digest(failure, lines=OWN_WORDS_LINES)
    if said and digest == NOTHING_SAID:
        return said
    return [*said, digest] if digest not in said else said


def _duration(incident: Mapping[str, Any]) -> float:
    log = incident.get("attempt_log") or []
    if not log:
        return 0.0
    return max(0.0, float(log[-1].get("finished_at") or 0) - float(log[0].get("started_at") or 0))


def _artifact_links(directories: Iterable[str]) -> str:
    links = [f"<a class='artifacts' href='file://{esc(directory)}'>{esc(directory)}</a>" for directory in dict.fromkeys(directories) if directory]
    return "ansible-runner run directories: " + ", ".join(links) if links else "<span class='muted'>no ansible-runner run</span>"


def _plan_html(episode: Mapping[str, Any]) -> str:
    plan = episode.get("plan")
    if not plan:
        return "<p class='muted'>no plan</p>"
    origin = f" (first planned by {plan['origin']})" if plan.get("origin") and plan["origin"] != f"{plan['source']} {plan['reference']}" else ""
    head = f"<p>plan from <b>{esc(plan['source'])} {esc(plan['reference'])}</b>{esc(origin)}: {esc(plan.get('rationale', ''))}</p>"
    if plan.get("escalation"):
        return head + f"<p>it escalates: {esc(plan['escalation'])}</p>"
    verdicts = list(episode.get("verdicts") or [])
    rows = []
    for index, step in enumerate(plan.get("steps") or []):
        verdict = verdicts[index] if index < len(verdicts) else {}
        rows.append(f"<tr><td><code class='argv'>{esc(shlex.join(step['argv']))}</code></td><td>{esc(verdict.get('decision', 'not judged'))}</td>"
                    f"<td>{esc(verdict.get('rule', ''))}</td><td>{esc(verdict.get('reason', ''))}</td></tr>")
    policy = f"policy {esc(episode.get('policy_version'))}" if episode.get("policy_version") else "policy not consulted"
    approver = episode.get("approved_by")
    approved = f"approved by <b class='approver'>{esc(approver)}</b>" if approver else (
        "waits for a person's approval" if episode.get("outcome") == "awaiting_approval" else "no approval needed or given")
    restored = "".join(f"<p>puts back the last known good <code>{esc(restore['path'])}</code>{esc(as_link(restore))} "
                       f"(sha256 {esc(restore['sha256'][:12])}):</p>"
                       f"<pre class='diff'>{esc(restore['diff'] or '(no diff to show)')}</pre>"
                       for restore in restores_of([step["argv"] for step in plan.get("steps") or []], episode.get("evidence") or {}))
    return (head + f"<table><tr><th>step (argv)</th><th>decision</th><th>rule</th><th>why</th></tr>{''.join(rows)}</table>"
            f"{restored}<p>{policy}; {approved}</p>")


def _steps_html(episode: Mapping[str, Any]) -> str:
    results = episode.get("results") or {}
    steps = results.get("steps") or []
    parts = []
    if steps:
        rows = "".join(
            f"<tr><td><code>{esc(shlex.join(step['argv']))}</code></td><td>{esc(step.get('status'))}</td><td>rc={esc(step.get('rc'))}</td>"
            f"<td>{float(step.get('duration_s') or 0):.1f} s</td><td>"
            + (f"<pre>{esc(capped(step.get('stdout', '')))}</pre>" if step.get("stdout") else "")
            + (f"<pre class='stderr'>{esc(capped(step.get('stderr', '')))}</pre>" if step.get("stderr") else "")
            + "</td></tr>"
            for step in steps
        )
        parts.append(f"<h3>executed</h3><table><tr><th>step</th><th>status</th><th>rc</th><th>duration</th><th>output</th></tr>{rows}</table>")
    verification = results.get("verification") or {}
    if verification:
        verdict = "healthy" if verification.get("healthy") else "still failing"
        parts.append(f"<p>verification: <b>{verdict}</b> {esc(verification.get('summary', ''))}</p>")
    return "".join(parts)


def _evidence_html(episode: Mapping[str, Any]) -> str:
    results = episode.get("results") or {}
    evidence = episode.get("evidence") or {}
    parts = []
    status = evidence.get("status") or {}
    if status.get("output"):
        parts.append(f"<p>{esc(status.get('command', 'status'))} (rc={esc(status.get('rc'))}):</p><pre>{esc(capped(str(status['output'])))}</pre>")
    for path, text in (evidence.get("logs") or {}).items():
        if text:
            parts.append(f"<p>log {esc(path)}:</p><pre>{esc(capped(str(text)))}</pre>")
    for command, answer in (results.get("evidence") or {}).items():
        parts.append(f"<p>read <code>{esc(command)}</code> rc={esc(answer.get('rc'))}:</p><pre>{esc(capped(str(answer.get('stdout', ''))))}</pre>")
    for round_ in results.get("reads") or []:
        reads = "".join(
            f"<li><code>{esc(read['command'])}</code> {esc(read.get('why', ''))} - {esc(read['decision'])} ({esc(read['rule'])}): "
            f"{esc(read['outcome'])}"
            + (f", rc={esc(read.get('rc'))}<pre>{esc(capped(str(read.get('output', ''))))}</pre>" if read["outcome"] == "ran"
               else f" - {esc(read.get('reason', ''))}")
            + "</li>"
            for read in round_.get("reads") or []
        )
        parts.append(f"<p>round {esc(round_.get('round'))}: {esc(round_.get('source'))} {esc(round_.get('reference'))} looked first</p>"
                     f"<ul>{reads}</ul>")
    return "<details><summary>evidence</summary>" + "".join(parts) + "</details>" if parts else ""


def _sources(incident: Mapping[str, Any], episode: Mapping[str, Any]) -> str:
    plan = episode.get("plan") or {}
    source = plan.get("source")
    if source == "memory":
        said = f"memory ({plan.get('reference')}, first planned by {plan.get('origin')})"
    elif source == "runbook":
        said = f"runbook {plan.get('reference')}"
    elif source == "llm":
        said = f"LLM {plan.get('reference')}"
    elif source == "generic":
        said = f"generic {plan.get('reference')}"
    else:
        said = "no plan"
    llm = incident.get("llm")
    brain = f"LLM {llm.get('model') or ''} ({llm.get('calls', 0)} call(s))" if llm else "offline planner (memory and runbooks)"
    return f"sources: {said}; planner: {brain}"


def incident_html(incident: Mapping[str, Any], *, timeline: Sequence[Mapping[str, Any]] = ()) -> str:
    """One incident: what failed, what sentinel.heal thought and ran, why the guard allowed it, whether it worked."""
    status = str(incident.get("status"))
    host, service = str(incident.get("host")), str(incident.get("service"))
    log = list(incident.get("attempt_log") or [])
    parts = [f"<h2 class='status {esc(status)}' data-status='{esc(status)}'>{esc(host)} {esc(service)}: {esc(status)}</h2>",
             f"<p class='failure'>{esc(incident.get('failure_class', ''))}: {esc(incident.get('summary', ''))}</p>"]
    if incident.get("relapsed_from") is not None:
        parts.append(f"<p class='relapse'>a relapse: it failed again within the relapse window after the heal of episode "
                     f"{esc(incident['relapsed_from'])}</p>")
    if incident.get("depends_on"):
        chain = ", ".join(f"{dependency['service']} ({dependency['status']})" for dependency in incident["depends_on"])
        parts.append(f"<p class='depends-on'>needs {esc(chain)}, failing too and healed first</p>")
    if status in NEEDS_A_HUMAN:
        words = own_words(incident)
        parts.append("<div class='cause'>what " + esc(service) + " says: <ul>" + "".join(f"<li class='own-words'>{esc(line)}</li>" for line in words)
                     + "</ul></div>")
        if incident.get("reason"):
            parts.append(f"<p class='reason'>{esc(incident['reason'])}</p>")
        what = next_step(incident)
        if what:
            parts.append(f"<p class='next'>next: {esc(what)}</p>")
    elif incident.get("reason") and (status != "healed" or incident.get("relapsed_from") is not None):
        parts.append(f"<p class='reason'>{esc(incident['reason'])}</p>")
        if incident.get("limit"):  # a limit that ends by itself (a silence, the blast radius) still says how to lift it
            parts.append(f"<p class='next'>next: {esc(next_step(incident))}</p>")
    for episode in log:
        episode_id = f", episode {episode['id']}" if episode.get("id") is not None else ""
        parts.append(f"<h3>attempt {esc(episode.get('attempt'))}{esc(episode_id)}: {esc(episode.get('outcome'))} "
                     f"<span class='muted'>{esc(utc(episode.get('started_at')))}</span></h3>"
                     f"<p>diagnosis: {esc(episode.get('diagnosis', ''))}</p><p>{esc(_sources(incident, episode))}</p>"
                     f"{_evidence_html(episode)}{_plan_html(episode)}{_steps_html(episode)}"
                     f"<p>{_artifact_links((episode.get('results') or {}).get('artifacts') or [])}</p>")
    if not log and incident.get("path"):
        parts.append(f"<p>path: {esc(' > '.join(incident['path']))}</p>")
    events = [event for event in timeline if event.get("service") == service]
    if events:
        rows = "".join(f"<tr><td>{esc(utc(event['at']))}</td><td>{esc(event['node'])}</td><td>{esc(event['message'])}</td></tr>" for event in events)
        parts.append(f"<details><summary>timeline</summary><table>{rows}</table></details>")
    return f"<section class='incident {esc(status)}' data-host='{esc(host)}' data-service='{esc(service)}'>{''.join(parts)}</section>"


def _interrupted_html(host: str, entry: Mapping[str, Any]) -> str:
    """A remediation of an earlier job that died mid-run, as this run found it (heal's ``interrupted``)."""
    started = "; ".join(entry.get("started") or []) or "no step had started"
    what = next_step({"status": "interrupted", "host": host, "service": entry.get("service")})
    return (f"<section class='incident interrupted' data-host='{esc(host)}' data-service='{esc(entry.get('service'))}'>"
            f"<h2 class='status interrupted' data-status='interrupted'>{esc(host)} {esc(entry.get('service'))}: interrupted</h2>"
            f"<p class='reason'>{esc(entry.get('summary', ''))} (episode {esc(entry.get('episode'))}; started: {esc(started)})</p>"
            f"<p class='next'>next: {esc(what)}</p><p>{_artifact_links([str(entry.get('run_dir') or '')])}</p></section>")


def fleet_overview(rows: Sequence[tuple[str, str, Counter[str], float]]) -> str:
    """Hosts x outcome: per host its worst status, how many incidents ended in each outcome, and how long they took."""
    outcomes = [status for status in ATTENTION_ORDER if any(counts[status] for _host, _worst, counts, _took in rows)]
    head = "".join(f"<th>{esc(status.replace('_', ' '))}</th>" for status in outcomes)
    body = "".join(
        f"<tr class='{esc(worst)}' data-host='{esc(host)}'><td><a href='#{esc(host)}'>{esc(host)}</a></td><td>{status_badge(worst)}</td>"
        + "".join(f"<td>{counts[status] or ''}</td>" for status in outcomes) + f"<td>{took:.1f} s</td></tr>"
        for host, worst, counts, took in rows
    )
    totals = Counter[str]()
    for _host, _worst, counts, _took in rows:
        totals.update(counts)
    summary = ", ".join(f"{totals[status]} {status.replace('_', ' ')}" for status in outcomes)
    return (f"<h2>fleet</h2><p class='totals'>{len(rows)} host(s): {esc(summary) or 'nothing to report'}</p>"
            f"<table class='fleet'><tr><th>host</th><th>needs</th>{head}<th>time</th></tr>{body}</table>")


def fleet_incidents_html(hosts: Mapping[str, Mapping[str, Any]]) -> str:
    """The fleet incidents of the run, each once, before the hosts it spans: many hosts failing alike are one cause to
    look for, and what their evidence has in common is where to start; and those the run closed."""
    found: dict[int, Mapping[str, Any]] = {}
    closed: dict[int, Mapping[str, Any]] = {}
    for result in hosts.values():
        for incident in result.get("incidents") or []:
            if incident.get("fleet_incident"):
                found.setdefault(int(incident["fleet_incident"]["id"]), incident["fleet_incident"])
        for fleet in result.get("fleet_incidents_closed") or []:
            closed[int(fleet["id"])] = fleet
    parts = []
    for number, fleet in sorted(found.items()):
        hosts_of = ", ".join(str(host) for host in fleet.get("hosts") or [])
        common = "".join(f"<li>{esc(said)}</li>" for said in fleet.get("common") or []) or "<li>nothing their evidence shows</li>"
        parts.append(f"<section class='fleet-incident' data-fleet-incident='{number}'><h2 class='status escalated'>fleet incident {number}: "
                     f"{esc(fleet.get('service'))} fails the same way on {len(fleet.get('hosts') or [])} hosts</h2>"
                     f"<p class='reason'>{esc(fleet.get('summary'))}</p><p>hosts: {esc(hosts_of)}</p><p>in common:</p><ul>{common}</ul>"
                     "<p class='next'>next: look for the cause the hosts share (above); no new plan runs on them while it is open, "
                     "and it closes once each host is seen without the failure</p></section>")
    parts += [f"<p class='fleet-incident-closed' data-fleet-incident='{number}'>fleet incident {number} ({esc(fleet.get('service'))} on "
              f"{len(fleet.get('hosts') or [])} hosts) closed: each of its hosts was seen without its failure</p>"
              for number, fleet in sorted(closed.items())]
    return "".join(parts)


def run_report_html(hosts: Mapping[str, Mapping[str, Any]], *, title: str) -> str:
    """The report of one run from what M(sentinel.heal.heal) returned per host (loop.results.host_result)."""
    rows = []
    sections = []
    for host, result in hosts.items():
        incidents = list(result.get("incidents") or [])
        counts = Counter(str(incident["status"]) for incident in incidents)
        counts["interrupted"] += len(result.get("interrupted") or [])
        counts = +counts or Counter({"healthy": 1})  # unary + drops the outcomes counted zero times
        worst = min(counts, key=attention_rank)
        rows.append((host, worst, counts, sum(_duration(incident) for incident in incidents)))
    rows.sort(key=lambda row: (attention_rank(row[1]), row[0]))
    for host, _worst, _counts, _took in rows:
        result = hosts[host]
        incidents = sorted(result.get("incidents") or [], key=lambda incident: attention_rank(str(incident["status"])))
        body = "".join(_interrupted_html(host, entry) for entry in result.get("interrupted") or [])
        body += "".join(incident_html({"host": host, **incident}, timeline=result.get("timeline") or []) for incident in incidents)
        sections.append(f"<div id='{esc(host)}'>{body}</div>" if body else "")
    body = fleet_overview(rows) + fleet_incidents_html(hosts) + ("".join(sections) or "<p>every declared service was healthy</p>")
    return page(title, body)
