"""The memory's schema: numbered, append-only migrations applied when the memory is opened, in each database's dialect.

``MIGRATIONS`` (SQLite) and ``POSTGRES_MIGRATIONS`` go in step: migration N makes the same tables and columns in both
(a test compares them), so a schema version means the same in either. On PostgreSQL, ids are identity columns, times
are DOUBLE PRECISION (SQLite's REAL is 8 bytes: never the 4 of PostgreSQL's REAL), and the similar-error search is a
GIN index over the same text FTS5 indexes on SQLite.

One room, though over 400 lines: the migrations are one ordered list whose index is the schema version, and reading
them in order is how the schema is understood; split by table, the order (and the version) would live nowhere.
"""

from __future__ import annotations

import sqlite3
from typing import Iterator

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError

# Append-only: a released migration is never edited, a change is a new entry (here and in POSTGRES_MIGRATIONS).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE episodes (
        id INTEGER PRIMARY KEY,
        incident_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        failure_class TEXT NOT NULL,
        error_text TEXT NOT NULL,
        evidence_json TEXT NOT NULL,
        diagnosis TEXT NOT NULL,
        plan_source TEXT,
        plan_reference TEXT,
        plan_json TEXT,
        verdicts_json TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        results_json TEXT NOT NULL,
        outcome TEXT NOT NULL,
        verified INTEGER NOT NULL CHECK (verified IN (0, 1)),
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL
    );
    CREATE INDEX episodes_by_fingerprint ON episodes (fingerprint, outcome, finished_at);
    CREATE INDEX episodes_by_incident ON episodes (incident_id);
    CREATE TABLE plans (
        plan_id TEXT PRIMARY KEY,
        episode_id INTEGER NOT NULL REFERENCES episodes (id),
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        plan_json TEXT NOT NULL,
        verdicts_json TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        created_at REAL NOT NULL
    );
    """,
    # 2: plans that wait for a human are bound to their exact steps, host, service and policy,
    #    expire, and record who decided; episodes record who approved what they ran.
    """
    ALTER TABLE episodes ADD COLUMN approved_by TEXT;
    ALTER TABLE plans ADD COLUMN incident_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN plan_hash TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN failure_json TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE plans ADD COLUMN policy_file TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN expires_at REAL NOT NULL DEFAULT 0;
    ALTER TABLE plans ADD COLUMN decided_by TEXT;
    ALTER TABLE plans ADD COLUMN decided_at REAL;
    ALTER TABLE plans ADD COLUMN decision_note TEXT;
    ALTER TABLE plans ADD COLUMN executed_episode_id INTEGER REFERENCES episodes (id);
    CREATE INDEX plans_by_status ON plans (status, created_at);
    """,
    # 3: the kind of host an episode happened on, and similar-error search ranked by FTS5 (bm25).
    """
    ALTER TABLE episodes ADD COLUMN os_family TEXT NOT NULL DEFAULT '';
    ALTER TABLE episodes ADD COLUMN service_manager TEXT NOT NULL DEFAULT '';
    ALTER TABLE episodes ADD COLUMN normalized_error TEXT NOT NULL DEFAULT '';
    UPDATE episodes SET normalized_error = lower(error_text);
    CREATE VIRTUAL TABLE episodes_fts USING fts5(service, normalized_error, content='episodes', content_rowid='id');
    CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
        INSERT INTO episodes_fts (rowid, service, normalized_error) VALUES (new.id, new.service, new.normalized_error);
    END;
    CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
        INSERT INTO episodes_fts (episodes_fts, rowid, service, normalized_error)
        VALUES ('delete', old.id, old.service, old.normalized_error);
    END;
    INSERT INTO episodes_fts (episodes_fts) VALUES ('rebuild');
    """,
    # 4: the kill switch (while a suspension is not resumed, no autonomous remediation starts anywhere), and where a person
    #    reset a service's flapping count.
    """
    CREATE TABLE suspensions (
        id INTEGER PRIMARY KEY,
        suspended_at REAL NOT NULL,
        suspended_by TEXT NOT NULL,
        reason TEXT NOT NULL,
        resumed_at REAL,
        resumed_by TEXT
    );
    CREATE INDEX suspensions_in_force ON suspensions (resumed_at);
    CREATE TABLE flapping_resets (
        id INTEGER PRIMARY KEY,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        reset_at REAL NOT NULL,
        reset_by TEXT NOT NULL
    );
    CREATE INDEX flapping_resets_by_service ON flapping_resets (host, service, reset_at);
    CREATE INDEX episodes_by_service ON episodes (host, service, started_at);
    """,
    # 5: the blast radius: a lease per remediation running (expiring, so a crashed job frees its slot) and the hosts
    #    each run remediated, shared by every fork of a play and every job of the state dir.
    """
    CREATE TABLE leases (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        acquired_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    CREATE INDEX leases_by_expiry ON leases (expires_at);
    CREATE TABLE run_hosts (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        first_at REAL NOT NULL,
        PRIMARY KEY (run_id, host)
    );
    """,
    # 6: every remediation holds a lease while it runs, naming the process that owns it and the episode it becomes if
    #    that process dies first (interrupted); each run counts its remediation attempts (the per-run budget).
    """
    ALTER TABLE leases ADD COLUMN incident_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE leases ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE leases ADD COLUMN episode_json TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE leases ADD COLUMN run_dir TEXT NOT NULL DEFAULT '';
    ALTER TABLE run_hosts ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX leases_by_host ON leases (host);
    """,
    # 7: silences: a person's "hands off these hosts (and service) until then"; lifted ones are kept for the record.
    """
    CREATE TABLE silences (
        id INTEGER PRIMARY KEY,
        hosts TEXT NOT NULL,
        service TEXT NOT NULL,
        reason TEXT NOT NULL,
        set_by TEXT NOT NULL,
        set_at REAL NOT NULL,
        until REAL NOT NULL,
        lifted_at REAL,
        lifted_by TEXT
    );
    CREATE INDEX silences_in_force ON silences (lifted_at, until);
    """,
    # 8: rollout: the run each episode belongs to (what the run's error threshold counts), and the canary of each new
    #    plan in a run (the one host that tries it first, and how it went there).
    """
    ALTER TABLE episodes ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
    CREATE INDEX episodes_by_run ON episodes (run_id, outcome);
    CREATE TABLE canaries (
        run_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        plan_key TEXT NOT NULL,
        host TEXT NOT NULL,
        owner TEXT NOT NULL,
        claimed_at REAL NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('running', 'verified', 'failed')),
        episode_id INTEGER REFERENCES episodes (id),
        PRIMARY KEY (run_id, fingerprint, plan_key)
    );
    """,
    # 9: fleet incidents: what each host saw fail in each run (sightings), and one incident for a failure many hosts
    #    share, with its hosts and when each was seen clear of it again; the alerts event sources received, and the
    #    services whose alerts of many hosts became one heal job (alert_fleets).
    """
    CREATE TABLE sightings (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        signature TEXT NOT NULL,
        failure_class TEXT NOT NULL,
        summary TEXT NOT NULL,
        clues_json TEXT NOT NULL,
        seen_at REAL NOT NULL,
        PRIMARY KEY (run_id, host, service)
    );
    CREATE INDEX sightings_by_signature ON sightings (signature, seen_at);
    CREATE TABLE fleet_incidents (
        id INTEGER PRIMARY KEY,
        signature TEXT NOT NULL,
        service TEXT NOT NULL,
        failure_class TEXT NOT NULL,
        summary TEXT NOT NULL,
        common_json TEXT NOT NULL,
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        opened_run TEXT NOT NULL,
        closed_at REAL
    );
    CREATE UNIQUE INDEX fleet_incidents_open ON fleet_incidents (signature) WHERE closed_at IS NULL;
    CREATE TABLE fleet_incident_hosts (
        incident_id INTEGER NOT NULL REFERENCES fleet_incidents (id),
        host TEXT NOT NULL,
        seen_at REAL NOT NULL,
        cleared_at REAL,
        PRIMARY KEY (incident_id, host)
    );
    CREATE TABLE alerts (
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX alerts_by_service ON alerts (service, at);
    CREATE TABLE alert_fleets (
        id INTEGER PRIMARY KEY,
        service TEXT NOT NULL,
        hosts_json TEXT NOT NULL,
        opened_at REAL NOT NULL,
        until REAL NOT NULL
    );
    CREATE INDEX alert_fleets_by_service ON alert_fleets (service, until);
    """,
    # 10: relapses: a heal whose service failed again within the relapse window records when (relapsed_at), and each
    #     episode of the incident that followed names the heal it relapsed from.
    """
    ALTER TABLE episodes ADD COLUMN relapsed_from INTEGER REFERENCES episodes (id);
    ALTER TABLE episodes ADD COLUMN relapsed_at REAL;
    """,
    # 11: the leases' heartbeat: when the owner last said its remediation still runs (NULL: a lease never renewed).
    """
    ALTER TABLE leases ADD COLUMN renewed_at REAL;
    """,
    # 12: what the approval page was asked (store/approval_requests.py): each decision it took and each it refused, and
    #     at most one decision taken per plan (a second click, a retry, is refused, never a second run).
    """
    CREATE TABLE approval_requests (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        via TEXT NOT NULL,
        plan_id TEXT NOT NULL,
        host TEXT NOT NULL,
        decision TEXT NOT NULL,
        approver TEXT NOT NULL,
        claimed_by TEXT NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('accepted', 'refused')),
        refusal TEXT NOT NULL,
        reason TEXT NOT NULL,
        remote TEXT NOT NULL
    );
    CREATE UNIQUE INDEX approval_requests_one_decision ON approval_requests (plan_id) WHERE outcome = 'accepted';
    CREATE INDEX approval_requests_by_time ON approval_requests (at);
    """,
    # 13: what was said once to the people notified (a fleet incident opened, closed), by whichever job, controller or
    #     execution node sharing the memory got there first (notify/said.py).
    """
    CREATE TABLE notices_said (what TEXT PRIMARY KEY, said_at REAL NOT NULL);
    """,
)


def postgres_dialect(script: str) -> str:
    """A migration written for SQLite in PostgreSQL's words (from migration 9 on, one text serves both): ids are
    identity columns, times DOUBLE PRECISION, references to ids BIGINT."""
    for sqlite_words, postgres_words in (("INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
                                         ("INTEGER NOT NULL REFERENCES", "BIGINT NOT NULL REFERENCES"), ("INTEGER REFERENCES", "BIGINT REFERENCES"),
                                         (" REAL", " DOUBLE PRECISION")):
        script = script.replace(sqlite_words, postgres_words)
    return script


# The schema version of a PostgreSQL memory (SQLite keeps it in PRAGMA user_version): a table of one row.
VERSION_TABLE = "memory_schema_version"
# What the similar-error search reads on PostgreSQL, as FTS5 indexes service and normalized_error on SQLite; the GIN
# index of migration 3 is over this very expression, so the search uses it.
SEARCH_VECTOR = "to_tsvector('simple', episodes.service || ' ' || episodes.normalized_error)"

# Append-only, in step with MIGRATIONS (the same number, the same tables and columns).
POSTGRES_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE episodes (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        incident_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        failure_class TEXT NOT NULL,
        error_text TEXT NOT NULL,
        evidence_json TEXT NOT NULL,
        diagnosis TEXT NOT NULL,
        plan_source TEXT,
        plan_reference TEXT,
        plan_json TEXT,
        verdicts_json TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        results_json TEXT NOT NULL,
        outcome TEXT NOT NULL,
        verified INTEGER NOT NULL CHECK (verified IN (0, 1)),
        started_at DOUBLE PRECISION NOT NULL,
        finished_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX episodes_by_fingerprint ON episodes (fingerprint, outcome, finished_at);
    CREATE INDEX episodes_by_incident ON episodes (incident_id);
    CREATE TABLE plans (
        plan_id TEXT PRIMARY KEY,
        episode_id BIGINT NOT NULL REFERENCES episodes (id),
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        plan_json TEXT NOT NULL,
        verdicts_json TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        created_at DOUBLE PRECISION NOT NULL
    );
    """,
    """
    ALTER TABLE episodes ADD COLUMN approved_by TEXT;
    ALTER TABLE plans ADD COLUMN incident_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN plan_hash TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN failure_json TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE plans ADD COLUMN policy_file TEXT NOT NULL DEFAULT '';
    ALTER TABLE plans ADD COLUMN expires_at DOUBLE PRECISION NOT NULL DEFAULT 0;
    ALTER TABLE plans ADD COLUMN decided_by TEXT;
    ALTER TABLE plans ADD COLUMN decided_at DOUBLE PRECISION;
    ALTER TABLE plans ADD COLUMN decision_note TEXT;
    ALTER TABLE plans ADD COLUMN executed_episode_id BIGINT REFERENCES episodes (id);
    CREATE INDEX plans_by_status ON plans (status, created_at);
    """,
    """
    ALTER TABLE episodes ADD COLUMN os_family TEXT NOT NULL DEFAULT '';
    ALTER TABLE episodes ADD COLUMN service_manager TEXT NOT NULL DEFAULT '';
    ALTER TABLE episodes ADD COLUMN normalized_error TEXT NOT NULL DEFAULT '';
    UPDATE episodes SET normalized_error = lower(error_text);
    CREATE INDEX episodes_search ON episodes USING GIN (to_tsvector('simple', service || ' ' || normalized_error));
    """,
    """
    CREATE TABLE suspensions (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        suspended_at DOUBLE PRECISION NOT NULL,
        suspended_by TEXT NOT NULL,
        reason TEXT NOT NULL,
        resumed_at DOUBLE PRECISION,
        resumed_by TEXT
    );
    CREATE INDEX suspensions_in_force ON suspensions (resumed_at);
    CREATE TABLE flapping_resets (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        reset_at DOUBLE PRECISION NOT NULL,
        reset_by TEXT NOT NULL
    );
    CREATE INDEX flapping_resets_by_service ON flapping_resets (host, service, reset_at);
    CREATE INDEX episodes_by_service ON episodes (host, service, started_at);
    """,
    """
    CREATE TABLE leases (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        service TEXT NOT NULL,
        acquired_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX leases_by_expiry ON leases (expires_at);
    CREATE TABLE run_hosts (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        first_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, host)
    );
    """,
    """
    ALTER TABLE leases ADD COLUMN incident_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE leases ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE leases ADD COLUMN episode_json TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE leases ADD COLUMN run_dir TEXT NOT NULL DEFAULT '';
    ALTER TABLE run_hosts ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX leases_by_host ON leases (host);
    """,
    """
    CREATE TABLE silences (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        hosts TEXT NOT NULL,
        service TEXT NOT NULL,
        reason TEXT NOT NULL,
        set_by TEXT NOT NULL,
        set_at DOUBLE PRECISION NOT NULL,
        until DOUBLE PRECISION NOT NULL,
        lifted_at DOUBLE PRECISION,
        lifted_by TEXT
    );
    CREATE INDEX silences_in_force ON silences (lifted_at, until);
    """,
    """
    ALTER TABLE episodes ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
    CREATE INDEX episodes_by_run ON episodes (run_id, outcome);
    CREATE TABLE canaries (
        run_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        plan_key TEXT NOT NULL,
        host TEXT NOT NULL,
        owner TEXT NOT NULL,
        claimed_at DOUBLE PRECISION NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('running', 'verified', 'failed')),
        episode_id BIGINT REFERENCES episodes (id),
        PRIMARY KEY (run_id, fingerprint, plan_key)
    );
    """,
    *(postgres_dialect(script) for script in MIGRATIONS[8:]),
)


def statements(script: str) -> Iterator[str]:
    """Complete SQL statements of a migration (a trigger's body holds semicolons of its own)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip():
        raise MemoryStoreError("a migration ends with an incomplete statement", field="migration", value=pending.strip()[:80])
