"""Episodic memory: one SQLite file on the controller, or one PostgreSQL database for a cluster of them.

Every attempt at healing an incident is an episode, written in one transaction. Only an attempt
whose recovery was verified counts as a fix that a later incident with the same fingerprint may
reuse; plans that failed for a fingerprint are remembered so they are not tried again. Plans that
wait for a human are stored beside the episodes (store/episodes.py: their rows). The logic is written once; what differs
between the databases is in their backends (store/sqlite.py, store/postgres.py, chosen in store/database.py). What spans
hosts and runs (leases, canaries, silences, the kill switch, fleet incidents, alerts) keeps its own tables in fleet/,
written through :attr:`Memory.database`; the store never imports fleet/.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.backends import open_database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.episodes import (
    HEAL_COLUMNS,
    HELD_OUTCOMES,
    OUTCOMES,
    PLAN_STATUSES,
    Heal,
    RememberedFix,
    Unhealed,
    decoded_episode,
    episode_record,
    episode_row,
    heal_of,
    insert_episode,
    json_of,
    json_text,
    plan_executed,
    templates_of,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.schema import statements
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.sqlite import MEMORY_FILE
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

__all__ = ["MEMORY_FILE", "MEMORY_OPTIONS", "OUTCOMES", "PLAN_STATUSES", "Heal", "Memory", "RememberedFix", "Unhealed", "decoded_episode",
           "episode_record", "memory_exists", "memory_secrets"]

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

# how many of a fingerprint's latest verified heals say whether its plans relapsed
_TRUST_LOOKBACK = 20


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

    @property
    def database(self) -> Database:
        """The Database port the memory is open on: what fleet/'s tables (leases, canaries, silences, ...) are written
        through."""
        return self._db

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

    def _transaction(self) -> Transaction:
        return Transaction(self._db)

    def record_attempt(
        self, *, incident_id: str, failure: Failure, attempt: Attempt, pending: PendingPlan | None = None,
        executed_plan_id: str | None = None, run_id: str = "", relapsed_from: int | None = None,
    ) -> tuple[int, str | None]:
        """Write one episode of the run ``run_id`` atomically, with the plan it leaves waiting for a human (``pending``),
        the approved plan it carried out (``executed_plan_id``, which must be claimed), and, when the incident is the
        relapse of the heal ``relapsed_from``, that this heal relapsed. (When the attempt was the canary of its plan, the
        loop settles the canary next: fleet/rollout.py's Canaries.)"""
        if attempt.outcome not in OUTCOMES:
            raise MemoryStoreError("unknown episode outcome", field="outcome", value=attempt.outcome, hint=f"one of {sorted(OUTCOMES)}")
        plan = attempt.plan
        with self._transaction() as db:
            episode_id = insert_episode(db, episode_row(incident_id, failure, attempt, run_id, relapsed_from))
            plan_id = None
            if pending is not None and plan is not None:
                plan_id = uuid.uuid4().hex
                db.execute(
                    """INSERT INTO plans (plan_id, episode_id, incident_id, host, service, fingerprint, plan_json, verdicts_json,
                           policy_version, policy_file, plan_hash, failure_json, created_at, expires_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (plan_id, episode_id, incident_id, failure.host, failure.service, failure.fingerprint, json_text(plan.to_dict()),
                     json_text([v.to_dict() for v in attempt.verdicts]), attempt.policy_version, pending.policy_file,
                     pending.plan_hash, json_text(failure.to_dict()), pending.created_at, pending.expires_at),
                )
            if executed_plan_id is not None:
                held = attempt.outcome in HELD_OUTCOMES and all(result.status == "skipped" for result in attempt.results)
                # a limit held the approved plan back before any step ran: it waits again, to be approved once more
                updated = db.execute(
                    "UPDATE plans SET status = 'pending', decided_by = NULL, decided_at = NULL WHERE plan_id = ? AND status = 'running'",
                    (executed_plan_id,),
                ).rowcount if held else plan_executed(db, executed_plan_id, episode_id)
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
        relapsed = {templates_of(row["plan_json"]) for row in rows if row["relapsed_at"] is not None}
        row = next((row for row in rows if templates_of(row["plan_json"]) not in relapsed), None)
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
        return RememberedFix(episode_id=int(row["id"]), plan=plan, evidence=json_of(row["evidence_json"]),
                             results=json_of(row["results_json"]).get("evidence") or {})

    def last_heal(self, host: str, service: str, *, since: float) -> Heal | None:
        """The latest heal of the service on the host that finished at ``since`` or later: what a failure now relapsed from."""
        row = self._db.execute(
            f"""SELECT {HEAL_COLUMNS} FROM episodes WHERE host = ? AND service = ? AND outcome = 'healed' AND finished_at >= ?
                ORDER BY finished_at DESC, id DESC LIMIT 1""",
            (host, service, since),
        ).fetchone()
        return heal_of(row)

    def incident_relapse(self, incident_id: str) -> tuple[int, float] | None:
        """The heal an incident relapsed from and when its first run saw the failure, as its episodes recorded them."""
        row = self._db.execute(
            "SELECT relapsed_from, started_at FROM episodes WHERE incident_id = ? AND relapsed_from IS NOT NULL ORDER BY id LIMIT 1",
            (incident_id,),
        ).fetchone()
        return None if row is None else (int(row["relapsed_from"]), float(row["started_at"]))

    def heal(self, episode_id: int) -> Heal | None:
        """The heal of episode ``episode_id`` (None when that episode healed nothing)."""
        return heal_of(self._db.execute(f"SELECT {HEAL_COLUMNS} FROM episodes WHERE id = ? AND outcome = 'healed'", (episode_id,)).fetchone())

    def unhealed(self, fingerprint: str, since: float) -> list[Unhealed]:
        """The plans that ran for this fingerprint since ``since`` and did not heal it, and its escalations, newest first."""
        rows = self._db.execute(
            """SELECT id, outcome, finished_at, plan_json, evidence_json, results_json FROM episodes
               WHERE fingerprint = ? AND outcome IN ('failed', 'escalated') AND finished_at >= ? ORDER BY finished_at DESC, id DESC""",
            (fingerprint, since),
        )
        return [Unhealed(outcome=row["outcome"], templates=tuple(step["template"] for step in json_of(row["plan_json"]).get("steps") or ()),
                         episode_id=int(row["id"]), finished_at=float(row["finished_at"]), evidence=json_of(row["evidence_json"]),
                         results=json_of(row["results_json"]).get("evidence") or {}) for row in rows]

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

    def failed_hosts(self, run_id: str) -> list[str]:
        """The hosts on which a remediation of the run failed verification: what its error threshold counts."""
        rows = self._db.execute("SELECT DISTINCT host FROM episodes WHERE run_id = ? AND outcome = 'failed' ORDER BY host", (run_id,))
        return [row[0] for row in rows]


def memory_exists(state_dir: str | Path, url: str | None = None) -> bool:
    """Whether there is a memory to open without creating one: the SQLite file exists (a server is always there)."""
    return bool(url) or (Path(state_dir).expanduser() / MEMORY_FILE).exists()


def memory_secrets(options: Mapping[str, Any]) -> list[str]:
    """The memory's password from a task's options (memory_password, or written in memory_url), to redact."""
    from ansible_collections.sentinel.heal.plugins.plugin_utils.store.postgres import url_password

    return [secret for secret in (options.get("memory_password"), url_password(options.get("memory_url") or "")) if secret]


_FTS_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
# Words that appear in most errors and only slow the search down.
_COMMON_WORDS = frozenset({"the", "and", "for", "not", "failed", "error", "path", "with", "from", "was", "which", "names",
                           "running", "status", "tcp", "connection", "refused", "http", "pid", "file", "process"})
_MAX_WORDS = 12


def _distinctive_words(text: str) -> list[str]:
    return [w for w in dict.fromkeys(_FTS_WORD.findall(text)) if w not in _COMMON_WORDS][:_MAX_WORDS]
