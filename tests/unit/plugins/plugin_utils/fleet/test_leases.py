"""Leases: the heartbeat that keeps one held and when one ends, on their own; and in a real memory (SQLite and
PostgreSQL) the caps they hold a run to, their renewals, and the interrupted episode of one whose job died."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

from memory_cases import _claimed_plan, _intact
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import steps_started
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import (
    LEASE_GRACE_S,
    LEASE_RENEW_DEADLINE_S,
    LEASE_RENEW_S,
    LEASE_RETRY_S,
    BlastRadius,
    Heartbeat,
    HeldLease,
    LeaseRefusal,
    LeaseRequest,
    Leases,
    Renewal,
    lease_ended,
    owner_is_gone,
    process_owner,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import nginx_failure


def _beating(answers: Iterator[Renewal]) -> tuple[Heartbeat, list[float], Callable[[int], list[str | None]]]:
    """A heartbeat whose renewals the memory answers with ``answers`` in turn, polled once a second from 100."""
    now = [100.0]
    renewals: list[float] = []

    def renew(at: float) -> Renewal:
        renewals.append(at)
        return next(answers)

    beat = Heartbeat(renew, lambda: now[0], since=100.0)

    def poll(seconds: int) -> list[str | None]:
        said = []
        for _second in range(seconds):
            now[0] += 1.0
            said.append(beat())
        return said

    return beat, renewals, poll


def test_a_heartbeat_polled_every_second_writes_the_lease_at_most_every_renewal_period() -> None:
    _beat, renewals, poll = _beating(iter(lambda: Renewal.RENEWED, None))
    assert set(poll(int(LEASE_RENEW_S * 3))) == {None}
    assert renewals == [100.0 + LEASE_RENEW_S, 100.0 + 2 * LEASE_RENEW_S, 100.0 + 3 * LEASE_RENEW_S]


def test_a_lease_another_job_took_back_is_lost_at_once_and_stays_lost() -> None:
    beat, renewals, poll = _beating(iter([Renewal.RENEWED, Renewal.LOST]))
    said = poll(int(LEASE_RENEW_S * 2))
    assert said[-1] == "another job found its lease ended and recorded this remediation as interrupted"
    assert said[:-1] == [None] * (len(said) - 1)
    assert poll(int(LEASE_RENEW_S * 2)) == [beat.lost] * int(LEASE_RENEW_S * 2) and len(renewals) == 2  # never renewed again


def test_renewals_the_memory_does_not_take_are_retried_and_the_holder_gives_up_before_anyone_may_take_its_lease() -> None:
    beat, renewals, poll = _beating(iter(lambda: Renewal.NOT_WRITTEN, None))
    said = poll(int(LEASE_GRACE_S))
    first_lost = said.index(beat.lost)
    assert first_lost + 1 == int(LEASE_RENEW_DEADLINE_S) + 1 < LEASE_GRACE_S  # the holder stops first, by a whole period
    assert beat.lost == (f"the memory took no renewal of its lease for {LEASE_RENEW_DEADLINE_S + 1:.0f} s, and another job may "
                         f"take the lease up {LEASE_GRACE_S:.0f} s after the last one")
    tried = [at - 100.0 for at in renewals]
    assert tried[:3] == [LEASE_RENEW_S, LEASE_RENEW_S + LEASE_RETRY_S, LEASE_RENEW_S + 2 * LEASE_RETRY_S]


def test_a_renewal_taken_after_some_were_not_holds_the_lease_again() -> None:
    _beat, renewals, poll = _beating(iter([Renewal.NOT_WRITTEN, Renewal.NOT_WRITTEN, *[Renewal.RENEWED] * 10]))
    assert set(poll(int(LEASE_GRACE_S * 2))) == {None}
    tried = [at - 100.0 for at in renewals]
    assert tried[:4] == [LEASE_RENEW_S, LEASE_RENEW_S + LEASE_RETRY_S, LEASE_RENEW_S + 2 * LEASE_RETRY_S, 2 * LEASE_RENEW_S + 2 * LEASE_RETRY_S]


def test_a_lease_ends_when_its_owner_is_gone_its_renewals_stop_or_its_expiry_passes() -> None:
    elsewhere = "exec-b/17/4242"  # a process of another machine: its heartbeat alone tells
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=elsewhere, at=100.0 + LEASE_GRACE_S) is None
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=elsewhere, at=100.0 + LEASE_GRACE_S + 5) == (
        f"its job stopped renewing its lease ({LEASE_GRACE_S + 5:.0f} s ago)")
    assert lease_ended(expires_at=1000.0, renewed_at=None, owner=elsewhere, at=999.0) is None
    assert lease_ended(expires_at=1000.0, renewed_at=None, owner=elsewhere, at=1001.0) == "its lease expired"
    assert lease_ended(expires_at=1000.0, renewed_at=990.0, owner=process_owner(), at=1001.0) == "its lease expired"
    gone = process_owner().rsplit("/", 1)[0] + "/0"  # this machine, this pid, another start time: the pid was reused
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=gone, at=101.0) == "its job ended"


RUNNING = Attempt(number=1, diagnosis="d", started_at=99.0, policy_version="v1", plan=Plan(
    source=PlanSource.RUNBOOK, reference="rb", rationale="r",
    steps=(Step(template="service {init_service} start", argv=("service", "nginx", "start")),
           Step(template="service {init_service} status", argv=("service", "nginx", "status")))))


def _lease(memory: Memory, run_id: str, host: str, service: str = "nginx", *, at: float, ttl: float = 60, owner: str | None = None,
           executed_plan_id: str | None = None, relapsed_from: int | None = None, **caps: int) -> tuple[HeldLease | None, str]:
    failure = dataclasses.replace(nginx_failure(host=host), service=service)
    granted = Leases(memory.database).acquire_lease(LeaseRequest(
        radius=BlastRadius(run_id=run_id, **caps), incident_id=f"incident-{host}-{service}", failure=failure,
        attempt=RUNNING, at=at, ttl=ttl,
        owner=owner or process_owner(), steps_started=steps_started, executed_plan_id=executed_plan_id, relapsed_from=relapsed_from,
    ))
    return (None, granted.why) if isinstance(granted, LeaseRefusal) else (granted, "")


def _gone_owner() -> str:
    """The owner of a lease whose process has ended (a real process, started and waited for)."""
    with subprocess.Popen(["sleep", "30"]) as child:
        owner = process_owner(child.pid)
        child.kill()
    return owner


def test_leases_cap_remediations_at_once_and_hosts_and_attempts_per_run_and_expire(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory, memory_place.open() as other_job:
        first, why = _lease(memory, "r1", "web1", at=100.0, max_running=1)
        assert first is not None and why == ""
        refused, why = _lease(other_job, "r2", "web2", at=110.0, max_running=1)
        assert refused is None and why == "1 remediations are running (the cap on remediations at the same time is 1)"
        # an expired lease (its owner on another controller, say) frees its slot, recorded as interrupted
        after_expiry, _why = _lease(other_job, "r2", "web2", at=161.0, max_running=1)
        assert after_expiry is not None
        assert [e["outcome"] for e in memory.episodes(host="web1")] == ["interrupted"]
        Leases(other_job.database).release_lease(after_expiry)
        # per run: the same host again is fine, a second host is not
        again, _why = _lease(memory, "r1", "web1", "redis", at=170.0, max_hosts_per_run=1)
        assert again is not None
        Leases(memory.database).release_lease(again)
        second_host, why = _lease(memory, "r1", "web3", at=171.0, max_hosts_per_run=1)
        assert second_host is None and why == "this run already remediated 1 hosts (the cap per run is 1)"
        # the budget counts every attempt of the run (web1 twice, so far), whatever the host
        within, _why = _lease(memory, "r1", "web3", at=172.0, max_attempts_per_run=3)
        assert within is not None
        Leases(memory.database).release_lease(within)
        spent, why = _lease(memory, "r1", "web4", at=173.0, max_attempts_per_run=3)
        assert spent is None and why == "this run already made 3 remediation attempts (its budget is 3)"
        assert _lease(memory, "another-run", "web4", at=174.0, max_attempts_per_run=3)[0] is not None
        # never two remediations of one service on one host at once, whatever the caps
        busy, why = _lease(other_job, "r3", "web4", at=175.0)
        assert busy is None and why == "a remediation of nginx on web4 by another run (another-run) is running"


def test_a_lease_whose_job_died_becomes_an_interrupted_episode_with_what_had_started(memory_place: MemoryPlace) -> None:
    run_dir = memory_place.state_dir / "runs" / "web1" / "run-1"
    events = run_dir / "artifacts" / "run" / "job_events"
    events.mkdir(parents=True)
    # what ansible-runner had written when the job died: step 1 done, step 2 started
    for number, (event, task, res) in enumerate([("runner_on_start", "step 1", None), ("runner_on_ok", "step 1", {"rc": 0, "stdout": "ok"}),
                                                 ("runner_on_start", "step 2", None)], start=1):
        data = {"host": "web1", "task": task, **({"res": res} if res else {})}
        (events / f"{number}-x.json").write_text(json.dumps({"event": event, "event_data": data}))
    (events / "4-partial.json").write_text('{"event": "runner_on_ok", "event_da')
    with memory_place.open() as memory:
        # the incident is a relapse of an earlier heal: its interrupted episode names that heal, as any of its episodes
        healed, _plan = memory.record_attempt(incident_id="earlier", failure=nginx_failure(), attempt=Attempt(
            number=1, plan=RUNNING.plan, outcome="healed", verified=True, started_at=40.0, finished_at=50.0))
        alive, _why = _lease(memory, "r1", "web2", at=100.0, ttl=3600)
        dead, _why = _lease(memory, "r1", "web1", at=100.0, ttl=3600, owner=_gone_owner(), relapsed_from=healed)
        assert dead is not None and alive is not None
        Leases(memory.database).lease_run(dead, str(run_dir))
        assert Leases(memory.database).reap_interrupted(at=101.0, host="web2", steps_started=steps_started) == []  # its owner (this process) runs
        reaped = Leases(memory.database).reap_interrupted(at=101.0, steps_started=steps_started)
        assert [(r["host"], r["started"]) for r in reaped] == [("web1", ["service nginx start", "service nginx status"])]
        episode = memory.episode(reaped[0]["episode"])
        assert episode is not None
        assert (episode["outcome"], episode["incident_id"], episode["started_at"]) == ("interrupted", "incident-web1-nginx", 99.0)
        assert episode["relapsed_from"] == healed and (memory.episode(healed) or {})["relapsed_at"] == 99.0
        steps = json.loads(episode["results_json"])["steps"]
        assert [(step["status"], step["rc"]) for step in steps] == [("ok", 0), ("interrupted", None)]
        assert str(run_dir) in json.loads(episode["results_json"])["artifacts"]
        assert Leases(memory.database).reap_interrupted(at=102.0, steps_started=steps_started) == []  # once
        # it ran something: it counts against the flapping limit
        assert [row["outcome"] for row in memory.remediations("web1", "nginx", since=60.0)] == ["interrupted"]
        assert _intact(memory_place)


def test_a_lease_held_on_another_node_lives_while_renewed_and_is_interrupted_once_its_renewals_stop(memory_place: MemoryPlace) -> None:
    # the owner is a worker in a container of its own: no process of this machine, so only its heartbeat tells
    elsewhere = "exec-b/17/4242"
    with memory_place.open() as memory, memory_place.open() as next_job:
        held, _why = _lease(memory, "r1", "web1", at=100.0, ttl=3600, owner=elsewhere)
        assert held is not None
        assert Leases(memory.database).renew_lease(held, 150.0) is Renewal.RENEWED
        assert Leases(next_job.database).reap_interrupted(at=200.0, steps_started=steps_started) == []  # renewed 50 s ago
        busy, why = _lease(next_job, "r2", "web1", at=200.0, owner=elsewhere)
        assert busy is None and "by another run (r1) is running" in why
        [reaped] = Leases(next_job.database).reap_interrupted(at=150.0 + LEASE_GRACE_S + 1, steps_started=steps_started)
        assert reaped["host"] == "web1" and reaped["summary"] == (
            "interrupted: its job stopped renewing its lease (61 s ago) during the remediation; no step had started")
        assert (next_job.episode(reaped["episode"]) or {})["outcome"] == "interrupted"
        taken, _why = _lease(next_job, "r2", "web1", at=212.0, owner="exec-c/23/777")
        assert taken is not None
        # the lost job's late beat renews nothing it no longer holds, not even a lease given its row's id again, and
        # tells it so: its run stops; its release frees nothing either
        assert Leases(memory.database).renew_lease(held, 213.0) is Renewal.LOST
        Leases(memory.database).release_lease(held)
        assert memory_place.sql("SELECT owner, renewed_at FROM leases") == [("exec-c/23/777", 212.0)]


def test_a_lease_of_a_job_on_another_node_says_what_it_had_started_is_not_known_here(memory_place: MemoryPlace, tmp_path: Path) -> None:
    with memory_place.open() as memory:
        held, _why = _lease(memory, "r1", "web1", at=100.0, ttl=3600, owner="exec-b/17/4242")
        assert held is not None
        Leases(memory.database).lease_run(held, str(tmp_path / "on-exec-b" / "runs" / "web1"))  # the node's own disk, not this controller's
        [reaped] = Leases(memory.database).reap_interrupted(at=100.0 + LEASE_GRACE_S + 1, steps_started=steps_started)
        assert reaped["started"] == [] and reaped["summary"] == (
            "interrupted: its job stopped renewing its lease (61 s ago) during the remediation; what it had started is not known on this "
            "controller (its run's directory is on the one it ran on)")
        steps = json.loads((memory.episode(reaped["episode"]) or {})["results_json"])["steps"]
        assert steps and {step["status"] for step in steps} == {"unknown"}


def test_a_renewal_the_memory_cannot_take_now_is_not_written_and_the_lease_is_still_held(memory_place: MemoryPlace) -> None:
    with memory_place.open(busy_timeout_s=0.2) as memory, memory_place.open() as writer:
        held, _why = _lease(memory, "r1", "web1", at=100.0, ttl=3600, owner="exec-b/17/4242")
        assert held is not None
        with writer._transaction() as db:  # another writer holds the lease's row past the busy timeout
            db.execute("UPDATE leases SET renewed_at = ? WHERE id = ?", (110.0, held.id))
            assert Leases(memory.database).renew_lease(held, 115.0) is Renewal.NOT_WRITTEN
        assert Leases(memory.database).renew_lease(held, 130.0) is Renewal.RENEWED
        assert memory_place.sql("SELECT renewed_at FROM leases WHERE id = ?", (held.id,)) == [(130.0,)]


def test_a_lease_never_renewed_ends_by_its_expiry_alone(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        held, _why = _lease(memory, "r1", "web1", at=100.0, ttl=3600, owner="exec-b/17/4242")
        assert held is not None
        memory_place.sql("UPDATE leases SET renewed_at = NULL WHERE id = ?", (held.id,))  # as a lease of an older version
        assert Leases(memory.database).reap_interrupted(at=100.0 + LEASE_GRACE_S * 10, steps_started=steps_started) == []
        [reaped] = Leases(memory.database).reap_interrupted(at=3701.0, steps_started=steps_started)
        assert reaped["summary"].startswith("interrupted: its lease expired during the remediation")


def test_an_approved_plan_whose_job_died_mid_run_never_runs_again_by_itself(memory_place: MemoryPlace) -> None:
    failure = nginx_failure()
    with memory_place.open() as memory:
        plan_id = _claimed_plan(memory, failure)
        _lease(memory, "r1", "web1", at=100.0, owner=_gone_owner(), executed_plan_id=plan_id)
        [reaped] = Leases(memory.database).reap_interrupted(at=101.0, host="web1", steps_started=steps_started)
        assert reaped["started"] == []  # the run had not begun: nothing started
        plan = memory.plan(plan_id)
        assert plan is not None and (plan["status"], plan["executed_episode_id"]) == ("executed", reaped["episode"])
        assert not memory.claim_plan(plan_id, by="bob", at=2.0)


def test_an_owner_that_ended_is_gone_even_before_it_was_waited_for() -> None:
    with subprocess.Popen(["sleep", "0.2"]) as child:
        owner = process_owner(child.pid)
        assert not owner_is_gone(owner) and not owner_is_gone(process_owner())
        deadline = time.monotonic() + 30
        while not owner_is_gone(owner) and time.monotonic() < deadline:  # until it has exited; nobody waits for it: a zombie
            time.sleep(0.1)
        assert owner_is_gone(owner) and child.poll() is not None
    assert owner_is_gone(owner) and not owner_is_gone(f"another-controller/{child.pid}/1")
