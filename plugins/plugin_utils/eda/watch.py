# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog: sentinel.heal.service_check run over the inventory's own connections on an interval, and one heal
request each time a service goes from healthy to failing.

Each round is one ad-hoc ``ansible`` run of service_check (the same module, evidence and redaction a heal starts
from) against the watched hosts, so the watchdog reaches hosts exactly as the heal job does: the inventory's users,
keys, become settings and ssh options.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import EventMapping, HealRequest, heal_request
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

# how the minimal callback (ad-hoc's own) starts each host's result: the JSON follows
_RESULT_START = re.compile(r"^(?P<host>\S+) \| (?P<state>SUCCESS|CHANGED|FAILED!|UNREACHABLE!) => ", re.M)
# what of a failing service's check result travels in the event (its evidence, as service_check redacted it)
EVENT_FIELDS = ("failure_class", "summary", "checks", "evidence")


@dataclass
class Watch:
    """The watched services of each host and what the last round saw of them (True: healthy)."""

    targets: Mapping[str, tuple[str, ...]]
    fleet: Fleet
    mapping: EventMapping
    last_healthy: dict[tuple[str, str], bool] = field(default_factory=dict)
    # why each host could not be checked at the last round: noted once, not every round while it lasts
    unchecked: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, fleet: Fleet, services: list[str], mapping: EventMapping | None = None) -> Watch:
        """Watch ``services`` (names; empty: every declared one) on the fleet's hosts that declare any of them; a failing
        one is healed where ``mapping`` says (by default itself)."""
        targets = {host: tuple(name for name in declared if not services or name in services) for host, declared in fleet.services.items()}
        targets = {host: names for host, names in targets.items() if names}
        if not targets:
            raise ConfigError("no host of the pattern declares any of the services to watch", field="services", value=services,
                              hint="name services of the hosts' autoheal_services, or leave services empty to watch all of them")
        return cls(targets=targets, fleet=fleet, mapping=mapping or EventMapping.of(None, None))

    def command(self, inventory: str, become: bool, log_lines: int) -> list[str]:
        """The ad-hoc run of one round: service_check with each host's declared specs of the watched services, checked
        where the heal's own enforcement says (the executor, where the host has it, by default), under its policy."""
        names = json.dumps(sorted({name for names in self.targets.values() for name in names}))
        args = json.dumps({"services": "{{ autoheal_services | selectattr('name', 'in', " + names + ") | list }}", "log_lines": log_lines,
                           "enforcement": "{{ autoheal_enforcement | default('auto') }}",
                           "policy_file": "{{ autoheal_policy_file | default('') }}"})
        return [_ansible(), ",".join(sorted(self.targets)), "-i", inventory, "-m", "sentinel.heal.service_check", "-a", args,
                *(["--become"] if become else [])]

    @staticmethod
    def environment() -> dict[str, str]:
        """ad-hoc's own minimal callback, in JSON and without colour, whatever ansible.cfg says of results' format."""
        return dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="0", ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1",
                    ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0")

    def observe(self, output: str) -> tuple[list[HealRequest], list[str]]:
        """Read one round's output: the heal requests of the services that went from healthy to failing, and a note
        when a host's services cannot be read (unreachable, the module failed: they keep their last state) and when they
        can again, and when the mapping names no inventory host and service it declares for a failing one."""
        results = read_results(output)
        requests: list[HealRequest] = []
        notes: list[str] = []
        for host, names in sorted(self.targets.items()):
            result = results.get(host)
            if result is None or result.get("unreachable") or not isinstance(result.get("services"), list):
                why = _why_unchecked(result)
                if self.unchecked.get(host) != why:
                    notes.append(f"{host}: not checked: {why}")
                self.unchecked[host] = why
                continue
            if self.unchecked.pop(host, None) is not None:
                notes.append(f"{host}: checked again")
            checked = {service.get("name"): service for service in result["services"] if isinstance(service, dict)}
            for name in names:
                service = checked.get(name)
                if service is None:
                    continue
                healthy = bool(service.get("healthy"))
                # a service seen failing at the first round counts as a change too: the watchdog heals what it finds broken
                started_failing = not healthy and self.last_healthy.get((host, name), True)
                self.last_healthy[(host, name)] = healthy
                if not started_failing:
                    continue
                request, why = self.request(host, name, {key: service[key] for key in EVENT_FIELDS if key in service})
                if request is None:
                    notes.append(f"{host}: {name} is failing, and the mapping names nothing to heal: {why}")
                    continue
                if (request.host, request.service) != (host, name):
                    notes.append(f"{host}: {name} is failing; the mapping heals {request.service} on {request.host}")
                requests.append(request)
        return requests, notes

    def request(self, host: str, service: str, facts: Mapping[str, Any]) -> tuple[HealRequest | None, str]:
        """The heal request for a watched service seen failing, where the mapping says (checked as an alert is)."""
        document = {"host": host, "service": service, **facts}
        return heal_request(self.fleet, self.mapping.host.search(document), self.mapping.service.search(document),
                            source="watchdog", reason="failing", facts=facts)


def read_results(output: str) -> dict[str, dict[str, Any]]:
    """Each host's module result from the minimal callback's output (``HOST | STATE => {json}``)."""
    decoder = json.JSONDecoder()
    results: dict[str, dict[str, Any]] = {}
    for match in _RESULT_START.finditer(output):
        try:
            result, _end = decoder.raw_decode(output, match.end())
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict):
            results[match["host"]] = result
    return results


def _ansible() -> str:
    """The ansible command beside the running Python (ansible-rulebook's virtualenv, activated or not), else PATH's."""
    beside = Path(sys.executable).with_name("ansible")
    return str(beside) if beside.is_file() else "ansible"


def _why_unchecked(result: Mapping[str, Any] | None) -> str:
    if result is None:
        return "no result"
    return str(result.get("msg") or "no services in the result")[:300]
