"""The inventory's hosts that a heal session gives the guard: the only hosts besides loopback a probe may reach."""

from __future__ import annotations

from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import InventoryHosts
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
