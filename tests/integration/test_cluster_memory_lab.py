"""Memory for a cluster on the lab fleet: real heal and approve jobs from two controllers' state dirs into one
PostgreSQL database (the test session's server), a state dir on a real network filesystem (sshfs from a lab host)
refused, and the guide cluster_memory.rst (docs/docsite/rst/) followed as written."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
import yaml
from conftest import ROOT, Faults, PlaybookRun, RollOut, one_line, run_playbook, sh
from guides import code_block
from postgres_server import PostgresServer, new_server

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store import filesystems
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE, Memory

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
SUSPEND = "playbooks/suspend.yml"
LAB_KEY = ROOT / "tests" / "lab" / ".state" / "ssh" / "id_ed25519"
# nginx's configuration test runs; any remediation waits for a person
STRICT_POLICY = "version: 1\nrules:\n  - {id: nginx-config-test, executable: nginx, argv: [-t], decision: allow, become: true}\n"
FILE_HEADER = re.compile(r"#\s*(?P<path>~/\S+)\n")


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    """A database of its own on the test server for one test (the cluster's memory), dropped afterwards."""
    name = f"cluster_{uuid.uuid4().hex[:12]}"
    postgres.psql(f"CREATE DATABASE {name} OWNER sentinel")
    yield f"postgresql://sentinel@127.0.0.1:{postgres.port}/{name}"
    postgres.psql(f"DROP DATABASE {name} WITH (FORCE)")


def _memory(url: str) -> list[str]:
    return ["-e", f"autoheal_memory_url={url}"]


def _rows(url: str, password: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, password=password) as conn:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


def _waiting_plan(run: PlaybookRun) -> str:
    assert run.rc == 0 and "awaits approval of plan" in run.output, run.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", run.output)
    return plan_id


def test_two_heal_jobs_from_two_state_dirs_share_one_postgresql_memory_and_approve_each_others_plans(
        lab: Any, faults: Faults, postgres: PostgresServer, database: str, roll_out: RollOut, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text(STRICT_POLICY)
    roll_out("-e", f"autoheal_policy_file={policy}")  # the executors run the approved steps only with the approver's signature
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    # the password as an AWX credential gives it: in the job's environment, never a variable
    env = {"PGPASSWORD": postgres.password}
    faults.inject("node1", "nginx-killed")
    faults.inject("node2", "nginx-killed")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two controllers' heal jobs at the same time
        jobs = [pool.submit(run_playbook, HEAL, "--limit", host, "-e", f"autoheal_policy_file={policy}", *_memory(database),
                            state_dir=state, env=env)
                for host, state in (("node1", node_a), ("node2", node_b))]
        stored_by_a, stored_by_b = (_waiting_plan(job.result()) for job in jobs)
    assert _rows(database, postgres.password, "SELECT host, status FROM plans ORDER BY host") == [("node1", "pending"), ("node2", "pending")]

    # each node approves the plan the other stored
    for plan_id, state, host in ((stored_by_a, node_b, "node1"), (stored_by_b, node_a, "node2")):
        approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", f"approver=alice-on-{state.name}",
                                *_memory(database), state_dir=state, env=env)
        assert approved.rc == 0, approved.output
        assert f"nginx healed in 1 attempt with: systemctl start nginx [plan from runbook service-not-running, approved by alice-on-{state.name}]" \
            in one_line(approved.output), approved.output
        assert "200" in sh(lab, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    assert _rows(database, postgres.password, "SELECT host, status, decided_by FROM plans ORDER BY host") == [
        ("node1", "executed", "alice-on-node-b"), ("node2", "executed", "alice-on-node-a")]
    assert _rows(database, postgres.password, "SELECT host, outcome, approved_by FROM episodes ORDER BY id")[-2:] == [
        ("node1", "healed", "alice-on-node-b"), ("node2", "healed", "alice-on-node-a")]
    again = run_playbook(APPROVE, "-e", f"plan_id={stored_by_a}", "-e", "approver=bob", *_memory(database), state_dir=node_a,
                         env=env)
    assert again.rc == 2 and f"plan {stored_by_a} was already executed by alice-on-node-b" in one_line(again.output), again.output
    assert not (node_a / MEMORY_FILE).exists() and not (node_b / MEMORY_FILE).exists()


@pytest.fixture
def sshfs(lab: Any, tmp_path: Path) -> Iterator[Path]:
    """A real network filesystem: node1's /tmp/shared mounted here over sshfs (as the lab's Ansible connects)."""
    if shutil.which("sshfs") is None or not Path("/dev/fuse").exists():
        pytest.fail("sshfs and /dev/fuse are needed: apt-get install sshfs (make setup)")
    sh(lab, "node1", "install", "-d", "-o", "sentinel", "-m", "0755", "/tmp/shared")
    mount_point = tmp_path / "shared"
    mount_point.mkdir()
    subprocess.run(["sshfs", "sentinel@10.77.0.11:/tmp/shared", str(mount_point), "-o",
                    f"IdentityFile={LAB_KEY},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes"],
                   check=True, timeout=60, capture_output=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["fusermount", "-u", str(mount_point)], check=False, timeout=60)
        sh(lab, "node1", "rm", "-rf", "/tmp/shared")


def test_a_state_dir_on_sshfs_is_refused_and_the_memory_on_postgresql_heals_from_it(
        lab: Any, faults: Faults, sshfs: Path, postgres: PostgresServer, database: str) -> None:
    state = sshfs / "sentinel-heal"
    assert re.search(rf" {re.escape(str(sshfs))} .* - fuse\.sshfs ", Path("/proc/self/mountinfo").read_text())
    shown = run_playbook(SUSPEND, "-e", "show=true", state_dir=state)  # the memory module
    refusal = (f"the state dir is on a network filesystem (fuse.sshfs: sentinel@10.77.0.11:/tmp/shared on {sshfs}), where SQLite's "
               "file locking is unsafe")
    assert shown.rc == 2 and refusal in one_line(shown.output), shown.output
    assert "autoheal_memory_url" in one_line(shown.output) and not state.exists()

    faults.inject("node1", "nginx-killed")
    refused = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    assert refused.rc == 2 and refusal in one_line(refused.output), refused.output
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed" and not (state / MEMORY_FILE).exists()

    # the alternative the refusal names: the memory on PostgreSQL (the state dir may stay there, for the run artifacts)
    healed = run_playbook(HEAL, "--limit", "node1", *_memory(database), state_dir=state, env={"PGPASSWORD": postgres.password})
    assert healed.rc == 0 and "node1: nginx healed in 1 attempt" in one_line(healed.output), healed.output
    assert _rows(database, postgres.password, "SELECT host, outcome FROM episodes") == [("node1", "healed")]
    assert list(state.glob("runs/node1/*")) and not (state / MEMORY_FILE).exists()


def test_the_cluster_memory_page_runs_as_written(lab: Any, faults: Faults, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = new_server()
    server.up(create=False)  # a bare server: the guide's first block makes the role and the database
    try:
        _follow_the_page(lab, faults, server, tmp_path, monkeypatch)
    finally:
        server.down()


def _follow_the_page(lab: Any, faults: Faults, server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    create, memory_file, check, run, auth_error, credential_type, refusal = (
        code_block("cluster_memory", name) for name in ("create", "memory_file", "check", "run", "auth_error", "credential_type", "refusal"))
    home = tmp_path / "home"
    (home / "ops").mkdir(parents=True)
    inventory = home / "ops" / "inventory"
    lab.copy_inventory(inventory)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ANSIBLE_", "PG"))}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_HOST_KEY_CHECKING="False")

    def here(text: str) -> str:
        return text.replace("db.example.com", "127.0.0.1").replace("5432", str(server.port))

    def shell(body: str, **extra: str) -> str:
        script = here(body).replace("sudo -u postgres ", "runuser -u postgres -- ")
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=dict(env, **extra), cwd=home, capture_output=True, text=True,
                              timeout=600, check=False)
        assert proc.returncode == 0, f"{script}\nrc={proc.returncode}\n{proc.stdout}{proc.stderr}"
        return proc.stdout + proc.stderr

    assert [block.language for block in (create, check, run)] == ["bash"] * 3
    shell(create.body, PGHOST=str(server.directory), PGPORT=str(server.port))  # the superuser's, over the server's socket

    header = FILE_HEADER.match(memory_file.body)
    assert header is not None and header["path"] == "~/ops/inventory/group_vars/all/memory.yml"
    written = home / header["path"].removeprefix("~/")
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text(here(memory_file.body))
    url = yaml.safe_load(written.read_text())["autoheal_memory_url"]

    checked = shell(check.body)
    assert "accepting connections" in checked and "(1 row)" in checked, checked

    faults.inject("node1", "nginx-killed")
    ran = " ".join(shell(run.body, PGPASSWORD="change-me").split())
    assert "node1: nginx healed in 1 attempt" in ran and "no plan waits for approval" in ran, ran
    assert "'outcome': 'healed'" in ran or '"outcome": "healed"' in ran, ran
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    assert not (home / ".local" / "state" / "sentinel-heal" / MEMORY_FILE).exists()  # the memory is the database's
    assert _rows(url, "change-me", "SELECT host, outcome FROM episodes") == [("node1", "healed")]

    # what the guide quotes is what the memory says
    assert auth_error.language == "text"
    with pytest.raises(MemoryStoreError) as refused:
        Memory(home, url=url, password="wrong")
    for part in here(auth_error.body).strip().split("..."):
        assert part.strip(" ;") in str(refused.value), part
    assert credential_type.language == "yaml"
    awx = yaml.safe_load(credential_type.body)
    assert awx["inputs"]["fields"][0]["secret"] is True and awx["injectors"] == {"env": {"PGPASSWORD": "{{ password }}"}}
    assert refusal.language == "text" and "fuse.sshfs: sentinel@10.77.0.11:/tmp/shared on /mnt/shared" in refusal.body
    mounted = tmp_path / "shared"
    mounted.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"1 0 0:1 / / rw - ext4 /dev/root rw\n2 1 0:2 / {mounted} rw - fuse.sshfs sentinel@10.77.0.11:/tmp/shared rw\n")
    monkeypatch.setattr(filesystems, "MOUNTINFO", mountinfo)  # the lab's real sshfs is tested above; here, the guide's words
    with pytest.raises(MemoryStoreError) as on_sshfs:
        Memory(mounted / "sentinel-heal")
    assert str(on_sshfs.value).replace(str(mounted), "/mnt/shared") == refusal.body.strip()
