"""Memory for a cluster: two "nodes" (controllers, AWX execution nodes: each a state dir of its own, its own processes)
share one PostgreSQL database. What one writes the other sees, at once and without loss; a plan stored by one is approved
by the other; of concurrent approvals of one plan, one runs it."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from memory_places import MemoryPlace, drop, postgres_place
from postgres_server import PostgresServer

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident, run_approved_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure

# nginx's configuration test runs; any remediation waits for a person (as in test_approvals.py)
STRICT = "version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n"
REFUSED = 3  # the exit code of an approval that found the plan already claimed


@pytest.fixture
def cluster(postgres: PostgresServer, tmp_path: Path) -> Iterator[MemoryPlace]:
    """One database (a schema of its own on the test server); ``cluster.node(name)`` is a controller with its state dir."""
    (tmp_path / "state").mkdir()
    place = postgres_place(postgres, tmp_path / "state")
    yield place
    drop(place)


def _record(place: MemoryPlace, node: str, worker: int, count: int, barrier: Any) -> None:
    barrier.wait()
    with place.node(node).open() as memory:
        for n in range(count):
            memory.record_attempt(incident_id=f"{node}-{worker}-{n}", failure=nginx_failure(host=f"{node}-web{worker}"),
                                  attempt=Attempt(number=1, outcome="failed", started_at=time.time(), finished_at=time.time()), run_id=node)


def test_two_nodes_record_episodes_at_the_same_time_without_loss(cluster: MemoryPlace) -> None:
    nodes, workers, per_worker = ("node-a", "node-b"), 3, 30
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(nodes) * workers)
    processes = [context.Process(target=_record, args=(cluster, node, worker, per_worker, barrier)) for node in nodes for worker in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0] * len(processes)
    total = len(nodes) * workers * per_worker
    assert cluster.sql("SELECT count(*), count(DISTINCT incident_id), count(DISTINCT id) FROM episodes") == [(total, total, total)]
    with cluster.node("node-a").open() as memory:  # each node sees the other's episodes
        assert {row["run_id"] for row in memory.episodes(limit=total)} == set(nodes)
    for node in nodes:
        assert not (cluster.node(node).state_dir / MEMORY_FILE).exists()  # no SQLite memory of its own


def _store_a_waiting_plan(node: MemoryPlace) -> tuple[str, Path]:
    """The heal job on one node: the policy allows none of the steps, so the plan waits for a person."""
    policy_file = node.state_dir / "strict.yml"
    policy_file.write_text(STRICT)
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(node.state_dir, executor, [], policy=load_policy(policy_file), memory=node.open())
    outcome = heal_incident(nginx_failure(), tools)
    assert outcome.state.status == "awaiting_approval" and outcome.state.plan_id is not None and executor.remediations == []
    return outcome.state.plan_id, policy_file


def test_a_plan_stored_by_one_node_is_approved_and_run_by_the_other(cluster: MemoryPlace) -> None:
    plan_id, policy_file = _store_a_waiting_plan(cluster.node("node-a"))
    node_b = cluster.node("node-b")
    executor = ScriptedExecutor(CONFIG_OK)
    tools = _tools(node_b.state_dir, executor, [HEALTHY], policy=load_policy(policy_file), memory=node_b.open())
    assert tools.memory is not None
    stored = approvals.load(tools.memory, plan_id)
    verdicts = approvals.authorize(stored, host="web1", policy=tools.policy)
    assert tools.memory.claim_plan(plan_id, by="alice", at=time.time())
    outcome = run_approved_plan(stored, verdicts, "alice", tools)
    assert outcome.trace.path == ["rollout", "execute", "verify", "record", "healed"]
    assert executor.remediations == [[("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]]
    with cluster.node("node-a").open() as node_a:  # the node that stored it sees it carried out
        row = node_a.plan(plan_id)
        assert row is not None and (row["status"], row["decided_by"]) == ("executed", "alice")
        episode = node_a.episode(row["executed_episode_id"])
        assert episode is not None and (episode["outcome"], episode["approved_by"]) == ("healed", "alice")


def _approve(place: MemoryPlace, node: str, plan_id: str, policy_file: str, barrier: Any, ran: str) -> None:
    """One approve job on one node: checks the plan, waits for the others, claims it and, if it won, runs it."""
    me = place.node(node)
    memory = me.open()
    stored = approvals.load(memory, plan_id)
    policy = load_policy(policy_file)
    verdicts = approvals.authorize(stored, host="web1", policy=policy)
    barrier.wait()
    if not memory.claim_plan(plan_id, by=node, at=time.time()):
        raise SystemExit(REFUSED)
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = run_approved_plan(stored, verdicts, node, _tools(me.state_dir, executor, [HEALTHY], policy=policy, memory=memory))
    Path(ran, node).write_text(json.dumps({"path": outcome.trace.path, "remediations": executor.remediations}))


def test_concurrent_approvals_of_one_plan_on_several_nodes_run_it_once(cluster: MemoryPlace, tmp_path: Path) -> None:
    plan_id, policy_file = _store_a_waiting_plan(cluster.node("node-a"))
    ran = tmp_path / "ran"
    ran.mkdir()
    nodes = [f"node-{n}" for n in range(6)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(nodes))
    processes = [context.Process(target=_approve, args=(cluster, node, plan_id, str(policy_file), barrier, str(ran))) for node in nodes]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert sorted(process.exitcode or 0 for process in processes) == [0] + [REFUSED] * (len(nodes) - 1)
    [winner] = [path.name for path in ran.iterdir()]
    assert json.loads((ran / winner).read_text()) == {
        "path": ["rollout", "execute", "verify", "record", "healed"],
        "remediations": [[["rm", "-f", "/run/nginx.pid"], ["service", "nginx", "start"]]],
    }
    assert cluster.sql("SELECT status, decided_by FROM plans WHERE plan_id = ?", (plan_id,)) == [("executed", winner)]
    assert cluster.sql("SELECT count(*) FROM episodes WHERE approved_by IS NOT NULL") == [(1,)]
