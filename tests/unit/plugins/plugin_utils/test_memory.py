from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.memory import MEMORY_FILE, MIGRATIONS, Memory
from helpers import nginx_failure

PENDING = PendingPlan(plan_hash="h", policy_file="p.yml", created_at=1.0, expires_at=2.0)


def _attempt(outcome: str, *templates: str, verified: bool = False, finished_at: float | None = None) -> Attempt:
    steps = tuple(Step(template=t, argv=tuple(t.split())) for t in templates)
    now = time.time() if finished_at is None else finished_at
    return Attempt(
        number=1, diagnosis="d", plan=Plan(source=PlanSource.RUNBOOK, reference="rb", rationale="r", steps=steps),
        outcome=outcome, verified=verified, started_at=now - 1, finished_at=now, policy_version="v1",
    )


def test_migrations_are_applied_once_and_recorded(tmp_path: Path) -> None:
    with Memory(tmp_path) as memory:
        assert memory.schema_version == len(MIGRATIONS)
    with Memory(tmp_path) as memory:  # a second open applies nothing and keeps the data
        assert memory.schema_version == len(MIGRATIONS)
    conn = sqlite3.connect(tmp_path / MEMORY_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"episodes", "plans"} <= {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_a_database_from_a_newer_version_is_refused_with_both_versions(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / MEMORY_FILE)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    conn.close()
    with pytest.raises(MemoryStoreError) as caught:
        Memory(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / MEMORY_FILE) in message
    assert f"schema {len(MIGRATIONS) + 5}" in message and f"knows {len(MIGRATIONS)}" in message


def test_only_a_verified_recovery_is_a_remembered_fix(tmp_path: Path) -> None:
    failure = nginx_failure()
    with Memory(tmp_path) as memory:
        memory.record_attempt(incident_id="i1", failure=failure, attempt=_attempt("failed", "service {init_service} restart"))
        assert memory.verified_fix(failure.fingerprint) is None
        episode, _plan_id = memory.record_attempt(
            incident_id="i2", failure=failure, attempt=_attempt("healed", "rm -f {stale_pidfile}", "service {init_service} start", verified=True),
        )
        fix = memory.verified_fix(failure.fingerprint)
        assert fix is not None and fix.episode_id == episode
        assert fix.plan.source is PlanSource.MEMORY
        assert fix.plan.templates == ("rm -f {stale_pidfile}", "service {init_service} start")
        assert memory.verified_fix(nginx_failure("port_conflict", owner={"pid": 5, "process": "python3"}).fingerprint) is None


def test_the_same_failure_with_another_pid_has_the_same_fingerprint() -> None:
    assert nginx_failure(pid=812).fingerprint == nginx_failure(pid=31337).fingerprint
    assert nginx_failure(pid=812).fingerprint != nginx_failure("not_running").fingerprint


def test_failed_plans_are_remembered_per_fingerprint_within_the_window(tmp_path: Path) -> None:
    failure = nginx_failure()
    other = nginx_failure("not_running")
    now = time.time()
    with Memory(tmp_path) as memory:
        memory.record_attempt(incident_id="a", failure=failure, attempt=_attempt("failed", "service {init_service} restart", finished_at=now - 10))
        memory.record_attempt(incident_id="b", failure=failure, attempt=_attempt("failed", "old", finished_at=now - 5000))
        assert memory.failed_plans(failure.fingerprint, since=now - 60) == {("service {init_service} restart",)}
        assert memory.failed_plans(other.fingerprint, since=0) == set()


def test_an_episode_and_its_pending_plan_are_written_together_or_not_at_all(tmp_path: Path) -> None:
    failure = nginx_failure()
    with Memory(tmp_path) as memory:
        episode, plan_id = memory.record_attempt(
            incident_id="i", failure=failure, attempt=_attempt("awaiting_approval", "apt-get update"), pending=PENDING,
        )
        assert plan_id and memory.plan(plan_id)["episode_id"] == episode  # type: ignore[index]
        # Break the plans table so the second insert of the transaction fails: the episode must roll back too.
        memory._conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON plans BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        with pytest.raises(sqlite3.DatabaseError, match="disk full"):
            memory.record_attempt(incident_id="j", failure=failure, attempt=_attempt("awaiting_approval", "x"), pending=PENDING)
        assert [e["incident_id"] for e in memory.episodes()] == ["i"]


def test_an_unknown_outcome_is_refused_before_writing(tmp_path: Path) -> None:
    with Memory(tmp_path) as memory, pytest.raises(MemoryStoreError) as caught:
        memory.record_attempt(incident_id="i", failure=nginx_failure(), attempt=_attempt("mostly-fine"))
    assert caught.value.field == "outcome" and caught.value.value == "mostly-fine"


def _writer(state_dir: str, worker: int, count: int) -> None:
    with Memory(state_dir) as memory:
        for n in range(count):
            memory.record_attempt(incident_id=f"w{worker}-{n}", failure=nginx_failure(host=f"h{worker}"), attempt=_attempt("failed", "x"))


def test_concurrent_processes_lose_no_episode(tmp_path: Path) -> None:
    workers, per_worker = 6, 40
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_writer, args=(str(tmp_path), w, per_worker)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    conn = sqlite3.connect(tmp_path / MEMORY_FILE)
    assert conn.execute("SELECT count(*), count(DISTINCT incident_id) FROM episodes").fetchone() == (workers * per_worker,) * 2
