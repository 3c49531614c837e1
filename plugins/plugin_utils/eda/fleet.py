# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet an event may name: the inventory's hosts and the services each declares in ``autoheal_services``.

Event sources check every host and service an event names against it, so that nothing outside the inventory, and
no pattern or group name that Ansible would widen to many hosts, ever reaches a playbook's limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml
from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.utils.collection_loader import AnsibleCollectionConfig
from ansible.vars.manager import VariableManager

from ansible_collections.sentinel.heal.plugins.module_utils._entries import entry_errors
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import SERVICE_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

# the role's variables an event source reads as the heal jobs will (the memory they share, the fleet thresholds)
# (not the memory's password, which may be vaulted: a source logs in with the URL's, PGPASSWORD or ~/.pgpass)
SOURCE_VARS = ("autoheal_state_dir", "autoheal_memory_url", "autoheal_fleet_min_hosts", "autoheal_fleet_window")
ROLE_DEFAULTS = Path(__file__).resolve().parents[3] / "roles" / "autoheal" / "defaults" / "main.yml"
# One inventory host name, literally: no pattern (node*, ~regex), group arithmetic (a:!b, a&b) or list (a,b)
# that Ansible's --limit would widen to more hosts than the one named.
LITERAL_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# service names as service_check accepts them
# an address with a port, as Prometheus' instance label writes it: host:9100, 10.0.0.1:9100, [fe80::1]:9100
_WITH_PORT = re.compile(r"^(?:\[(?P<bracketed>[0-9A-Fa-f:.]+)\]|(?P<plain>[^:\[\]]+)):\d{1,5}$")
LITERAL_SERVICE = re.compile(r"^[A-Za-z0-9@._+-]{1,128}$")


@dataclass(frozen=True)
class Fleet:
    """Each host's declared service names, the inventory host each address (``ansible_host``) belongs to, and by host
    the declared service each unit name stands for (the service's ``service``, with or without ``.service``, as
    monitors name units: node_exporter's systemd collector labels ``name="redis-server.service"``)."""

    services: Mapping[str, tuple[str, ...]]
    addresses: Mapping[str, str]
    units: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # the role's variables the sources need (where the memory is, the fleet thresholds), as the inventory sets them
    # for its first host, or the role's defaults: what the heal jobs will see
    heal_vars: Mapping[str, Any] = field(default_factory=dict)

    def memory_options(self) -> dict[str, Any]:
        """The options that open the memory the heal jobs share (store/memory.py Memory.from_options)."""
        return {"state_dir": self.heal_vars["autoheal_state_dir"], "memory_url": self.heal_vars["autoheal_memory_url"] or None,
                "memory_password": None}

    def host_named(self, name: str) -> str | None:
        """The inventory host an event's host field names (its inventory name or its address, with or without a port,
        as Prometheus' ``instance`` label writes it), or None when it names none literally."""
        if name in self.services and LITERAL_HOST.match(name):
            return name
        with_port = _WITH_PORT.match(name)
        address = (with_port["bracketed"] or with_port["plain"]) if with_port else name
        if address in self.services and LITERAL_HOST.match(address):
            return address
        return self.addresses.get(address)

    def service_named(self, host: str, name: str) -> str | None:
        """The declared service of ``host`` that ``name`` names: by its declared name, or by its unit's; None when it
        names none literally (or a unit two declared services share)."""
        if not LITERAL_SERVICE.match(name):
            return None
        if name in self.services.get(host, ()):
            return name
        return self.units.get(host, {}).get(name)


def read_fleet(inventory: str, pattern: str = "all") -> Fleet:
    """Read the hosts matching ``pattern`` from the inventory at ``inventory``, with their ``autoheal_services``
    templated as a play would see them."""
    # ansible-rulebook, which runs the sources, is no Ansible CLI: without the collection loader no lookup or filter is
    # found, and an inventory whose variables use one (lookup('ansible.builtin.file', ...)) fails. It is put in place
    # for the reading alone: its path hook claims every file below ansible_collections/, and ansible-rulebook, which
    # starts each further source of the rulebook with runpy.run_path, could no longer run one.
    if AnsibleCollectionConfig.collection_finder is not None:
        return _read_fleet(inventory, pattern)
    init_plugin_loader()
    try:
        return _read_fleet(inventory, pattern)
    finally:
        finder: Any = AnsibleCollectionConfig.collection_finder
        type(finder)._remove()


def _read_fleet(inventory: str, pattern: str) -> Fleet:
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[inventory])
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = manager.get_hosts(pattern)
    if not hosts:
        raise ConfigError("the inventory has no host matching the pattern", field="hosts", value=pattern,
                          hint=f"check the pattern against `ansible-inventory -i {inventory} --graph`")
    services: dict[str, tuple[str, ...]] = {}
    addresses: dict[str, str] = {}
    units: dict[str, dict[str, str]] = {}
    heal_vars: dict[str, Any] = {}
    for host in hosts:
        host_vars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=host_vars)
        try:
            declared = templar.template(host_vars.get("autoheal_services", []))
            address = templar.template(host_vars.get("ansible_host", host.name))
            if not heal_vars:
                defaults = role_defaults()
                heal_vars = {name: templar.template(host_vars.get(name, defaults[name])) for name in SOURCE_VARS}
        except AnsibleError as exc:
            raise ConfigError(f"the inventory's variables of {host.name} cannot be templated: {exc}", field="inventory",
                              value=inventory, hint="fix the variable the message names") from exc
        services[host.name] = _service_names(host.name, declared)
        units[host.name] = _unit_names(declared)
        if isinstance(address, str) and address != host.name:
            addresses[address] = host.name
    return Fleet(services=services, addresses=addresses, units=units, heal_vars=heal_vars)


def role_defaults() -> dict[str, Any]:
    """The defaults of the role sentinel.heal.autoheal, which the heal jobs run."""
    loaded = yaml.safe_load(ROLE_DEFAULTS.read_text(encoding="utf-8"))
    return dict(loaded) if isinstance(loaded, dict) else {}


def _service_names(host: str, declared: Any) -> tuple[str, ...]:
    if not isinstance(declared, list):
        raise ConfigError(f"autoheal_services of {host} is not a list of services", field="autoheal_services", value=declared,
                          hint="declare the services in the form of service_check's services option")
    errors = [f"{host}: {error}" for error in entry_errors("autoheal_services", declared, SERVICE_OPTIONS)]
    if errors:
        raise ConfigError("; ".join(errors), field="autoheal_services", value=host,
                          hint="declare the services in the form of service_check's services option (ansible-doc sentinel.heal.service_check)")
    return tuple(spec["name"] for spec in declared)


def _unit_names(declared: list[Mapping[str, Any]]) -> dict[str, str]:
    """Each unit name of the declared services (``service`` or the name, with and without ``.service``) and the service
    it stands for; a unit name two services share stands for neither."""
    named: dict[str, set[str]] = {}
    for spec in declared:
        unit = str(spec.get("service") or spec["name"])
        for alias in (unit, f"{unit}.service", f"{spec['name']}.service"):
            named.setdefault(alias, set()).add(spec["name"])
    return {alias: next(iter(names)) for alias, names in named.items() if len(names) == 1}
