"""Rollout: how one run spreads remediations over its hosts, shared by its forks through memory.

A plan no run has verified yet (one the LLM or the generic fallback made) is tried on one host first, its canary: the
other hosts of the run with the same incident wait until it verifies there, and if it fails there none of them runs it.
And once more than ``max_fail_percentage`` of the run's hosts had a remediation fail verification, nothing more is
attempted in the run (as Ansible's own ``max_fail_percentage`` counts a play's hosts).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import owner_is_gone
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, PlanSource
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

# Plans from these sources were never verified anywhere: a human wrote the runbooks, memory holds what healed before.
UNPROVEN_SOURCES = frozenset({PlanSource.LLM, PlanSource.GENERIC})
# What a canary's attempt outcome tells the hosts that wait for it; any other outcome (it did not run, or its job
# died) frees the canary for one of them.
SETTLED = {"healed": "verified", "failed": "failed"}


@dataclass(frozen=True)
class CanaryKey:
    """One new plan for one incident in one run: the hosts of the run that share it share its canary."""

    run_id: str
    fingerprint: str
    plan_key: str

    @classmethod
    def of(cls, run_id: str, failure: Failure, plan: Plan) -> CanaryKey | None:
        """The canary a plan needs in a run, or None for a plan that was verified before (a runbook's, memory's)."""
        if plan.source not in UNPROVEN_SOURCES:
            return None
        return cls(run_id=run_id, fingerprint=failure.fingerprint, plan_key=_plan_key(plan))

    @classmethod
    def of_fleet_incident(cls, incident_id: int, signature: str, plan: Plan) -> CanaryKey:
        """The canary of any plan in a fleet incident: one host of the incident tries it first, whatever run it is in."""
        return cls(run_id=f"fleet-incident-{incident_id}", fingerprint=hashlib.sha256(signature.encode()).hexdigest()[:32], plan_key=_plan_key(plan))


def _plan_key(plan: Plan) -> str:
    return hashlib.sha256(json.dumps(plan.templates).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Canary:
    """Who tries the plan first, and how it went there: running, verified or failed."""

    host: str
    outcome: str


def held_canary(db: Database, key: CanaryKey, *, host: str) -> Canary | None:
    """The plan's canary as it stands, read without a write lock; None when it is free for ``host`` to claim: nobody has
    it, or the host that had it died before it settled."""
    row = db.execute("SELECT host, owner, outcome FROM canaries WHERE run_id = ? AND fingerprint = ? AND plan_key = ?",
                     (key.run_id, key.fingerprint, key.plan_key)).fetchone()
    if row is None or (row["outcome"] == "running" and row["host"] != host and owner_is_gone(row["owner"])):
        return None
    return Canary(host=row["host"], outcome=row["outcome"])


def claim_canary(db: Database, key: CanaryKey, *, host: str, owner: str, at: float) -> Canary:
    """Inside a write transaction: the plan's canary, this host when no other host has it (or the one that had it died
    before it settled)."""
    held = held_canary(db, key, host=host)
    if held is not None:
        return held
    # a new claim, or the claim of a canary that died: anew, as if the row had never been
    db.execute("""INSERT INTO canaries (run_id, fingerprint, plan_key, host, owner, claimed_at, outcome) VALUES (?, ?, ?, ?, ?, ?, 'running')
                  ON CONFLICT (run_id, fingerprint, plan_key) DO UPDATE SET host = excluded.host, owner = excluded.owner,
                  claimed_at = excluded.claimed_at, outcome = excluded.outcome, episode_id = NULL""",
               (key.run_id, key.fingerprint, key.plan_key, host, owner, at))
    return Canary(host=host, outcome="running")


def settle_canary(db: Database, key: CanaryKey, *, host: str, outcome: str, episode_id: int) -> None:
    """Inside a write transaction, once the canary's episode is recorded: what the waiting hosts learn from it."""
    where = "run_id = ? AND fingerprint = ? AND plan_key = ? AND host = ? AND outcome = 'running'"
    params = (key.run_id, key.fingerprint, key.plan_key, host)
    if outcome in SETTLED:
        db.execute(f"UPDATE canaries SET outcome = ?, episode_id = ? WHERE {where}", (SETTLED[outcome], episode_id, *params))
    else:
        db.execute(f"DELETE FROM canaries WHERE {where}", params)


class Canaries:
    """The canaries table over the Database port: who tries a run's new plan first, and what its attempt settled."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def claim_canary(self, key: CanaryKey, *, host: str, owner: str, at: float) -> Canary:
        """The host that tries a new plan first in its run: this one, unless another host of the run has it."""
        with Transaction(self._db) as db:
            return claim_canary(db, key, host=host, owner=owner, at=at)

    def canary(self, key: CanaryKey, *, host: str, owner: str, at: float) -> Canary:
        """How the plan's canary stands for ``host``: read without the write lock, and claimed for ``host`` only when it is
        free (a hundred forks waiting for it poll it)."""
        return held_canary(self._db, key, host=host) or self.claim_canary(key, host=host, owner=owner, at=at)

    def settle_canary(self, key: CanaryKey, *, host: str, outcome: str, episode_id: int) -> None:
        """The canary's attempt was recorded as episode ``episode_id``: what the hosts waiting for it learn."""
        with Transaction(self._db) as db:
            settle_canary(db, key, host=host, outcome=outcome, episode_id=episode_id)


def halted_because(failed_hosts: list[str], *, run_hosts: int, max_fail_percentage: int | None) -> str | None:
    """Why nothing more is attempted in the run: more than ``max_fail_percentage`` of its ``run_hosts`` hosts had a
    remediation fail verification; None when the run goes on (or the threshold is off)."""
    if max_fail_percentage is None or run_hosts <= 0 or len(failed_hosts) * 100 <= max_fail_percentage * run_hosts:
        return None
    share = len(failed_hosts) * 100 / run_hosts
    return (f"remediations failed verification on {len(failed_hosts)} of the {run_hosts} hosts of this run ({share:.0f}%: "
            f"{', '.join(failed_hosts)}), more than max_fail_percentage {max_fail_percentage}%; nothing more is attempted in this run")
