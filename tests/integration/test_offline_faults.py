"""More realistic faults, healed by the offline planner (memory + runbooks, no LLM) through
`ansible-playbook playbooks/heal.yml` with the default policy: the plan from the fault's own runbook,
every step ALLOWed (or, where it removes logs, approved by a person with playbooks/approve.yml), the
recovery checked on the host independently of sentinel.heal, and the fault undone afterwards."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import Faults, acted, episodes, evidence_read, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"


def heal_with_runbook(host: str, runbook: str, tmp_path: Path) -> dict[str, Any]:
    """Run heal.yml on the host; returns the one episode of the run, which must be healed, verified,
    planned by the runbook and have every step allowed."""
    run = run_playbook(HEAL, "--limit", host, state_dir=tmp_path)
    assert run.rc == 0 and run.recap[host]["changed"] == 1, run.output
    assert f"[plan from runbook {runbook}]" in one_line(run.output)
    [episode] = episodes(tmp_path)
    assert (episode["outcome"], episode["verified"]) == ("healed", 1), episode
    assert (episode["plan_source"], episode["plan_reference"]) == ("runbook", runbook)
    assert episode["verdicts"] and all(v["decision"] == "allow" for v in episode["verdicts"]), episode["verdicts"]
    assert all(step["status"] == "ok" for step in episode["results"]["steps"]), episode["results"]
    return episode


def undo_and_check_clean(lab: Any, faults: Faults, host: str) -> None:
    """Undo the fault (it is idempotent, the fixture undoes it again) and check the host is as the lab made it."""
    faults.undo_all()
    [state] = [s for s in lab.status() if s.name == host]
    assert state.up and state.problems == (), state
    assert "lab-redis-logs" not in sh(lab, host, "cat", "/proc/mounts")


def redis_answers(lab: Any, host: str) -> bool:
    return sh(lab, host, "redis-cli", "ping").strip() == "PONG"


def test_redis_orphaned_by_a_removed_run_dir_is_stopped_by_pid_and_restarted(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """On the sysv host: its init script finds redis through the pid file under /run/redis. systemd tracks a unit's
    processes by their cgroup, so on a systemd host redis stays active and healthy without /run/redis (no fault)."""
    faults.inject("node3", "redis-rundir-gone")
    orphan = sh(lab, "node3", "pgrep", "-x", "redis-server").strip()
    # what an operator sees: redis answers, but its init script says it is not running
    assert "redis-server is not running" in sh(lab, "node3", "service", "redis-server", "status")
    assert redis_answers(lab, "node3")
    assert "No such file or directory" in sh(lab, "node3", "ls", "-ld", "/run/redis")

    episode = heal_with_runbook("node3", "redis-runtime-dir-missing", tmp_path)
    assert "/run/redis does not exist" in episode["error_text"]
    assert f"port 6379/tcp is held by redis-server (pid {orphan})" in episode["error_text"]
    assert [step["argv"] for step in episode["plan"]["steps"]] == [["kill", "-TERM", orphan], ["service", "redis-server", "restart"]]
    # the orphan is redis's own process: stopping it is a stop of the service, which the restart after it undoes
    assert [v["rule"] for v in episode["verdicts"]] == ["signal-own-process", "service-control"]

    # checked on the host: one redis, started by its init script, in its pid file, answering
    assert "redis-server is running" in sh(lab, "node3", "service", "redis-server", "status")
    assert redis_answers(lab, "node3")
    pid = sh(lab, "node3", "cat", "/run/redis/redis-server.pid").strip()
    assert sh(lab, "node3", "pgrep", "-x", "redis-server").split() == [pid] and pid != orphan
    assert sh(lab, "node3", "stat", "-c", "%U:%G", "/run/redis").strip() == "redis:redis"
    undo_and_check_clean(lab, faults, "node3")


def test_a_full_redis_log_partition_waits_for_a_person_who_approves_removing_rotated_logs(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """On a systemd host: redis's Restart=always has already run into the unit's start limit, so the approved plan resets
    the unit before it starts it."""
    faults.inject("node2", "redis-log-disk-full")
    # what an operator sees: redis is down, and its log partition has neither space nor inodes left
    assert "Connection refused" in sh(lab, "node2", "redis-cli", "ping")
    df_lines = sh(lab, "node2", "df", "-P", "/var/log/redis").splitlines() + sh(lab, "node2", "df", "-Pi", "/var/log/redis").splitlines()
    assert [line.split()[4] for line in df_lines if line.startswith("lab-redis-logs")] == ["100%", "100%"]
    data_before = sh(lab, "node2", "ls", "-ln", "/var/lib/redis")
    logs_before = sh(lab, "node2", "ls", "/var/log/redis")

    # removing logs is a decision about evidence: the runbook's plan waits, and nothing ran
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    assert run.rc == 0 and "awaits approval of plan" in run.output, run.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", run.output)
    [episode] = episodes(tmp_path)
    assert "disk full: /var/log/redis (100% used, 0 KiB free)" in episode["error_text"]
    assert "inodes exhausted: /var/log/redis (13 of 13 used)" in episode["error_text"]
    assert (episode["plan_source"], episode["plan_reference"]) == ("runbook", "log-filesystem-full")
    assert episode["failure_class"] == "restart_loop"
    assert [(v["decision"], v["rule"]) for v in episode["verdicts"]] == [
        ("approve", "plan-removes-logs"), ("allow", "systemctl-control"), ("allow", "systemctl-control")]
    assert [step["argv"][:2] for step in episode["plan"]["steps"]] == [["rm", "-f"], ["systemctl", "reset-failed"], ["systemctl", "start"]]
    assert acted(tmp_path, "node2") == [] and sh(lab, "node2", "ls", "/var/log/redis") == logs_before

    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=tmp_path)
    assert approved.rc == 0 and "approved by alice" in one_line(approved.output), approved.output
    last = episodes(tmp_path)[-1]
    assert (last["outcome"], last["verified"], last["approved_by"]) == ("healed", 1, "alice")
    removed = last["plan"]["steps"][0]["argv"][2:]
    assert all(path.startswith("/var/log/redis/redis-server.log.") for path in removed) and len(removed) == 13

    # checked on the host: redis answers and writes its log again; only rotated logs went, no data
    assert redis_answers(lab, "node2")
    assert sh(lab, "node2", "ls", "/var/log/redis").split() == ["redis-server.log"]
    assert "Ready to accept connections" in sh(lab, "node2", "cat", "/var/log/redis/redis-server.log")
    assert sh(lab, "node2", "ls", "-ln", "/var/lib/redis") == data_before
    undo_and_check_clean(lab, faults, "node2")


def test_nginx_out_of_log_inodes_is_healed_by_the_log_filesystem_class_once_a_person_approves(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """No runbook of nginx's own covers a full log partition: the class over the incident's structure (the declared
    log's filesystem out of inodes) removes the rotated generations of that log, and only of that log."""
    faults.inject("node2", "nginx-log-inodes-exhausted")
    assert "[emerg]" in sh(lab, "node2", "nginx", "-t") and "(28: No space left on device)" in sh(lab, "node2", "nginx", "-t")
    access_logs = [name for name in sh(lab, "node2", "ls", "/var/log/nginx").split() if name.startswith("access.log.")]
    assert len(access_logs) == 14

    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    assert run.rc == 0 and "awaits approval of plan" in run.output, run.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", run.output)
    [episode] = episodes(tmp_path)
    assert "inodes exhausted: /var/log/nginx (29 of 29 used)" in episode["error_text"]
    assert (episode["plan_source"], episode["plan_reference"]) == ("runbook", "log-filesystem-full")
    assert [(v["decision"], v["rule"]) for v in episode["verdicts"]] == [
        ("approve", "plan-removes-logs"), ("allow", "systemctl-control"), ("allow", "systemctl-control")]
    assert acted(tmp_path, "node2") == []

    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=tmp_path)
    assert approved.rc == 0 and "approved by alice" in one_line(approved.output), approved.output
    last = episodes(tmp_path)[-1]
    assert (last["outcome"], last["verified"], last["approved_by"]) == ("healed", 1, "alice")
    removed = last["plan"]["steps"][0]["argv"][2:]
    assert removed == ["/var/log/nginx/error.log.1"] + [f"/var/log/nginx/error.log.{n}.gz" for n in range(1, 13)]

    # checked on the host: nginx serves again; the access logs' generations are all still there
    assert sh(lab, "node2", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/") == "200"
    left = sh(lab, "node2", "ls", "/var/log/nginx").split()
    assert [name for name in left if name.startswith("access.log.")] == access_logs
    assert {"error.log", "access.log", "error.log.13.gz", "error.log.14.gz"} <= set(left)
    faults.undo_all()
    assert "lab-nginx-logs" not in sh(lab, "node2", "cat", "/proc/mounts")


def test_a_root_owned_postgres_data_directory_is_given_back_to_postgres(lab: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node1", "postgres-root-owned")
    # what an operator sees: the cluster is down, owned by root, and will not start
    assert re.search(r"\bdown\s+root\s+/var/lib/postgresql/15/main\b", sh(lab, "node1", "pg_lsclusters"))
    # on a systemd host the cluster's unit failed, and its journal says why
    assert sh(lab, "node1", "systemctl", "is-failed", "postgresql@15-main").strip() == "failed"
    assert "must not be owned by root" in sh(lab, "node1", "journalctl", "-u", "postgresql@15-main", "-b", "--no-pager", "-o", "cat")

    episode = heal_with_runbook("node1", "postgres-data-dir-owner", tmp_path)
    assert "/var/lib/postgresql/15/main is owned by root:root, not postgres" in episode["error_text"]
    assert [step["argv"] for step in episode["plan"]["steps"]] == [
        ["chown", "-R", "postgres:postgres", "/var/lib/postgresql"], ["systemctl", "start", "postgresql@15-main"],
    ]
    assert [v["rule"] for v in episode["verdicts"]] == ["give-back-ownership", "systemctl-control"]
    # the runbook recognised the fault from PostgreSQL's own cluster list (read-only, allowed)
    assert ["pg_lsclusters"] in evidence_read(tmp_path, "node1")

    # checked on the host: postgres accepts connections and owns every file of its home again
    assert "accepting connections" in sh(lab, "node1", "runuser", "-u", "postgres", "--", "pg_isready")
    assert sh(lab, "node1", "find", "/var/lib/postgresql", "!", "-user", "postgres") == ""
    assert re.search(r"\bonline\s+postgres\s+/var/lib/postgresql/15/main\b", sh(lab, "node1", "pg_lsclusters"))
    undo_and_check_clean(lab, faults, "node1")


def test_a_socket_lock_naming_a_reused_pid_is_removed_and_postgres_started(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """The socket directory survived a restart (persistent storage) with the dead postmaster's socket and its lock
    file, and the pid in the lock now belongs to another process of the postgres account (a sleeping job): postgres
    refuses to start until a person removes the lock."""
    socket, lock = "/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432.lock"
    faults.inject("node1", "postgres-socket-lock-stale")
    reused = sh(lab, "node1", "head", "-n", "1", lock).strip()
    # what an operator sees: the cluster is down and its log says another postmaster holds the socket
    assert sh(lab, "node1", "ps", "-o", "user=,comm=", "-p", reused).split() == ["postgres", "sleep"]
    assert re.search(r"\bdown\s+postgres\s+/var/lib/postgresql/15/main\b", sh(lab, "node1", "pg_lsclusters"))
    assert f'lock file "/var{lock}" already exists' in sh(lab, "node1", "tail", "-n", "5", "/var/log/postgresql/postgresql-15-main.log")

    episode = heal_with_runbook("node1", "stale-socket", tmp_path)
    assert f"socket {socket} is left over: no process has it bound" in episode["error_text"]
    assert f"lock file {lock} names pid {reused}, which is sleep, not the service" in episode["error_text"]
    assert [step["argv"] for step in episode["plan"]["steps"]] == [
        ["rm", "-f", lock], ["rm", "-f", socket], ["systemctl", "start", "postgresql@15-main"],
    ]
    assert [v["rule"] for v in episode["verdicts"]] == ["remove-stale-socket", "remove-stale-socket", "systemctl-control"]

    # checked on the host: postgres accepts connections on its socket, whose lock names the postmaster; the job lives on
    assert "accepting connections" in sh(lab, "node1", "runuser", "-u", "postgres", "--", "pg_isready")
    postmaster = sh(lab, "node1", "head", "-n", "1", "/var/lib/postgresql/15/main/postmaster.pid").strip()
    assert sh(lab, "node1", "head", "-n", "1", lock).strip() == postmaster != reused
    assert sh(lab, "node1", "ps", "-o", "comm=", "-p", reused).strip() == "sleep"
    undo_and_check_clean(lab, faults, "node1")


@pytest.mark.parametrize("host", ["node3", "node1"])  # sysv: the workers hold :80; systemd: the unit's cgroup went with them
def test_nginx_with_its_master_alone_killed_heals_the_first_time_and_its_workers_are_its_own(
        lab: Any, faults: Faults, host: str, tmp_path: Path) -> None:
    faults.inject(host, "nginx-master-killed")
    orphans = sh(lab, host, "pgrep", "-x", "nginx").split()
    run = run_playbook(HEAL, "--limit", host, state_dir=tmp_path)
    assert run.rc == 0 and f"{host}: nginx healed" in one_line(run.output), run.output
    [episode] = episodes(tmp_path)
    assert (episode["outcome"], episode["verified"], episode["attempt"]) == ("healed", 1, 1), episode
    if orphans:  # the workers nginx's master left are nginx's own processes: stopped by pid as the service's
        assert episode["verdicts"][0]["rule"] == "signal-own-process", episode["verdicts"]
    # checked on the host: one master, in its pid file, answering, with workers of its own
    master = sh(lab, host, "cat", "/run/nginx.pid").strip()
    assert set(sh(lab, host, "pgrep", "-x", "nginx").split()) - set(sh(lab, host, "pgrep", "-P", master).split()) == {master}
    assert not set(orphans) & set(sh(lab, host, "pgrep", "-x", "nginx").split())
    assert sh(lab, host, "curl", "-fs", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/").strip() == "200"
    undo_and_check_clean(lab, faults, host)
