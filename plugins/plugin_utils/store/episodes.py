"""Episodes, as the memory writes and reads them: the row of one attempt, what its JSON columns hold, and what a
later incident reads of the heals and failures before it. The store's own (memory.py writes and reads them in its
transactions); the fleet's tables (fleet/leases.py's reaping) write an episode through :func:`insert_episode` too."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Plan, host_family
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database

OUTCOMES = frozenset({"healed", "failed", "blocked", "escalated", "awaiting_approval", "denied", "unreachable", "suspended", "deferred",
                      "interrupted", "in_progress_elsewhere", "halted", "fleet", "flapping", "silenced"})
PLAN_STATUSES = frozenset({"pending", "running", "executed", "denied"})
# outcomes of an attempt that a limit (the kill switch, the blast radius, the run's rollout, flapping, a silence) stopped
# before it started
HELD_OUTCOMES = frozenset({"suspended", "deferred", "in_progress_elsewhere", "halted", "fleet", "flapping", "silenced"})
# the episodes' columns that hold JSON
JSON_COLUMNS = ("evidence_json", "plan_json", "verdicts_json", "results_json")


@dataclass(frozen=True)
class RememberedFix:
    episode_id: int
    plan: Plan
    # what the failure it healed looked like: service_check's evidence and the evidence commands' results (command -> dict)
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    results: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Heal:
    """An episode that healed a service on a host, as a relapse reads it: when, by what, what had failed then (its
    evidence, for the cause it had), and its own place in a chain of relapses."""

    episode_id: int
    finished_at: float
    commands: tuple[str, ...]
    templates: tuple[str, ...]
    failed_with: str
    evidence: Mapping[str, Any]
    results: Mapping[str, Mapping[str, Any]]
    # the heal whose relapse this one healed, and when this one relapsed in turn
    relapsed_from: int | None = None
    relapsed_at: float | None = None


@dataclass(frozen=True)
class Unhealed:
    """An attempt for a fingerprint that did not heal it: a plan that ran and failed (its step templates), or an
    escalation (no templates), with the evidence of the failure it was made for."""

    outcome: str
    templates: tuple[str, ...]
    episode_id: int
    finished_at: float
    evidence: Mapping[str, Any]
    results: Mapping[str, Mapping[str, Any]]


def episode_record(incident_id: str, failure: Failure, attempt: Attempt, run_id: str, relapsed_from: int | None = None) -> dict[str, Any]:
    """One attempt as an episode, its JSON columns decoded (the form :func:`decoded_episode` reads back from the memory):
    what the memory writes, and what a run's report and audit trail read before the memory has it. ``relapsed_from``:
    the heal whose service failed again, when the incident is its relapse."""
    plan = attempt.plan
    results = {
        "evidence": {command: result.to_dict() for command, result in attempt.evidence_results.items()},
        "reads": [round_.to_dict() for round_ in attempt.rounds],
        "steps": [result.to_dict() for result in attempt.results],
        "verification": dict(attempt.verification),
        "artifacts": list(attempt.artifacts),
        **({"fleet_incident": dict(attempt.fleet_incident)} if attempt.fleet_incident else {}),
        **({"limit": attempt.held_by.to_dict()} if attempt.held_by else {}),
    }
    os_family, service_manager = host_family(failure.facts)
    return {
        "incident_id": incident_id, "attempt": attempt.number, "host": failure.host, "service": failure.service,
        "fingerprint": failure.fingerprint, "failure_class": failure.failure_class, "error_text": failure.summary,
        "evidence": dict(failure.evidence), "diagnosis": attempt.diagnosis,
        "plan_source": plan.source.value if plan else None, "plan_reference": plan.reference if plan else None,
        "plan": plan.to_dict() if plan else None, "verdicts": [v.to_dict() for v in attempt.verdicts],
        "policy_version": attempt.policy_version, "results": results, "outcome": attempt.outcome,
        "verified": int(attempt.verified), "started_at": attempt.started_at, "finished_at": attempt.finished_at,
        "approved_by": attempt.approved_by, "os_family": os_family, "service_manager": service_manager,
        "normalized_error": failure.normalized_error, "run_id": run_id, "relapsed_from": relapsed_from,
    }


def decoded_episode(row: Mapping[str, Any]) -> dict[str, Any]:
    """An episode as the memory holds it, its JSON columns decoded (``plan_json`` read into ``plan``, ...)."""
    episode = {key: value for key, value in row.items() if key not in JSON_COLUMNS}
    for column in JSON_COLUMNS:
        episode[column.removesuffix("_json")] = json.loads(row[column]) if row[column] else None
    return episode


def episode_row(incident_id: str, failure: Failure, attempt: Attempt, run_id: str, relapsed_from: int | None = None) -> dict[str, Any]:
    row = episode_record(incident_id, failure, attempt, run_id, relapsed_from)
    for column in JSON_COLUMNS:
        value = row.pop(column.removesuffix("_json"))
        row[column] = None if value is None else json_text(value)
    return row


def insert_episode(db: Database, row: dict[str, Any]) -> int:
    """Inside a write transaction: the episode (an :func:`episode_row`), and, when it is the relapse of a heal, that
    this heal relapsed; its id."""
    columns = ", ".join(row)
    cursor = db.execute(f"INSERT INTO episodes ({columns}) VALUES ({', '.join('?' for _column in row)}) RETURNING id", tuple(row.values()))
    episode_id = int(cursor.fetchone()[0])
    if row.get("relapsed_from") is not None:
        db.execute("UPDATE episodes SET relapsed_at = ? WHERE id = ? AND relapsed_at IS NULL", (row["started_at"], row["relapsed_from"]))
    return episode_id


def plan_executed(db: Database, plan_id: str, episode_id: int) -> int:
    """Inside a write transaction: the approved plan that ran (claimed: running) was carried out by the episode; how
    many plans that marks (1, or 0 when it was not claimed)."""
    return db.execute("UPDATE plans SET status = 'executed', executed_episode_id = ? WHERE plan_id = ? AND status = 'running'",
                      (episode_id, plan_id)).rowcount


def templates_of(plan_json: str | None) -> tuple[str, ...]:
    return tuple(step["template"] for step in json_of(plan_json).get("steps") or ())


HEAL_COLUMNS = "id, finished_at, plan_json, error_text, evidence_json, results_json, relapsed_from, relapsed_at"


def heal_of(row: Any) -> Heal | None:
    if row is None:
        return None
    steps = json_of(row["plan_json"]).get("steps") or ()
    return Heal(episode_id=int(row["id"]), finished_at=float(row["finished_at"]), commands=tuple(shlex.join(step["argv"]) for step in steps),
                templates=templates_of(row["plan_json"]),
                failed_with=row["error_text"], evidence=json_of(row["evidence_json"]),
                results=json_of(row["results_json"]).get("evidence") or {},
                relapsed_from=None if row["relapsed_from"] is None else int(row["relapsed_from"]),
                relapsed_at=None if row["relapsed_at"] is None else float(row["relapsed_at"]))


def json_of(column: str | None) -> dict[str, Any]:
    return json.loads(column) if column else {}


def json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
