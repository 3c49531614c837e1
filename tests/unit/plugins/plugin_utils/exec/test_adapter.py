"""The Ansible side of a heal task: the inventory's hosts that a heal session gives the guard (the only hosts besides
loopback a probe may reach), and where a task asking for ``step_privilege: auto`` runs its steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import become_loader, connection_loader
from ansible.template import Templar

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec import adapter
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import InventoryHosts, privilege_for_host
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision
from helpers import nginx_failure


class Hostvars(dict[str, Any]):
    """Ansible's hostvars, which evaluate all of a host's variables on each read: the reads are recorded."""

    def __init__(self, hosts: dict[str, Any]) -> None:
        super().__init__(hosts)
        self.read: list[str] = []

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.append(name)
        return super().get(name, default)


def test_a_probe_of_a_name_reads_no_hosts_variables_and_the_first_of_an_address_reads_each_once() -> None:
    hostvars = Hostvars({"node1": {"ansible_host": "10.77.0.11"}, "node2": {"ansible_host": "10.77.0.12"}, "node3": {}})
    hosts = InventoryHosts({"groups": {"all": ["node1", "node2", "node3"]}, "hostvars": hostvars}, Templar(loader=DataLoader()))
    context = PolicyContext.from_failure(nginx_failure(), hosts)

    assert evaluate("getent hosts node2", context).decision is Decision.ALLOW
    assert hostvars.read == []  # a heal whose plan probes nothing, or only names, reads no host's variables
    assert evaluate("ping -c 1 10.77.0.12", context).decision is Decision.ALLOW
    assert evaluate("ping -c 1 198.51.100.7", context).decision is not Decision.ALLOW
    assert evaluate("ping -c 1 10.77.0.11", context).decision is Decision.ALLOW
    assert sorted(hostvars.read) == ["node1", "node2", "node3"]
    assert set(hosts) == {"node1", "node2", "node3", "10.77.0.11", "10.77.0.12"} and len(hosts) == 5


class LocalAction(ActionBase):
    """An action over Ansible's real local connection, with sudo as the task's become (never used: the commands of
    privilege_for_host run as the connection's account)."""

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        return {}


def local_action() -> LocalAction:
    play_context = PlayContext()
    connection = connection_loader.get("local", play_context, "/dev/null")
    connection.set_become_plugin(become_loader.get("sudo"))
    return LocalAction(Task(), connection, play_context, DataLoader(), Templar(loader=DataLoader()), None)


@pytest.mark.parametrize("installed", [True, False])
def test_auto_is_the_executor_where_the_host_has_it_and_the_tasks_become_is_set_aside_while_the_task_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, installed: bool) -> None:
    executor = tmp_path / "exec"
    if installed:
        executor.write_text("#!/bin/sh\n")
        executor.chmod(0o755)
    monkeypatch.setattr(adapter, "EXECUTOR_PATH", str(executor))
    action = local_action()
    become = action._connection.become
    with privilege_for_host(action, {"step_privilege": "auto", "state_dir": "x"}, {}) as options:
        assert options == {"step_privilege": "executor" if installed else "become", "state_dir": "x"}
        assert action._connection.become is (None if installed else become)
    assert action._connection.become is become  # the next task of the play is as the play says


def test_a_privilege_the_task_names_is_kept_and_the_host_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    action = local_action()
    monkeypatch.setattr(action, "_low_level_execute_command", None)  # asking would fail the test
    for privilege in ("become", "sudo", "executor"):
        with privilege_for_host(action, {"step_privilege": privilege}, {}) as options:
            assert options == {"step_privilege": privilege}


def test_the_slices_of_a_sliced_job_are_one_run_of_the_blast_radius_and_each_gathers_its_own_runs(tmp_path: Path) -> None:
    caps = {"max_hosts_per_run": 2, "state_dir": str(tmp_path)}
    slices = [{"awx_job_id": job, "awx_workflow_job_id": 7, "ansible_play_hosts_all": hosts}
              for job, hosts in ((41, ["web1", "web2"]), (42, ["web3"]))]
    radii = [adapter.blast_radius(caps, task_vars) for task_vars in slices]
    assert {radius.run_id for radius in radii} == {"awx-workflow-job-7"} and [radius.run_hosts for radius in radii] == [2, 1]
    # the shared runs of the remediations' forks stay in each slice's own job: a slice's fork never joins another's
    assert [adapter.step_executor(caps, [], task_vars, radius).key for task_vars, radius in zip(slices, radii, strict=True)] == [
        "awx-job-41", "awx-job-42"]
    alone = adapter.blast_radius(caps, {"tower_job_id": 9, "inventory_hostname": "web1"})
    assert (alone.run_id, alone.run_hosts) == ("awx-job-9", 1)
    here = adapter.blast_radius(caps, {"inventory_hostname": "web1"})
    assert here.run_id.startswith("ansible-playbook-") and here.run_id == adapter.job_of({})
