from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from memory_cases import PENDING, _attempt, _claimed_plan, _intact
from memory_places import MemoryPlace, drop, postgres_place, sqlite_place

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import PlanSource, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.backends import open_database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE, Memory
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.schema import MIGRATIONS, POSTGRES_MIGRATIONS, VERSION_TABLE, statements
from helpers import nginx_failure

# How a test breaks the plans table, so that the second insert of a transaction fails (a full disk, say).
REFUSE_PLANS = {
    "sqlite": ["CREATE TRIGGER refuse BEFORE INSERT ON plans BEGIN SELECT RAISE(ABORT, 'disk full'); END"],
    "postgresql": ["CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RAISE EXCEPTION ''disk full''; END'",
                   "CREATE TRIGGER refuse BEFORE INSERT ON plans FOR EACH ROW EXECUTE FUNCTION refuse()"],
}


def test_migrations_are_applied_once_and_recorded(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        assert memory.schema_version == len(MIGRATIONS) and memory.backend == memory_place.backend
        memory.record_attempt(incident_id="kept", failure=nginx_failure(), attempt=_attempt("failed", "x"))
    with memory_place.open() as memory:  # a second open applies nothing and keeps the data
        assert memory.schema_version == len(MIGRATIONS)
        assert [e["incident_id"] for e in memory.episodes()] == ["kept"]
    if memory_place.backend == "sqlite":
        conn = sqlite3.connect(memory_place.state_dir / MEMORY_FILE)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert {"episodes", "plans"} <= {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    else:
        assert memory_place.sql(f"SELECT version FROM {VERSION_TABLE}") == [(len(MIGRATIONS),)]
        assert not (memory_place.state_dir / MEMORY_FILE).exists()  # the state dir keeps no memory of its own


def _stamp(memory_place: MemoryPlace, version: int, *statements_run: str) -> None:
    """The database as another sentinel.heal left it: the statements run in it (through its backend, not Memory,
    which would migrate it) and its schema version set."""
    db = open_database(memory_place.state_dir, url=memory_place.url, password=memory_place.password, busy_timeout_s=5)
    try:
        db.begin()
        for statement in statements_run:
            db.execute(statement)
        db.set_schema_version(version)
        db.commit()
    finally:
        db.close()


def test_a_database_from_a_newer_version_is_refused_with_both_versions(memory_place: MemoryPlace) -> None:
    _stamp(memory_place, len(MIGRATIONS) + 5)
    with pytest.raises(MemoryStoreError) as caught:
        memory_place.open()
    message = str(caught.value)
    assert memory_place.where in message
    assert f"schema {len(MIGRATIONS) + 5}" in message and f"knows {len(MIGRATIONS)}" in message


def test_only_a_verified_recovery_is_a_remembered_fix(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="i1", failure=failure, attempt=_attempt("failed", "service {init_service} restart"))
        # an outcome that says healed is not enough: verification must have seen it
        unverified, _plan_id = memory.record_attempt(incident_id="i0", failure=failure, attempt=_attempt("healed", "service {init_service} reload"))
        assert [(row["id"], row["verified"]) for row in memory.episodes(outcome="healed")] == [(unverified, 0)]
        assert memory.verified_fix(failure.fingerprint) is None
        episode, _plan_id = memory.record_attempt(
            incident_id="i2", failure=failure, attempt=_attempt("healed", "rm -f {stale_pidfile}", "service {init_service} start", verified=True),
        )
        fix = memory.verified_fix(failure.fingerprint)
        assert fix is not None and fix.episode_id == episode
        assert fix.plan.source is PlanSource.MEMORY
        assert fix.plan.templates == ("rm -f {stale_pidfile}", "service {init_service} start")
        assert memory.verified_fix(nginx_failure("port_conflict", owner={"pid": 5, "process": "python3"}).fingerprint) is None


def test_a_fix_replayed_from_memory_keeps_naming_the_plan_it_came_from(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    with memory_place.open() as memory:
        first, _plan_id = memory.record_attempt(incident_id="i1", failure=failure,
                                                attempt=_attempt("healed", "service {init_service} start", verified=True))
        for replay in ("i2", "i3"):
            fix = memory.verified_fix(failure.fingerprint)
            assert fix is not None and fix.plan.rationale.endswith("(originally from runbook rb)")
            memory.record_attempt(incident_id=replay, failure=failure, attempt=dataclasses.replace(
                _attempt("healed", verified=True), plan=fix.plan))
        fix = memory.verified_fix(failure.fingerprint)
        assert fix is not None and fix.episode_id > first + 1
        assert fix.plan.rationale == f"verified fix from episode {fix.episode_id} (originally from runbook rb)"


def test_a_relapse_marks_the_heal_it_came_back_after_once_and_its_plan_replays_no_more(memory_place: MemoryPlace) -> None:
    failure, now = nginx_failure(), time.time()
    with memory_place.open() as memory:
        older, _plan_id = memory.record_attempt(incident_id="i0", failure=failure, attempt=_attempt(
            "healed", "service {init_service} start", verified=True, finished_at=now - 7200))
        heal, _plan_id = memory.record_attempt(incident_id="i1", failure=failure, attempt=_attempt(
            "healed", "service {init_service} start", verified=True, finished_at=now - 120))
        other, _plan_id = memory.record_attempt(incident_id="i2", failure=failure, attempt=_attempt(
            "healed", "rm -f {stale_pidfile}", "service {init_service} start", verified=True, finished_at=now - 3600))
        assert memory.verified_fix(failure.fingerprint).episode_id == heal  # type: ignore[union-attr]
        found = memory.last_heal("web1", "nginx", since=now - 900)
        assert found is not None and (found.episode_id, found.relapsed_from, found.relapsed_at) == (heal, None, None)
        assert found.commands == ("service '{init_service}' start",) and memory.last_heal("web1", "redis", since=now - 900) is None
        for started_at in (now, now + 5):  # the relapse's two attempts
            memory.record_attempt(incident_id="i3", failure=failure, relapsed_from=heal,
                                  attempt=dataclasses.replace(_attempt("failed", "service {init_service} restart"), started_at=started_at))
        relapsed = memory.heal(heal)
        assert relapsed is not None and relapsed.relapsed_at == now  # the first of the relapse's episodes says when
        assert [row["relapsed_from"] for row in memory.episodes(outcome="failed")] == [heal, heal]
        # the plan that relapsed is trusted no more, its older heal neither; another plan of the fingerprint still is
        fix = memory.verified_fix(failure.fingerprint)
        assert fix is not None and fix.episode_id == other and older < heal


def test_the_same_failure_with_another_pid_has_the_same_fingerprint() -> None:
    assert nginx_failure(pid=812).fingerprint == nginx_failure(pid=31337).fingerprint
    assert nginx_failure(pid=812).fingerprint != nginx_failure("not_running").fingerprint


def test_failed_plans_and_escalations_are_remembered_per_fingerprint_within_the_window(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    other = nginx_failure("not_running")
    now = time.time()
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="a", failure=failure, attempt=_attempt("failed", "service {init_service} restart", finished_at=now - 10))
        memory.record_attempt(incident_id="b", failure=failure, attempt=_attempt("failed", "old", finished_at=now - 5000))
        memory.record_attempt(incident_id="c", failure=failure, attempt=_attempt("healed", "service {init_service} start", finished_at=now - 20))
        memory.record_attempt(incident_id="d", failure=failure, attempt=_attempt("escalated", finished_at=now - 30))
        failed, escalated = memory.unhealed(failure.fingerprint, since=now - 60)
        assert (failed.outcome, failed.templates, failed.finished_at) == ("failed", ("service {init_service} restart",), now - 10)
        assert (escalated.outcome, escalated.templates) == ("escalated", ())
        # with the failure it ran on, whose facts tell later whether its cause still holds
        assert failed.evidence == failure.evidence
        assert memory.unhealed(other.fingerprint, since=0) == []


def test_an_episode_and_its_pending_plan_are_written_together_or_not_at_all(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    with memory_place.open() as memory:
        episode, plan_id = memory.record_attempt(
            incident_id="i", failure=failure, attempt=_attempt("awaiting_approval", "apt-get update"), pending=PENDING,
        )
        assert plan_id and memory.plan(plan_id)["episode_id"] == episode  # type: ignore[index]
        # Break the plans table so the second insert of the transaction fails: the episode must roll back too.
        for statement in REFUSE_PLANS[memory_place.backend]:
            memory_place.sql(statement)
        with pytest.raises(MemoryStoreError, match="disk full"):
            memory.record_attempt(incident_id="j", failure=failure, attempt=_attempt("awaiting_approval", "x"), pending=PENDING)
        assert [e["incident_id"] for e in memory.episodes()] == ["i"]


def test_an_unknown_outcome_is_refused_before_writing(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory, pytest.raises(MemoryStoreError) as caught:
        memory.record_attempt(incident_id="i", failure=nginx_failure(), attempt=_attempt("mostly-fine"))
    assert caught.value.field == "outcome" and caught.value.value == "mostly-fine"


def _writer(place: MemoryPlace, worker: int, count: int) -> None:
    with place.open() as memory:
        for n in range(count):
            memory.record_attempt(incident_id=f"w{worker}-{n}", failure=nginx_failure(host=f"h{worker}"), attempt=_attempt("failed", "x"))


def _open_at_once(place: MemoryPlace, barrier: Any, worker: int) -> None:
    barrier.wait()
    with place.open() as memory:
        memory.record_attempt(incident_id=f"first-{worker}", failure=nginx_failure(host=f"h{worker}"), attempt=_attempt("failed", "x"))


def test_many_processes_opening_a_new_memory_at_the_same_moment_all_succeed(memory_place: MemoryPlace, request: pytest.FixtureRequest,
                                                                            tmp_path: Path) -> None:
    """The forks of one play meet a fresh memory together: creating, switching to WAL and migrating must not fail any."""
    for round_number in range(3):
        place = _fresh(memory_place, request, tmp_path / f"round-{round_number}")
        context = multiprocessing.get_context("fork")
        barrier = context.Barrier(8)
        processes = [context.Process(target=_open_at_once, args=(place, barrier, w)) for w in range(8)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [process.exitcode for process in processes] == [0] * 8
        with place.open() as memory:
            assert len(memory.episodes()) == 8


def _fresh(memory_place: MemoryPlace, request: pytest.FixtureRequest, state_dir: Path) -> MemoryPlace:
    """Another new, empty memory of the same backend."""
    if memory_place.backend == "sqlite":
        return sqlite_place(state_dir)
    place = postgres_place(request.getfixturevalue("postgres"), state_dir)
    request.addfinalizer(lambda: drop(place))
    return place


def test_concurrent_processes_lose_no_episode(memory_place: MemoryPlace) -> None:
    workers, per_worker = 6, 40
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_writer, args=(memory_place, w, per_worker)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert memory_place.sql("SELECT count(*), count(DISTINCT incident_id) FROM episodes") == [(workers * per_worker,) * 2]


def _failure_with(summary: str, service: str = "nginx", failure_class: str = "not_running") -> Any:
    base = nginx_failure(failure_class)
    return type(base)(**{**base.__dict__, "summary": summary, "service": service})


def test_similar_errors_are_ranked_by_full_text_search_and_only_verified_fixes_of_the_same_service_count(memory_place: MemoryPlace) -> None:
    bind = _failure_with("nginx: [emerg] bind() to 0.0.0.0:80 failed (98: Address already in use)")
    bind_v6 = _failure_with("nginx: [emerg] bind() to [::]:8080 failed (98: Address already in use) while starting")
    disk = _failure_with("nginx: [crit] write() to /var/log/nginx/access.log failed (28: No space left on device)")
    other_service = _failure_with("redis: bind() failed Address already in use", service="redis")
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="a", failure=bind_v6, attempt=_attempt("healed", "kill -TERM {port_owner_pid}", verified=True))
        memory.record_attempt(incident_id="b", failure=disk, attempt=_attempt("healed", "truncate -s 0 /var/log/nginx/access.log", verified=True))
        memory.record_attempt(incident_id="c", failure=other_service, attempt=_attempt("healed", "service redis-server start", verified=True))
        memory.record_attempt(incident_id="d", failure=bind_v6, attempt=_attempt("failed", "service nginx restart"))
        similar = memory.similar_fixes(bind)
    assert [fix["steps"] for fix in similar] == [["kill -TERM {port_owner_pid}"], ["truncate -s 0 /var/log/nginx/access.log"]]


def test_search_ranks_episodes_by_their_error(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        for n, summary in enumerate(["postgres checkpoint too slow", "nginx bind address already in use", "redis oom"]):
            memory.record_attempt(incident_id=str(n), failure=_failure_with(summary), attempt=_attempt("failed", "x"))
        found = memory.search("Address already in use on port 80")
    assert found[0]["error_text"] == "nginx bind address already in use"


def test_prune_keeps_episodes_a_plan_refers_to_and_forget_removes_a_fingerprint(memory_place: MemoryPlace) -> None:
    old, new = time.time() - 100 * 86400, time.time()
    failure = nginx_failure()
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="old", failure=failure, attempt=_attempt("failed", "x", finished_at=old))
        memory.record_attempt(incident_id="old-waiting", failure=failure, attempt=_attempt("awaiting_approval", "y", finished_at=old),
                              pending=PENDING)
        memory.record_attempt(incident_id="new", failure=failure, attempt=_attempt("failed", "z", finished_at=new))
        assert memory.prune(before=time.time() - 30 * 86400) == 1
        assert {e["incident_id"] for e in memory.episodes()} == {"old-waiting", "new"}
        assert memory.forget(failure.fingerprint, dry_run=True) == 2 and len(memory.episodes()) == 2  # counted, kept
        assert memory.forget(failure.fingerprint) == 2
        assert memory.episodes() == [] and memory.plans(status=None) == []
        assert memory.search("nginx") == []  # the full-text index forgot them too


def test_a_database_of_an_older_schema_is_migrated_in_place(memory_place: MemoryPlace) -> None:
    first = (MIGRATIONS if memory_place.backend == "sqlite" else POSTGRES_MIGRATIONS)[0]
    _stamp(memory_place, 1, *statements(first), """INSERT INTO episodes (incident_id, attempt, host, service, fingerprint, failure_class,
           error_text, evidence_json, diagnosis, plan_json, verdicts_json, policy_version, results_json, outcome, verified, started_at,
           finished_at) VALUES ('i', 1, 'web1', 'nginx', 'fp', 'not_running', 'Address already in use', '{}', '', NULL, '[]', '', '{}',
           'failed', 0, 1, 2)""")
    with memory_place.open() as memory:
        assert memory.schema_version == len(MIGRATIONS)
        assert [e["incident_id"] for e in memory.search("address already in use")] == ["i"]


def test_check_mode_reads_an_existing_memory_and_never_creates_or_writes_one(memory_place: MemoryPlace) -> None:
    absent = memory_place.state_dir / "absent"
    assert Memory.for_check_mode(absent, url=memory_place.url, password=memory_place.password) is None  # none yet (or not migrated)
    assert not absent.exists()
    if memory_place.url:
        assert memory_place.sql("SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()") == [(0,)]
    failure = nginx_failure()
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="i", failure=failure, attempt=_attempt("healed", "service {init_service} start", verified=True))
    reader = Memory.for_check_mode(memory_place.state_dir, url=memory_place.url, password=memory_place.password)
    assert reader is not None
    with reader:
        assert reader.verified_fix(failure.fingerprint) is not None
        with pytest.raises(MemoryStoreError, match=r"read-?only"):
            reader.record_attempt(incident_id="j", failure=failure, attempt=_attempt("failed", "x"))


def test_the_flapping_count_is_remediations_of_the_service_on_the_host_since_the_window_or_a_reset(memory_place: MemoryPlace) -> None:
    now = time.time()
    with memory_place.open() as memory:
        for finished, outcome, host in ((now - 7200, "healed", "web1"), (now - 600, "failed", "web1"), (now - 300, "healed", "web1"),
                                        (now - 200, "awaiting_approval", "web1"), (now - 100, "healed", "web2")):
            memory.record_attempt(incident_id=f"i{finished}", failure=nginx_failure(host=host),
                                  attempt=_attempt(outcome, "service {init_service} start", finished_at=finished))
        counted = memory.remediations("web1", "nginx", since=now - 3600)
        # not the one before the window, not the plan that only waits, not the other host's
        assert [row["outcome"] for row in counted] == ["failed", "healed"]
        memory.reset_flapping("web1", "nginx", by="alice", at=now - 250)
        assert [row["outcome"] for row in memory.remediations("web1", "nginx", since=now - 3600)] == []
        assert len(memory.remediations("web2", "nginx", since=now - 3600)) == 1


def test_an_approved_plan_a_limit_held_back_before_any_step_waits_again(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    with memory_place.open() as memory:
        plan_id = _claimed_plan(memory, failure)
        memory.record_attempt(incident_id="i", failure=failure, attempt=_attempt("deferred", "service {init_service} start"),
                              executed_plan_id=plan_id)
        plan = memory.plan(plan_id)
        assert plan is not None and (plan["status"], plan["decided_by"]) == ("pending", None)
        # the kill switch thrown after a step ran: the plan was carried out, as far as it went
        assert memory.claim_plan(plan_id, by="bob", at=2.0)
        stopped = _attempt("suspended", "service {init_service} start")
        stopped.results = [StepResult(argv=("service", "nginx", "start"), status="ok", rc=0)]
        memory.record_attempt(incident_id="i", failure=failure, attempt=stopped, executed_plan_id=plan_id)
        assert (memory.plan(plan_id) or {})["status"] == "executed"


def test_a_writer_holding_the_memory_past_the_busy_timeout_gets_a_clear_error_and_nothing_is_half_written(memory_place: MemoryPlace) -> None:
    other = memory_place.open()
    other._db.begin()  # another job's long write
    with memory_place.open(busy_timeout_s=0.2) as memory:
        with pytest.raises(MemoryStoreError) as refused:
            memory.record_attempt(incident_id="i", failure=nginx_failure(), attempt=_attempt("healed", "service {init_service} start"))
        message = str(refused.value)
        said = {"sqlite": "database is locked", "postgresql": "canceling statement due to lock timeout"}[memory_place.backend]
        assert f"cannot write to the memory ({said}); nothing was written" in message
        find = {"sqlite": f"fuser {memory_place.where}", "postgresql": "SELECT pid, state, query FROM pg_stat_activity"}[memory_place.backend]
        assert f"another process held the memory's write lock for more than 0.2 s: find it ({find}" in message
        other._db.commit()
        assert memory.episodes() == []
        memory.record_attempt(incident_id="i", failure=nginx_failure(), attempt=_attempt("healed", "service {init_service} start"))
        assert len(memory.episodes()) == 1 and _intact(memory_place)
    other.close()
