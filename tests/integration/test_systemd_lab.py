"""The lab booting systemd as PID 1, beside a sysv host: what Ansible sees, a heal on both, and a clean teardown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import ROOT, Faults, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"


@pytest.fixture(scope="module")
def mixed(lab: Any) -> Iterator[Any]:
    """node1 and node2 boot systemd, node3 stays sysv; the default fleet comes back afterwards for the other tests."""
    lab.down()
    lab.up(init="systemd", inits={"node3": "sysv"})
    try:
        yield lab
    finally:
        lab.down()
        lab.up()


def _ansible_facts(host_pattern: str, fact: str) -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible"), "-i", "inventories/lab", host_pattern, "-m", "setup",
                          "-a", f"filter={fact}"], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return dict(re.findall(rf"(node\d) \| SUCCESS.*?{fact}\W+(\w+)", run.stdout, re.DOTALL))


def test_hosts_boot_the_init_they_were_given_and_ansible_sees_it(mixed: Any) -> None:
    assert {status.name: status.init_system for status in mixed.status()} == {"node1": "systemd", "node2": "systemd", "node3": "sysv"}
    assert _ansible_facts("all", "ansible_service_mgr") == {"node1": "systemd", "node2": "systemd", "node3": "tini"}
    for host in ("node1", "node2"):
        assert sh(mixed, host, "systemctl", "is-system-running").strip() == "running"
        assert sh(mixed, host, "systemctl", "--failed", "--no-legend").strip() == ""
        # the services run as the units Debian ships, the cluster as its instance of postgresql@
        assert sh(mixed, host, "systemctl", "is-active", "nginx", "postgresql@15-main", "redis-server", "ssh").split() == ["active"] * 4
        assert "Started nginx.service" in sh(mixed, host, "journalctl", "-b", "--no-pager", "-o", "cat", "-u", "nginx")
    assert sh(mixed, "node3", "cat", "/proc/1/comm").strip() == "tini"


def test_a_killed_nginx_is_healed_on_a_systemd_host_and_on_a_sysv_host(mixed: Any, tmp_path: Path) -> None:
    faults = Faults(mixed)
    try:
        for host in ("node1", "node3"):
            faults.inject(host, "nginx-killed")
        # systemd noticed on its own: the unit failed (nginx's unit does not restart itself)
        assert sh(mixed, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"
        run = run_playbook(HEAL, state_dir=tmp_path)
        assert run.rc == 0, run.output
        output = one_line(run.output)
        assert "node1: nginx healed in 1 attempt" in output and "node3: nginx healed in 1 attempt" in output
        for host in ("node1", "node3"):
            assert "200" in sh(mixed, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
        assert sh(mixed, "node1", "systemctl", "is-active", "nginx").strip() == "active"
    finally:
        faults.undo_all()


def test_a_unit_a_person_masked_is_left_alone_and_stays_masked(mixed: Any, tmp_path: Path) -> None:
    sh(mixed, "node1", "systemctl", "mask", "--now", "nginx")
    try:
        run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
        # a person's decision is not a failure of the job: nothing ran, and the summary says why
        assert run.rc == 0, run.output
        assert "node1: nginx masked: nginx: nginx.service is masked by a person: not healed, nothing run" in one_line(run.output)
        assert "[diagnose > left_alone]" in one_line(run.output)
        assert not (tmp_path / "runs" / "node1").exists()
        assert sh(mixed, "node1", "systemctl", "is-enabled", "nginx").strip() == "masked"
        assert sh(mixed, "node1", "systemctl", "is-active", "nginx").strip() == "inactive"
    finally:
        sh(mixed, "node1", "systemctl", "unmask", "nginx")
        sh(mixed, "node1", "systemctl", "start", "nginx")


def test_down_leaves_no_cgroup_namespace_mount_or_process_of_a_systemd_host(mixed: Any) -> None:
    init_pids = [status.pid for status in mixed.status() if status.init_system == "systemd"]
    assert mixed._lab_cgroups(), "a systemd host lives in a cgroup of its own"
    mixed.down()
    assert mixed._lab_cgroups() == []
    assert mixed._lab_netns() == [] and mixed._mounts_under(mixed.STATE_DIR) == []
    assert not any(Path(f"/proc/{pid}").exists() for pid in init_pids)
