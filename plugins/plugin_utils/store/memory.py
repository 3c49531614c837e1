"""Episodic memory: one SQLite file on the controller, or one PostgreSQL database for a cluster of them.

Every attempt at healing an incident is an episode, written in one transaction. Only an attempt
whose recovery was verified counts as a fix that a later incident with the same fingerprint may
reuse; plans that failed for a fingerprint are remembered so they are not tried again. Plans that
wait for a human are stored beside the episodes. The logic is written once; what differs between the databases is in
their backends (store/sqlite.py, store/postgres.py, chosen in store/database.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet import alerts as alerts_throttle
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet import incidents
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.alerts import AlertVerdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident, FleetSettings, Sighting
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import (
    HeldLease,
    LeaseRefusal,
    LeaseRequest,
    Renewal,
    StepsStarted,
    lease_ended,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import Canary, CanaryKey, claim_canary, held_canary, settle_canary
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silence
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import (
    Attempt,
    Failure,
    PendingPlan,
    Plan,
    PlanSource,
    Step,
    StepResult,
    host_family,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.backends import open_database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.schema import statements
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.sqlite import MEMORY_FILE

__all__ = ["MEMORY_FILE", "MEMORY_OPTIONS", "Heal", "Memory", "decoded_episode", "episode_record", "memory_exists", "memory_secrets"]

BUSY_TIMEOUT_MS = 30_000

# The options of every action that opens the memory (heal, plan, diagnose, execute, memory), besides state_dir; their
# documentation is the sentinel.heal.controller.memory fragment.
MEMORY_OPTIONS: dict[str, Any] = dict(
    memory_url=dict(type="str", default=""),
    memory_password=dict(type="str", no_log=True),
)
# the role's variable for each option that names where the memory is
_SETTING = {"state_dir": "autoheal_state_dir", "memory_url": "autoheal_memory_url"}

# Episodes a prune forgets: finished before the time (the one parameter), and no plan refers to them.
_PRUNABLE = """episodes.finished_at < ? AND episodes.id NOT IN (SELECT episode_id FROM plans)
    AND episodes.id NOT IN (SELECT executed_episode_id FROM plans WHERE executed_episode_id IS NOT NULL)"""

OUTCOMES = frozenset({"healed", "failed", "blocked", "escalated", "awaiting_approval", "denied", "unreachable", "suspended", "deferred",
                      "interrupted", "in_progress_elsewhere", "halted", "fleet", "flapping", "silenced"})
PLAN_STATUSES = frozenset({"pending", "running", "executed", "denied"})
# outcomes of an attempt that a limit (the kill switch, the blast radius, the run's rollout, flapping, a silence) stopped
# before it started
HELD_OUTCOMES = frozenset({"suspended", "deferred", "in_progress_elsewhere", "halted", "fleet", "flapping", "silenced"})
# the episodes' columns that hold JSON
JSON_COLUMNS = ("evidence_json", "plan_json", "verdicts_json", "results_json")


@dataclass(frozen=True)
class Suspension:
    """The kill switch, thrown: who suspended autonomous remediation, when and why (and who resumed it, once resumed)."""

    suspended_at: float
    suspended_by: str
    reason: str
    resumed_at: float | None = None
    resumed_by: str | None = None

    def describe(self) -> str:
        return f"suspended by {self.suspended_by} at {moment(self.suspended_at)}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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


class Memory:
    """The episode store. Open one per process; every write is its own short transaction."""

    def __init__(self, state_dir: str | Path, *, url: str | None = None, password: str | None = None, read_only: bool = False,
                 busy_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
        """Open (and create or migrate) the memory: the SQLite file in ``state_dir``, or the PostgreSQL server of ``url``
        (``password``: its password, when neither the URL nor libpq's PGPASSWORD or ~/.pgpass gives it). ``read_only``
        (check mode) changes nothing at all and needs an existing memory of the current schema. A write waits up to
        ``busy_timeout_s`` for another writer."""
        self._db = open_database(state_dir, url=url, password=password, read_only=read_only, busy_timeout_s=busy_timeout_s)
        self.where = self._db.where
        self.path = self._db.path  # the SQLite file; None on PostgreSQL
        self.busy_timeout_s = busy_timeout_s
        try:
            if read_only:
                if self.schema_version != len(self._db.migrations):
                    raise MemoryStoreError("the memory is of another schema and check mode does not migrate it", field=self._db.field,
                                           value=self.where, hint="run once without --check")
                return
            with self._db.setting_up():
                self._migrate()
        except self._db.errors as exc:
            self._db.close()
            raise MemoryStoreError(f"cannot open the memory database ({self._db.redact(exc)})", field=self._db.field, value=self.where,
                                   hint=self._db.explain(exc)) from exc
        except MemoryStoreError:
            self._db.close()
            raise

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, read_only: bool = False) -> Memory:
        """The memory a task's options name: ``state_dir``, ``memory_url`` and ``memory_password`` (MEMORY_OPTIONS)."""
        return cls(options["state_dir"], url=options.get("memory_url") or None, password=options.get("memory_password") or None,
                   read_only=read_only)

    @classmethod
    def for_check_mode(cls, state_dir: str | Path, *, url: str | None = None, password: str | None = None) -> Memory | None:
        """The memory to read in check mode, if there is a usable one; check mode never creates or migrates it."""
        if not memory_exists(state_dir, url):
            return None
        try:
            return cls(state_dir, url=url, password=password, read_only=True)
        except MemoryStoreError:
            return None

    @property
    def _conn(self) -> Any:
        """The database driver's own connection (sqlite3 or psycopg): for tests and benchmarks, never for the logic."""
        return self._db.raw

    @property
    def backend(self) -> str:
        """Which database holds the memory: sqlite or postgresql."""
        return self._db.name

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self._db.schema_version()

    def _migrate(self) -> None:
        migrations = self._db.migrations
        current = self.schema_version
        if current > len(migrations):
            raise MemoryStoreError(
                f"the memory was written by a newer sentinel.heal (schema {current}, this one knows {len(migrations)})",
                field=self._db.field, value=self.where,
                hint=f"upgrade the collection or point {_SETTING[self._db.field]} elsewhere",
            )
        for version in range(current + 1, len(migrations) + 1):
            with self._transaction() as db:
                # Re-read inside the write lock: a concurrent process may have migrated meanwhile.
                if db.schema_version() >= version:
                    continue
                for statement in statements(migrations[version - 1]):
                    db.execute(statement)
                db.set_schema_version(version)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def record_attempt(
        self, *, incident_id: str, failure: Failure, attempt: Attempt, pending: PendingPlan | None = None,
        executed_plan_id: str | None = None, run_id: str = "", canary: CanaryKey | None = None, relapsed_from: int | None = None,
    ) -> tuple[int, str | None]:
        """Write one episode of the run ``run_id`` atomically, with the plan it leaves waiting for a human (``pending``),
        the approved plan it carried out (``executed_plan_id``, which must be claimed), when the attempt was the
        ``canary`` of its plan, what the hosts waiting for it learn, and, when the incident is the relapse of the heal
        ``relapsed_from``, that this heal relapsed."""
        if attempt.outcome not in OUTCOMES:
            raise MemoryStoreError("unknown episode outcome", field="outcome", value=attempt.outcome, hint=f"one of {sorted(OUTCOMES)}")
        plan = attempt.plan
        with self._transaction() as db:
            episode_id = _insert_episode(db, _episode_row(incident_id, failure, attempt, run_id, relapsed_from))
            if relapsed_from is not None:
                db.execute("UPDATE episodes SET relapsed_at = ? WHERE id = ? AND relapsed_at IS NULL", (attempt.started_at, relapsed_from))
            if canary is not None:
                settle_canary(db, canary, host=failure.host, outcome=attempt.outcome, episode_id=episode_id)
            plan_id = None
            if pending is not None and plan is not None:
                plan_id = uuid.uuid4().hex
                db.execute(
                    """INSERT INTO plans (plan_id, episode_id, incident_id, host, service, fingerprint, plan_json, verdicts_json,
                           policy_version, policy_file, plan_hash, failure_json, created_at, expires_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (plan_id, episode_id, incident_id, failure.host, failure.service, failure.fingerprint, _json(plan.to_dict()),
                     _json([v.to_dict() for v in attempt.verdicts]), attempt.policy_version, pending.policy_file,
                     pending.plan_hash, _json(failure.to_dict()), pending.created_at, pending.expires_at),
                )
            if executed_plan_id is not None:
                held = attempt.outcome in HELD_OUTCOMES and all(result.status == "skipped" for result in attempt.results)
                # a limit held the approved plan back before any step ran: it waits again, to be approved once more
                updated = db.execute(
                    "UPDATE plans SET status = 'pending', decided_by = NULL, decided_at = NULL WHERE plan_id = ? AND status = 'running'"
                    if held else
                    "UPDATE plans SET status = 'executed', executed_episode_id = ? WHERE plan_id = ? AND status = 'running'",
                    (executed_plan_id,) if held else (episode_id, executed_plan_id),
                ).rowcount
                if updated != 1:
                    raise MemoryStoreError("the approved plan was not claimed for this run", field="plan_id", value=executed_plan_id)
        return episode_id, plan_id

    def verified_fix(self, fingerprint: str) -> RememberedFix | None:
        """The most recent plan that healed this fingerprint and was verified, unless it relapsed: a plan whose service
        failed again within the relapse window after one of its recent heals is no longer trusted to replay."""
        rows = self._db.execute(
            """SELECT id, plan_json, evidence_json, results_json, relapsed_at FROM episodes
               WHERE fingerprint = ? AND outcome = 'healed' AND verified = 1 AND plan_json IS NOT NULL
               ORDER BY finished_at DESC, id DESC LIMIT ?""",
            (fingerprint, _TRUST_LOOKBACK),
        ).fetchall()
        relapsed = {_templates(row["plan_json"]) for row in rows if row["relapsed_at"] is not None}
        row = next((row for row in rows if _templates(row["plan_json"]) not in relapsed), None)
        if row is None:
            return None
        stored = json.loads(row["plan_json"])
        origin = stored.get("origin") or f"{stored['source']} {stored['reference']}"
        plan = Plan(
            source=PlanSource.MEMORY,
            reference=f"episode {row['id']}",
            rationale=f"verified fix from episode {row['id']} (originally from {origin})",
            steps=tuple(Step.from_dict(step) for step in stored["steps"]),
            origin=origin,
        )
        return RememberedFix(episode_id=int(row["id"]), plan=plan, evidence=_json_of(row["evidence_json"]),
                             results=_json_of(row["results_json"]).get("evidence") or {})

    def last_heal(self, host: str, service: str, *, since: float) -> Heal | None:
        """The latest heal of the service on the host that finished at ``since`` or later: what a failure now relapsed from."""
        row = self._db.execute(
            f"""SELECT {_HEAL_COLUMNS} FROM episodes WHERE host = ? AND service = ? AND outcome = 'healed' AND finished_at >= ?
                ORDER BY finished_at DESC, id DESC LIMIT 1""",
            (host, service, since),
        ).fetchone()
        return _heal(row)

    def incident_relapse(self, incident_id: str) -> tuple[int, float] | None:
        """The heal an incident relapsed from and when its first run saw the failure, as its episodes recorded them."""
        row = self._db.execute(
            "SELECT relapsed_from, started_at FROM episodes WHERE incident_id = ? AND relapsed_from IS NOT NULL ORDER BY id LIMIT 1",
            (incident_id,),
        ).fetchone()
        return None if row is None else (int(row["relapsed_from"]), float(row["started_at"]))

    def heal(self, episode_id: int) -> Heal | None:
        """The heal of episode ``episode_id`` (None when that episode healed nothing)."""
        return _heal(self._db.execute(f"SELECT {_HEAL_COLUMNS} FROM episodes WHERE id = ? AND outcome = 'healed'", (episode_id,)).fetchone())

    def unhealed(self, fingerprint: str, since: float) -> list[Unhealed]:
        """The plans that ran for this fingerprint since ``since`` and did not heal it, and its escalations, newest first."""
        rows = self._db.execute(
            """SELECT id, outcome, finished_at, plan_json, evidence_json, results_json FROM episodes
               WHERE fingerprint = ? AND outcome IN ('failed', 'escalated') AND finished_at >= ? ORDER BY finished_at DESC, id DESC""",
            (fingerprint, since),
        )
        return [Unhealed(outcome=row["outcome"], templates=tuple(step["template"] for step in _json_of(row["plan_json"]).get("steps") or ()),
                         episode_id=int(row["id"]), finished_at=float(row["finished_at"]), evidence=_json_of(row["evidence_json"]),
                         results=_json_of(row["results_json"]).get("evidence") or {}) for row in rows]

    def similar_fixes(self, failure: Failure, *, limit: int = 4) -> list[dict[str, Any]]:
        """Verified fixes of other fingerprints of the same service whose error reads most alike (full-text search: FTS5
        with bm25 on SQLite, a tsvector ranked by ts_rank on PostgreSQL)."""
        words = _distinctive_words(failure.normalized_error)
        if not words:
            return []
        search = self._db.text_search(words, service=failure.service)
        rows = self._db.execute(
            f"""SELECT episodes.id, episodes.error_text, episodes.plan_json FROM {search.source}
                WHERE {search.condition} AND episodes.outcome = 'healed' AND episodes.verified = 1 AND episodes.relapsed_at IS NULL
                AND episodes.fingerprint != ?
                ORDER BY {search.order} LIMIT ?""",
            (*search.params, failure.fingerprint, limit),
        )
        return [{"episode": row["id"], "error": row["error_text"],
                 "steps": [" ".join(step["argv"]) for step in json.loads(row["plan_json"])["steps"]]} for row in rows]

    def episodes(self, *, limit: int = 50, host: str | None = None, service: str | None = None, outcome: str | None = None,
                 fingerprint: str | None = None) -> list[dict[str, Any]]:
        filters = {"host": host, "service": service, "outcome": outcome, "fingerprint": fingerprint}
        clauses = [f"{column} = ?" for column, value in filters.items() if value is not None]
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(f"SELECT * FROM episodes{where} ORDER BY id DESC LIMIT ?",
                                (*[v for v in filters.values() if v is not None], limit))
        return [dict(row) for row in rows]

    def episodes_between(self, since: float, until: float) -> list[dict[str, Any]]:
        """Every episode that started in [since, until), oldest first, decoded (:func:`decoded_episode`): what a report
        or an audit export of a window reads, with the ``plan_id`` of the plan an episode left waiting for a person (None)."""
        rows = self._db.execute(
            """SELECT episodes.*, plans.plan_id AS plan_id FROM episodes LEFT JOIN plans ON plans.episode_id = episodes.id
               WHERE episodes.started_at >= ? AND episodes.started_at < ? ORDER BY episodes.started_at, episodes.id""",
            (since, until),
        )
        return [decoded_episode(dict(row)) for row in rows]

    def episode(self, episode_id: int) -> dict[str, Any] | None:
        row = self._db.execute("SELECT * FROM episodes WHERE id = ?", (episode_id,)).fetchone()
        return dict(row) if row else None

    def search(self, text: str, *, limit: int = 20) -> list[dict[str, Any]]:
        """Episodes whose error reads like the text, best first (full-text search over the abstracted errors)."""
        words = _distinctive_words(text.lower())
        if not words:
            return []
        search = self._db.text_search(words)
        rows = self._db.execute(f"SELECT episodes.* FROM {search.source} WHERE {search.condition} ORDER BY {search.order} LIMIT ?",
                                (*search.params, limit))
        return [dict(row) for row in rows]

    def prune(self, *, before: float, dry_run: bool = False) -> int:
        """Forget episodes that finished before the time, except those a plan still refers to; with
        ``dry_run`` only count them."""
        if dry_run:
            return int(self._db.execute(f"SELECT count(*) FROM episodes WHERE {_PRUNABLE}", (before,)).fetchone()[0])
        with self._transaction() as db:
            # what hosts saw fail, and the fleet incidents closed, before that time go with the episodes
            db.execute("DELETE FROM sightings WHERE seen_at < ?", (before,))
            db.execute("DELETE FROM alerts WHERE at < ?", (before,))
            db.execute("DELETE FROM alert_fleets WHERE until < ?", (before,))
            closed = "SELECT id FROM fleet_incidents WHERE closed_at < ?"
            db.execute(f"DELETE FROM fleet_incident_hosts WHERE incident_id IN ({closed})", (before,))
            db.execute("DELETE FROM fleet_incidents WHERE closed_at < ?", (before,))
            return db.execute(f"DELETE FROM episodes WHERE {_PRUNABLE}", (before,)).rowcount

    def artifacts_kept_by_prune(self, *, before: float) -> set[str]:
        """The ansible-runner run directories of the episodes a prune at that time keeps."""
        rows = self._db.execute(
            f"SELECT DISTINCT value FROM episodes, {self._db.json_items('episodes.results_json', 'artifacts')} WHERE NOT ({_PRUNABLE})",
            (before,),
        )
        return {str(row[0]) for row in rows}

    def forget(self, fingerprint: str, *, dry_run: bool = False) -> int:
        """Forget every episode (and stored plan) of one failure fingerprint; with ``dry_run`` only count the episodes."""
        if dry_run:
            return int(self._db.execute("SELECT count(*) FROM episodes WHERE fingerprint = ?", (fingerprint,)).fetchone()[0])
        with self._transaction() as db:
            db.execute("DELETE FROM plans WHERE fingerprint = ?", (fingerprint,))
            return db.execute("DELETE FROM episodes WHERE fingerprint = ?", (fingerprint,)).rowcount

    def plan(self, plan_id: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT plans.*, episodes.attempt AS attempt FROM plans JOIN episodes ON episodes.id = plans.episode_id WHERE plan_id = ?",
            (plan_id,),
        ).fetchone()
        return dict(row) if row else None

    def plans(self, *, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query = "SELECT * FROM plans" + (" WHERE status = ?" if status else "") + " ORDER BY created_at DESC LIMIT ?"
        rows = self._db.execute(query, (status, limit) if status else (limit,))
        return [dict(row) for row in rows]

    def claim_plan(self, plan_id: str, *, by: str, at: float) -> bool:
        """pending -> running, atomically: of two approvals racing for one plan, only one runs it."""
        with self._transaction() as db:
            return db.execute(
                "UPDATE plans SET status = 'running', decided_by = ?, decided_at = ? WHERE plan_id = ? AND status = 'pending'",
                (by, at, plan_id),
            ).rowcount == 1

    def deny_plan(self, plan_id: str, *, by: str, at: float, note: str) -> bool:
        with self._transaction() as db:
            return db.execute(
                "UPDATE plans SET status = 'denied', decided_by = ?, decided_at = ?, decision_note = ? WHERE plan_id = ? AND status = 'pending'",
                (by, at, note, plan_id),
            ).rowcount == 1

    def remediations(self, host: str, service: str, *, since: float, other_than: str = "") -> list[dict[str, Any]]:
        """The attempts that ran a remediation of the service on the host since then (and since a person last reset
        its flapping count), oldest first, but those of the incident ``other_than``: what the flapping limit counts. A
        limit's refusal ran nothing and is not one."""
        reset = self._db.execute("SELECT max(reset_at) FROM flapping_resets WHERE host = ? AND service = ?", (host, service)).fetchone()[0]
        rows = self._db.execute(
            """SELECT id, outcome, started_at FROM episodes WHERE host = ? AND service = ? AND started_at >= ?
               AND outcome IN ('healed', 'failed', 'interrupted') AND incident_id != ? ORDER BY started_at, id""",
            (host, service, max(since, reset or since), other_than),
        ).fetchall()
        return [dict(row) for row in rows]

    def reset_flapping(self, host: str, service: str, *, by: str, at: float) -> None:
        """A person says the service's past remediations no longer count against its flapping limit."""
        with self._transaction() as db:
            db.execute("INSERT INTO flapping_resets (host, service, reset_at, reset_by) VALUES (?, ?, ?, ?)", (host, service, at, by))

    def acquire_lease(self, request: LeaseRequest) -> HeldLease | LeaseRefusal:
        """A lease for one remediation, within the caps of the blast radius (0: no cap): the lease, or why it must wait.

        Taken in one write transaction, so forks and concurrent jobs never both take the last slot. Leases whose owner
        is gone or whose expiry passed are first turned into ``interrupted`` episodes, which frees their slots."""
        radius, at, host = request.radius, request.at, request.failure.host
        carried = _json({"episode": _episode_row(request.incident_id, request.failure, request.attempt, radius.run_id, request.relapsed_from),
                         "executed_plan_id": request.executed_plan_id})
        with self._transaction() as db:
            _reap(db, at=at, host=None, steps_started=request.steps_started)
            busy = db.execute("SELECT run_id FROM leases WHERE host = ? AND service = ?", (host, request.failure.service)).fetchone()
            if busy is not None:
                return LeaseRefusal(f"a remediation of {request.failure.service} on {host} by another run ({busy[0]}) is running",
                                    elsewhere=True)
            running = db.execute("SELECT count(*) FROM leases").fetchone()[0]
            if radius.max_running and running >= radius.max_running:
                # the lease that expires first frees its slot then at the latest
                expires = db.execute("SELECT min(expires_at) FROM leases").fetchone()[0]
                return LeaseRefusal(f"{running} remediations are running (the cap on remediations at the same time is {radius.max_running})",
                                    cap="max_running", until=float(expires))
            hosts = {row[0] for row in db.execute("SELECT host FROM run_hosts WHERE run_id = ?", (radius.run_id,))}
            if radius.max_hosts_per_run and host not in hosts and len(hosts) >= radius.max_hosts_per_run:
                return LeaseRefusal(f"this run already remediated {len(hosts)} hosts (the cap per run is {radius.max_hosts_per_run})",
                                    cap="max_hosts_per_run")
            spent = int(db.execute("SELECT coalesce(sum(attempts), 0) FROM run_hosts WHERE run_id = ?", (radius.run_id,)).fetchone()[0])
            if radius.max_attempts_per_run and spent >= radius.max_attempts_per_run:
                return LeaseRefusal(f"this run already made {spent} remediation attempts (its budget is {radius.max_attempts_per_run})",
                                    cap="max_attempts_per_run")
            db.execute("""INSERT INTO run_hosts (run_id, host, first_at, attempts) VALUES (?, ?, ?, 1)
                          ON CONFLICT (run_id, host) DO UPDATE SET attempts = run_hosts.attempts + 1""", (radius.run_id, host, at))
            lease = db.execute(
                """INSERT INTO leases (run_id, host, service, acquired_at, expires_at, renewed_at, incident_id, owner, episode_json)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                (radius.run_id, host, request.failure.service, at, at + request.ttl, at, request.incident_id, request.owner, carried),
            ).fetchone()[0]
        return HeldLease(int(lease), request.owner)

    def lease_run(self, lease: HeldLease, run_dir: str) -> None:
        """Where ansible-runner keeps the leased remediation's run: what an interruption reads to tell what had started."""
        with self._transaction() as db:
            db.execute("UPDATE leases SET run_dir = ? WHERE id = ? AND owner = ?", (run_dir, lease.id, lease.owner))

    def renew_lease(self, lease: HeldLease, at: float) -> Renewal:
        """The lease's heartbeat: its remediation still runs at ``at``. A renewal the memory cannot take now (another
        writer holds it past the busy timeout, or it is out of reach) is NOT_WRITTEN, for the heartbeat to try again; a
        lease no longer there (another job reaped it) is LOST."""
        try:
            with self._transaction() as db:
                renewed = db.execute("UPDATE leases SET renewed_at = ? WHERE id = ? AND owner = ?", (at, lease.id, lease.owner)).rowcount
        except MemoryStoreError:
            return Renewal.NOT_WRITTEN
        return Renewal.RENEWED if renewed else Renewal.LOST

    def release_lease(self, lease: HeldLease) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM leases WHERE id = ? AND owner = ?", (lease.id, lease.owner))

    def claim_canary(self, key: CanaryKey, *, host: str, owner: str, at: float) -> Canary:
        """The host that tries a new plan first in its run: this one, unless another host of the run has it."""
        with self._transaction() as db:
            return claim_canary(db, key, host=host, owner=owner, at=at)

    def canary(self, key: CanaryKey, *, host: str, owner: str, at: float) -> Canary:
        """How the plan's canary stands for ``host``: read without the write lock, and claimed for ``host`` only when it is
        free (a hundred forks waiting for it poll it)."""
        return held_canary(self._db, key, host=host) or self.claim_canary(key, host=host, owner=owner, at=at)

    def report_check(self, host: str, sightings: Sequence[Sighting], clear: Iterable[str], *, at: float) -> list[FleetIncident]:
        """What a failing host's check saw, for the other hosts of its run and later runs to count: the failures it saw
        (``sightings``), and the services it saw without the failure of their open fleet incidents (``clear``); the
        fleet incidents that closed with it."""
        with self._transaction() as db:
            incidents.record_sightings(db, sightings)
            return incidents.clear(db, host, clear, at=at)

    def run_hosts_sighted(self, run_id: str) -> int:
        """How many hosts of the run wrote what they saw fail."""
        return int(self._db.execute("SELECT count(DISTINCT host) FROM sightings WHERE run_id = ?", (run_id,)).fetchone()[0])

    def fleet_incident_of(self, sighting: Sighting, settings: FleetSettings, *, run_hosts: int) -> FleetIncident | None:
        """The fleet incident this host's failure is part of (opened now when it crosses the thresholds), or None."""
        with self._transaction() as db:
            return incidents.join_or_open(db, sighting, settings, run_hosts=run_hosts)

    def clear_fleet_incidents(self, host: str, services: Iterable[str], *, at: float) -> list[FleetIncident]:
        """``host`` was seen without the failure of ``services``' open fleet incidents (healed, or checked healthy); the
        incidents that closed with it. Nothing is written while no fleet incident is open."""
        if not incidents.any_open(self._db):
            return []
        with self._transaction() as db:
            return incidents.clear(db, host, services, at=at)

    def admit_alerts(self, alerts: Sequence[tuple[str, str]], *, at: float, min_hosts: int, window: float) -> list[AlertVerdict]:
        """Record the alerts (host, service) an event source accepted in one body; what becomes of each service's: a
        job per host, one fleet job, or nothing (a fleet job of the window covers them)."""
        with self._transaction() as db:
            return alerts_throttle.admit(db, alerts, at=at, min_hosts=min_hosts, window=window)

    def fleet_incidents(self, *, open_only: bool = False, limit: int = 50) -> list[FleetIncident]:
        return incidents.fleet_incidents(self._db, open_only=open_only, limit=limit)

    def failed_hosts(self, run_id: str) -> list[str]:
        """The hosts on which a remediation of the run failed verification: what its error threshold counts."""
        rows = self._db.execute("SELECT DISTINCT host FROM episodes WHERE run_id = ? AND outcome = 'failed' ORDER BY host", (run_id,))
        return [row[0] for row in rows]

    def reap_interrupted(self, *, at: float, steps_started: StepsStarted, host: str | None = None) -> list[dict[str, Any]]:
        """Turn the leases of remediations whose job died (or whose expiry passed) into ``interrupted`` episodes, with
        what each had started (``steps_started`` tells, from the run's directory); of one host, or of all. Each lease
        becomes its episode in the same transaction."""
        query = "SELECT owner, expires_at, renewed_at FROM leases" + (" WHERE host = ?" if host is not None else "")
        rows = self._db.execute(query, (host,) if host is not None else ()).fetchall()
        if all(_ended(row, at) is None for row in rows):
            return []
        with self._transaction() as db:
            return _reap(db, at=at, host=host, steps_started=steps_started)

    def silence(self, *, hosts: str, service: str, until: float, reason: str, by: str, at: float) -> Silence:
        """Hands off ``hosts`` (a name or pattern of hosts or groups) and ``service`` (``*``: all) until then."""
        with self._transaction() as db:
            silence_id = db.execute("""INSERT INTO silences (hosts, service, reason, set_by, set_at, until) VALUES (?, ?, ?, ?, ?, ?)
                                       RETURNING id""", (hosts, service, reason, by, at, until)).fetchone()[0]
        return Silence(id=int(silence_id), hosts=hosts, service=service, reason=reason, set_by=by, set_at=at, until=until)

    def unsilence(self, *, by: str, at: float, silence_id: int | None = None, hosts: str | None = None,
                  service: str | None = None, dry_run: bool = False) -> list[Silence]:
        """Lift the silences in force with that id, or for those hosts (and service); the ones lifted. With ``dry_run``,
        the ones it would lift, as they are."""
        lifted = [silence for silence in self.silences(at=at) if silence.id == silence_id or (
            silence_id is None and silence.hosts == hosts and (service is None or silence.service == service))]
        if dry_run:
            return lifted
        with self._transaction() as db:
            for silence in lifted:
                db.execute("UPDATE silences SET lifted_at = ?, lifted_by = ? WHERE id = ? AND lifted_at IS NULL", (at, by, silence.id))
        return [dataclasses.replace(silence, lifted_at=at, lifted_by=by) for silence in lifted]

    def silences(self, *, at: float) -> list[Silence]:
        """The silences in force at that time, the one that ends last first."""
        rows = self._db.execute("SELECT * FROM silences WHERE lifted_at IS NULL AND until > ? ORDER BY until DESC, id DESC", (at,))
        return [Silence(**dict(row)) for row in rows]

    def silence_over(self, host: str, groups: Iterable[str], service: str, *, at: float) -> Silence | None:
        """The silence in force over this service on this host (the one that ends last), or None."""
        groups = tuple(groups)
        return next((silence for silence in self.silences(at=at) if silence.covers(host, groups, service)), None)

    def suspension(self) -> Suspension | None:
        """The suspension in force (the kill switch), or None: read afresh on every call, so a running job sees it thrown."""
        return _suspension(self._db.execute(_SUSPENSION_IN_FORCE).fetchone())

    def suspended_because(self) -> str | None:
        """What the kill switch in force says (who, when, why), or None: what the heal loop polls."""
        suspension = self.suspension()
        return None if suspension is None else suspension.describe()

    def suspend(self, *, by: str, reason: str, at: float) -> tuple[Suspension, bool]:
        """Throw the kill switch; (the suspension in force, whether this call threw it). A second suspend keeps the first."""
        with self._transaction() as db:
            in_force = _suspension(db.execute(_SUSPENSION_IN_FORCE).fetchone())
            if in_force is not None:
                return in_force, False
            db.execute("INSERT INTO suspensions (suspended_at, suspended_by, reason) VALUES (?, ?, ?)", (at, by, reason))
        return Suspension(suspended_at=at, suspended_by=by, reason=reason), True

    def resume(self, *, by: str, at: float) -> Suspension | None:
        """Release the kill switch; the suspension it ends, or None when none was in force."""
        with self._transaction() as db:
            in_force = _suspension(db.execute(_SUSPENSION_IN_FORCE).fetchone())
            if in_force is None:
                return None
            db.execute("UPDATE suspensions SET resumed_at = ?, resumed_by = ? WHERE resumed_at IS NULL", (at, by))
        return dataclasses.replace(in_force, resumed_at=at, resumed_by=by)


def memory_exists(state_dir: str | Path, url: str | None = None) -> bool:
    """Whether there is a memory to open without creating one: the SQLite file exists (a server is always there)."""
    return bool(url) or (Path(state_dir).expanduser() / MEMORY_FILE).exists()


def memory_secrets(options: Mapping[str, Any]) -> list[str]:
    """The memory's password from a task's options (memory_password, or written in memory_url), to redact."""
    from ansible_collections.sentinel.heal.plugins.plugin_utils.store.postgres import url_password

    return [secret for secret in (options.get("memory_password"), url_password(options.get("memory_url") or "")) if secret]


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


def _episode_row(incident_id: str, failure: Failure, attempt: Attempt, run_id: str, relapsed_from: int | None = None) -> dict[str, Any]:
    row = episode_record(incident_id, failure, attempt, run_id, relapsed_from)
    for column in JSON_COLUMNS:
        value = row.pop(column.removesuffix("_json"))
        row[column] = None if value is None else _json(value)
    return row


def _insert_episode(db: Database, row: dict[str, Any]) -> int:
    columns = ", ".join(row)
    cursor = db.execute(f"INSERT INTO episodes ({columns}) VALUES ({', '.join('?' for _column in row)}) RETURNING id", tuple(row.values()))
    return int(cursor.fetchone()[0])


# how many of a fingerprint's latest verified heals say whether its plans relapsed
_TRUST_LOOKBACK = 20


def _templates(plan_json: str | None) -> tuple[str, ...]:
    return tuple(step["template"] for step in _json_of(plan_json).get("steps") or ())


_HEAL_COLUMNS = "id, finished_at, plan_json, error_text, evidence_json, results_json, relapsed_from, relapsed_at"


def _heal(row: Any) -> Heal | None:
    if row is None:
        return None
    steps = _json_of(row["plan_json"]).get("steps") or ()
    return Heal(episode_id=int(row["id"]), finished_at=float(row["finished_at"]), commands=tuple(shlex.join(step["argv"]) for step in steps),
                templates=_templates(row["plan_json"]),
                failed_with=row["error_text"], evidence=_json_of(row["evidence_json"]),
                results=_json_of(row["results_json"]).get("evidence") or {},
                relapsed_from=None if row["relapsed_from"] is None else int(row["relapsed_from"]),
                relapsed_at=None if row["relapsed_at"] is None else float(row["relapsed_at"]))


def _ended(lease: Any, at: float) -> str | None:
    return lease_ended(expires_at=lease["expires_at"], renewed_at=lease["renewed_at"], owner=lease["owner"], at=at)


def _reap(db: Database, *, at: float, host: str | None, steps_started: StepsStarted) -> list[dict[str, Any]]:
    """Inside a write transaction: every lease that ended without its owner releasing it becomes an interrupted episode."""
    query = "SELECT * FROM leases" + (" WHERE host = ?" if host is not None else "")
    reaped = []
    for lease in db.execute(query, (host,) if host is not None else ()).fetchall():
        why = _ended(lease, at)
        if why is None:
            continue
        db.execute("DELETE FROM leases WHERE id = ?", (lease["id"],))
        carried = json.loads(lease["episode_json"])
        if not carried:
            continue  # a lease taken before leases carried their episode
        row = carried["episode"]
        argvs = [step["argv"] for step in json.loads(row["plan_json"] or '{"steps": []}')["steps"]]
        steps = steps_started(lease["run_dir"], argvs, lease["host"]) if lease["run_dir"] else [
            StepResult(argv=tuple(argv), status="skipped", stderr="not started: the job was killed") for argv in argvs]
        started = [" ".join(step.argv) for step in steps if step.status not in ("skipped", "unknown")]
        summary = f"interrupted: {why} during the remediation; " + (
            "what it had started is not known on this controller (its run's directory is on the one it ran on)"
            if any(step.status == "unknown" for step in steps) else f"it had started {'; '.join(started)}" if started else "no step had started")
        results = json.loads(row["results_json"])
        results.update(steps=[step.to_dict() for step in steps], verification={"healthy": False, "summary": summary},
                       artifacts=[*results["artifacts"], *([lease["run_dir"]] if lease["run_dir"] else [])])
        row.update(outcome="interrupted", verified=0, finished_at=at, results_json=_json(results))
        episode_id = _insert_episode(db, row)
        if row.get("relapsed_from") is not None:
            db.execute("UPDATE episodes SET relapsed_at = ? WHERE id = ? AND relapsed_at IS NULL", (row["started_at"], row["relapsed_from"]))
        if carried.get("executed_plan_id"):
            # an approved plan that began to run never runs again by itself: a person approves it anew, or not
            db.execute("UPDATE plans SET status = 'executed', executed_episode_id = ? WHERE plan_id = ? AND status = 'running'",
                       (episode_id, carried["executed_plan_id"]))
        reaped.append({"episode": episode_id, "host": row["host"], "service": row["service"], "incident_id": row["incident_id"],
                       "started": started, "summary": summary, "run_dir": lease["run_dir"]})
    return reaped


_SUSPENSION_IN_FORCE = """SELECT suspended_at, suspended_by, reason, resumed_at, resumed_by FROM suspensions
    WHERE resumed_at IS NULL ORDER BY id DESC LIMIT 1"""


def _suspension(row: Any) -> Suspension | None:
    return None if row is None else Suspension(**dict(row))


_FTS_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
# Words that appear in most errors and only slow the search down.
_COMMON_WORDS = frozenset({"the", "and", "for", "not", "failed", "error", "path", "with", "from", "was", "which", "names",
                           "running", "status", "tcp", "connection", "refused", "http", "pid", "file", "process"})
_MAX_WORDS = 12


def _distinctive_words(text: str) -> list[str]:
    return [w for w in dict.fromkeys(_FTS_WORD.findall(text)) if w not in _COMMON_WORDS][:_MAX_WORDS]


class _Transaction:
    """A write transaction (SQLite's BEGIN IMMEDIATE; PostgreSQL's BEGIN and the memory's writer lock) ... COMMIT, or
    ROLLBACK on any error: all of an episode or none of it.

    A database error becomes a MemoryStoreError that names the memory (its file, or its URL with the password masked)
    and what to do."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __enter__(self) -> Database:
        try:
            self._db.begin()
        except self._db.errors as exc:
            self._rollback()
            raise MemoryStoreError(f"cannot write to the memory ({self._db.redact(exc)}); nothing was written", field=self._db.field,
                                   value=self._db.where, hint=self._db.explain(exc)) from exc
        return self._db

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.commit()
                return
            except self._db.errors as commit_error:
                exc = commit_error
        self._rollback()
        if isinstance(exc, self._db.errors):
            raise MemoryStoreError(f"the memory refused a write ({self._db.redact(exc)}); nothing of it was kept", field=self._db.field,
                                   value=self._db.where, hint=self._db.explain(exc)) from exc

    def _rollback(self) -> None:
        """Undo what the transaction wrote; on a connection that is gone there is nothing left to undo."""
        gone: tuple[type[BaseException], ...] = (*self._db.errors, MemoryStoreError)
        try:
            if self._db.in_transaction:
                self._db.rollback()
        except gone:
            pass


def _json_of(column: str | None) -> dict[str, Any]:
    return json.loads(column) if column else {}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
