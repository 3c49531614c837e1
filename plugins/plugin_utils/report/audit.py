"""The audit trail: JSON Lines, one record per decision and action of every episode, with stable fields a SIEM indexes.

Every record has the same top-level fields (docs/audit-schema.json is their schema, docs/docsite/rst/reports.rst explains them):
``schema``, ``kind``, ``at`` (UTC ISO 8601), ``episode_id``, ``incident_id``, ``run_id``, ``attempt``, ``host``,
``service``, ``fingerprint``, ``plan_hash``, ``policy_version``, ``approver``, ``artifact_dirs``, and ``detail``, whose
keys depend on ``kind``. The same records come from the memory (sentinel.heal.memory_export format=audit)
and, live, from the timeline callback (audit_file): both read an episode in the form the memory holds it."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import binding_hash
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Plan

SCHEMA_VERSION = 1
KINDS = ("incident_opened", "evidence", "plan", "verdict", "approval", "step_executed", "verification", "outcome")
# a message to a notify destination: the heal task's, not an episode's (its episode_id is null)
NOTIFICATION_KIND = "notification"
# a request to the approval page (eda/approval_page.py), taken or refused: the page's, not an episode's
APPROVAL_REQUEST_KIND = "approval_request"
# characters of a command's output an audit record carries (its end); the run's artifacts keep the rest
OUTPUT_CAP = 2000


def iso_utc(at: float) -> str:
    """UTC ISO 8601 with milliseconds and a Z: 2026-11-26T12:04:12.345Z."""
    seconds, millis = divmod(round(at * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_CAP else text[-OUTPUT_CAP:]


def plan_hash(episode: Mapping[str, Any]) -> str | None:
    """The hash binding the plan's steps to its host, service, fingerprint and policy version (what an approval is bound
    to: guard/approvals.binding_hash); None for an episode without a plan of steps."""
    stored = episode.get("plan")
    if not stored or not stored.get("steps"):
        return None
    return binding_hash(Plan.from_dict(stored), host=str(episode["host"]), service=str(episode["service"]),
                        fingerprint=str(episode["fingerprint"]), policy_version=str(episode.get("policy_version") or ""))


def audit_records(episode: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The records of one episode (the memory's decoded form: store.memory.decoded_episode or episode_record), in the
    order things happened."""
    results = episode.get("results") or {}
    started, finished = float(episode.get("started_at") or 0), float(episode.get("finished_at") or 0)
    base = {
        "schema": SCHEMA_VERSION, "episode_id": episode.get("id"), "incident_id": str(episode.get("incident_id") or ""),
        "run_id": str(episode.get("run_id") or ""), "attempt": int(episode.get("attempt") or 1), "host": str(episode["host"]),
        "service": str(episode["service"]), "fingerprint": str(episode.get("fingerprint") or ""), "plan_hash": plan_hash(episode),
        "policy_version": episode.get("policy_version") or None, "approver": episode.get("approved_by") or None,
        "artifact_dirs": [str(directory) for directory in results.get("artifacts") or []],
    }

    def record(kind: str, at: float, **detail: Any) -> dict[str, Any]:
        return {"kind": kind, "at": iso_utc(at), **base, "detail": detail}

    evidence = episode.get("evidence") or {}
    records = []
    if base["attempt"] == 1:
        # what changed since the service last worked, first: most outages follow a change
        changed = {"changes": evidence["changes"]} if evidence.get("changes") else {}
        records.append(record("incident_opened", started, failure_class=str(episode.get("failure_class") or ""),
                              summary=str(episode.get("error_text") or ""), **changed))
    records.append(record(
        "evidence", started, summary=str(episode.get("error_text") or ""), cause=(evidence.get("unit") or {}).get("cause"),
        commands=[{"command": command, "rc": answer.get("rc"), "output": _tail(str(answer.get("stdout", "")))}
                  for command, answer in (results.get("evidence") or {}).items()],
        diagnosis=str(episode.get("diagnosis") or ""),
    ))
    plan = episode.get("plan")
    if plan:
        records.append(record("plan", started, source=plan["source"], reference=plan["reference"], rationale=plan.get("rationale", ""),
                              steps=[list(step["argv"]) for step in plan.get("steps") or []], escalation=plan.get("escalation")))
    for verdict in episode.get("verdicts") or []:
        records.append(record("verdict", started, command=verdict["command"], argv=list(verdict["argv"]), decision=verdict["decision"],
                              rule=verdict.get("rule", ""), reason=verdict.get("reason", ""), become=bool(verdict.get("become"))))
    outcome = str(episode.get("outcome") or "")
    if episode.get("approved_by") or outcome in ("awaiting_approval", "denied"):
        decision = "approved" if episode.get("approved_by") else ("pending" if outcome == "awaiting_approval" else "denied")
        records.append(record("approval", started, decision=decision, by=episode.get("approved_by") or None))
    at = started
    for step in results.get("steps") or []:
        at += float(step.get("duration_s") or 0)
        records.append(record("step_executed", min(at, finished) if finished else at, argv=list(step["argv"]),
                              command=shlex.join(step["argv"]), status=step.get("status"), rc=step.get("rc"),
                              duration_s=float(step.get("duration_s") or 0),
                              stdout=_tail(str(step.get("stdout", ""))), stderr=_tail(str(step.get("stderr", "")))))
    verification = results.get("verification") or {}
    if verification:
        records.append(record("verification", finished, healthy=bool(verification.get("healthy")), summary=str(verification.get("summary", ""))))
    fleet = {"fleet_incident": results["fleet_incident"]} if results.get("fleet_incident") else {}
    held = results.get("limit")
    # the limit that held the attempt back: which, until when (UTC, as every time here), the command that lifts it
    limit = {"limit": {"name": held["limit"], "said": held["said"], "until": iso_utc(held["until"]) if held.get("until") is not None else None,
                       "ends": held.get("ends") or "", "lift": held["lift"]}} if held else {}
    # a relapse's episodes name the heal it came back after; that heal, read from the memory later, says when it relapsed
    relapse = {key: value for key, value in (("relapsed_from", episode.get("relapsed_from")),
                                             ("relapsed_at", iso_utc(episode["relapsed_at"]) if episode.get("relapsed_at") is not None else None))
               if value is not None}
    records.append(record("outcome", finished, outcome=outcome, verified=bool(episode.get("verified")), **fleet, **limit, **relapse))
    return records


def to_lines(records: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for record in records)


def write_audit(episodes: Iterable[Mapping[str, Any]], dest: str | Path, also: Iterable[Mapping[str, Any]] = ()) -> int:
    """Write the records of the episodes, then ``also`` (the approval page's), to ``dest`` whole or not at all (a
    temporary file renamed over it); how many."""
    records = [*(record for episode in episodes for record in audit_records(episode)), *also]
    path = Path(dest)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8") as handle:
        handle.write(to_lines(records))
    os.replace(handle.name, path)
    return len(records)


def append_audit(episodes: Iterable[Mapping[str, Any]], dest: str | Path) -> int:
    """Append the records of the episodes to ``dest`` (what a log shipper tails), in one write so lines never interleave."""
    return append_records((record for episode in episodes for record in audit_records(episode)), dest)


def notification_records(host: str, notifications: Iterable[Mapping[str, Any]], at: float) -> list[dict[str, Any]]:
    """The records of what a heal task sent its notify destinations (its result's ``notifications``), delivered or not."""
    return [{"kind": NOTIFICATION_KIND, "at": iso_utc(at), "schema": SCHEMA_VERSION, "episode_id": None,
             "incident_id": str(sent.get("incident_id") or ""), "run_id": "", "attempt": 1, "host": host, "service": "",
             "fingerprint": "", "plan_hash": None, "policy_version": None, "approver": None, "artifact_dirs": [],
             "detail": {key: sent.get(key) for key in ("destination", "type", "event", "key", "delivered", "tries", "error", "skipped")}}
            for sent in notifications]


def approval_request_records(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The records of the approval page's requests (store/approval_requests.py ApprovalRequest.to_dict): each decision it
    took, each request it refused and why."""
    return [{"kind": APPROVAL_REQUEST_KIND, "at": iso_utc(float(request["at"])), "schema": SCHEMA_VERSION, "episode_id": None,
             "incident_id": "", "run_id": "", "attempt": 1, "host": str(request["host"]), "service": "", "fingerprint": "", "plan_hash": None,
             "policy_version": None, "approver": request["approver"] or None, "artifact_dirs": [],
             "detail": {key: request[key] for key in ("plan_id", "via", "decision", "outcome", "refusal", "reason", "claimed_by", "remote")}}
            for request in requests]


def append_records(records: Iterable[Mapping[str, Any]], dest: str | Path) -> int:
    """Append records to ``dest`` in one write, as :func:`append_audit` does an episode's."""
    text = to_lines(records)
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
    return text.count("\n")
