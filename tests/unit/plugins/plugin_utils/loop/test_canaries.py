"""The heal graph and the rollout of a new plan: its canary first, the other hosts once it verified there, a canary
taken over when its job died, and a run that halts past its error threshold.

The planner, policy, runbooks and memory are the real ones; the executor and the verifier are scripted here because
these tests are about routing. The real executor runs in tests/integration.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import BlastRadius, process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import Canaries, Canary, CanaryKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.rollout import CANARY_POLL_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure


def _generic_fleet(tmp_path: Path, executor: ScriptedExecutor, verdicts: list[Mapping[str, Any]], **overrides: Any) -> Toolkit:
    """Hosts of one run where no runbook matches: the generic plan is new, so it needs a canary."""
    tools = _tools(tmp_path, executor, verdicts, blast_radius=BlastRadius(run_id="run-1", **overrides))
    tools.planner = Planner(RunbookLibrary.load(builtin=False), tools.memory)
    return tools


def _on(tools: Toolkit, host: str, **changes: Any) -> Toolkit:
    return dataclasses.replace(tools, target=Target(name=host, host_vars={}), **changes)


def _canary_of(tools: Toolkit, host: str) -> CanaryKey:
    plan = tools.planner.plan(nginx_failure("not_running", host=host), Diagnosis("x", None, {}), frozenset(), None)
    key = CanaryKey.of("run-1", nginx_failure("not_running", host=host), plan)
    assert key is not None
    return key


def test_a_new_plan_runs_on_its_canary_first_and_once_verified_there_on_the_other_hosts(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY, HEALTHY])
    first = heal_incident(nginx_failure("not_running", host="web1"), _on(tools, "web1"))
    assert first.trace.path == ["diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "healed"]
    assert "tried here first, the canary of this run" in " ".join(line["message"] for line in first.state.timeline)
    # planned once it verified: memory holds it now, and a verified plan needs no canary
    second = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2"))
    assert second.state.status == "healed" and second.to_dict()["plan"]["source"] == "memory"
    assert not any(line["node"] == "rollout" for line in second.state.timeline)
    assert executor.remediations == [[("service", "nginx", "restart")]] * 2
    # the canary ran at once, by itself (the others wait for its verdict, none would join its run); the proven plan did not
    assert executor.alone == [True, False]


@pytest.mark.parametrize(("canary_outcome", "status", "ran"), [("failed", "deferred", False), ("healed", "healed", True)])
def test_a_host_waits_for_the_canary_of_a_new_plan_and_runs_it_only_if_it_verified(
    tmp_path: Path, canary_outcome: str, status: str, ran: bool,
) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    assert Canaries(tools.memory.database).claim_canary(key, host="web1", owner=process_owner(), at=time.time()).host == "web1"  # another fork has it
    waits: list[float] = []
    now = [time.time()]

    def canary_settles(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        if len(waits) == 12 and tools.memory is not None:  # web1's fork records its attempt while web2 waits
            plan = tools.planner.plan(nginx_failure("not_running", host="web1"), Diagnosis("x", None, {}), frozenset(), None)
            episode_id, _plan_id = tools.memory.record_attempt(incident_id="web1", failure=nginx_failure("not_running", host="web1"),
                                                               run_id="run-1", attempt=Attempt(number=1, plan=plan, outcome=canary_outcome))
            Canaries(tools.memory.database).settle_canary(key, host="web1", outcome=canary_outcome, episode_id=episode_id)

    outcome = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2", sleep=canary_settles, clock=lambda: now[0]))
    assert outcome.state.status == status and waits == [CANARY_POLL_S] * 12
    assert executor.remediations == ([[("service", "nginx", "restart")]] if ran else [])
    assert executor.alone == ([False] if ran else [])
    if ran:
        assert "verified on web1 first in this run (3 s waited)" in " ".join(line["message"] for line in outcome.state.timeline)
    else:
        assert outcome.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "deferred"]
        assert "failed verification on web1, the first host to try it in this run; it runs on no other host" in outcome.state.reason


def test_a_canary_freed_while_a_host_waits_is_taken_over_by_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    Canaries(tools.memory.database).claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    waits: list[float] = []

    def canary_gives_up(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2 and tools.memory is not None:  # web1's attempt ended without running (its host went away)
            plan = tools.planner.plan(nginx_failure("not_running", host="web1"), Diagnosis("x", None, {}), frozenset(), None)
            episode_id, _plan_id = tools.memory.record_attempt(incident_id="web1", failure=nginx_failure("not_running", host="web1"),
                                                               run_id="run-1", attempt=Attempt(number=1, plan=plan, outcome="unreachable"))
            Canaries(tools.memory.database).settle_canary(key, host="web1", outcome="unreachable", episode_id=episode_id)

    outcome = heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2", sleep=canary_gives_up))
    assert outcome.state.status == "healed" and len(waits) == 2
    assert "tried here first, the canary of this run" in " ".join(line["message"] for line in outcome.state.timeline)
    assert executor.alone == [True]


def test_a_host_waiting_for_a_canary_reads_it_while_another_fork_holds_the_memorys_write_lock(tmp_path: Path) -> None:
    tools = _generic_fleet(tmp_path, ScriptedExecutor(), [HEALTHY])
    assert tools.memory is not None and tools.memory.path is not None
    key = _canary_of(tools, "web1")
    Canaries(tools.memory.database).claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    writer = sqlite3.connect(tools.memory.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another fork records its episode
    try:
        began = time.monotonic()
        canary = Canaries(tools.memory.database).canary(key, host="web2", owner=process_owner(), at=time.time())
        assert canary == Canary(host="web1", outcome="running")
        assert time.monotonic() - began < 1  # a claim would wait for the lock (the memory's busy timeout)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_the_canary_of_a_job_that_died_is_taken_over_and_one_never_verified_in_time_defers(tmp_path: Path) -> None:
    executor = ScriptedExecutor()
    tools = _generic_fleet(tmp_path, executor, [HEALTHY])
    assert tools.memory is not None
    key = _canary_of(tools, "web1")
    dead = f"{process_owner().split('/')[0]}/999999999/0"
    Canaries(tools.memory.database).claim_canary(key, host="web1", owner=dead, at=time.time())
    assert heal_incident(nginx_failure("not_running", host="web2"), _on(tools, "web2")).state.status == "healed"
    assert executor.remediations == [[("service", "nginx", "restart")]]

    tools = _generic_fleet(tmp_path / "slow", ScriptedExecutor(), [HEALTHY])
    assert tools.memory is not None
    Canaries(tools.memory.database).claim_canary(key, host="web1", owner=process_owner(), at=time.time())
    now = [1000.0]
    waiting = _on(tools, "web2", clock=lambda: now[0], sleep=lambda seconds: now.__setitem__(0, now[0] + seconds), incident_timeout=60)
    outcome = heal_incident(nginx_failure("not_running", host="web2"), waiting)
    assert outcome.state.status == "deferred" and "tried on web1 first, and had not verified there before the incident's deadline" \
        in outcome.state.reason
    assert tools.memory.episodes(host="web2")[0]["outcome"] == "deferred"


def test_a_run_past_its_error_threshold_halts_and_nothing_more_runs_in_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    # each host tries the same plan (the others' failures of it not held against it)
    tools = _tools(tmp_path, executor, [HEALTHY] + [STILL_DOWN] * 2 + [HEALTHY],
                   blast_radius=BlastRadius(run_id="run-1", max_fail_percentage=25, run_hosts=4), max_attempts=1, failed_plan_ttl=-10)
    assert heal_incident(nginx_failure(host="web0"), _on(tools, "web0")).state.status == "healed"  # a heal is no failure
    for host in ("web1", "web2"):  # 1 of 4 failed: 25%, not more than the threshold, so web2 runs
        assert heal_incident(nginx_failure(host=host), _on(tools, host)).state.status == "escalated"
    halted = heal_incident(nginx_failure(host="web3"), _on(tools, "web3"))
    assert halted.trace.path == ["diagnose", "plan", "guard", "rollout", "record", "halted"]
    assert halted.state.status == "halted"
    assert ("remediations failed verification on 2 of the 4 hosts of this run (50%: web1, web2), more than max_fail_percentage 25%"
            in halted.state.reason)
    assert len(executor.remediations) == 3
    assert tools.memory is not None and [row["outcome"] for row in tools.memory.episodes(host="web3")] == ["halted"]
    # another run starts afresh
    other = _on(tools, "web3", blast_radius=BlastRadius(run_id="run-2", max_fail_percentage=25, run_hosts=4))
    assert heal_incident(nginx_failure(host="web3"), other).state.status == "healed"
