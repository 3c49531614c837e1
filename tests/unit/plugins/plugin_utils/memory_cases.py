"""What the memory's tests share, in store/ and in fleet/ (whose repositories write the same database): an attempt to
record, a plan waiting for approval and one approved, and the database's own consistency check."""

from __future__ import annotations

import time

from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

PENDING = PendingPlan(plan_hash="h", policy_file="p.yml", created_at=1.0, expires_at=2.0)


def _attempt(outcome: str, *templates: str, verified: bool = False, finished_at: float | None = None) -> Attempt:
    steps = tuple(Step(template=t, argv=tuple(t.split())) for t in templates)
    now = time.time() if finished_at is None else finished_at
    return Attempt(
        number=1, diagnosis="d", plan=Plan(source=PlanSource.RUNBOOK, reference="rb", rationale="r", steps=steps),
        outcome=outcome, verified=verified, started_at=now - 1, finished_at=now, policy_version="v1",
    )


def _intact(memory_place: MemoryPlace) -> bool:
    """The database's own consistency check (SQLite's integrity_check; PostgreSQL checks every write itself)."""
    if memory_place.backend == "sqlite":
        return memory_place.sql("PRAGMA integrity_check") == [("ok",)]
    return memory_place.sql("SELECT count(*) FROM episodes WHERE id IS NULL") == [(0,)]


def _claimed_plan(memory: Memory, failure: Failure) -> str:
    """A plan stored to wait for approval, then approved (claimed for its run) by alice."""
    _episode, plan_id = memory.record_attempt(incident_id="i", failure=failure, pending=PENDING,
                                              attempt=_attempt("awaiting_approval", "service {init_service} start"))
    assert plan_id is not None and memory.claim_plan(plan_id, by="alice", at=1.0)
    return plan_id
