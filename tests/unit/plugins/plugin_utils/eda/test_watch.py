"""The watchdog's rounds: one heal request per healthy-to-failing change, read from ad-hoc ansible's own output."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import EventMapping
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.watch import Watch
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

FLEET = Fleet(services={"web1": ("nginx", "redis"), "db1": ("postgresql",)}, addresses={})


def round_output(nginx_healthy: bool, db1_reachable: bool = True) -> str:
    """What `ansible ... -m sentinel.heal.service_check` prints with the minimal callback in JSON."""
    nginx = {"name": "nginx", "healthy": nginx_healthy}
    if not nginx_healthy:
        nginx.update(failure_class="stale_pidfile", summary="80/tcp: connection refused", checks=[], evidence={"pidfile": None})
    web1 = {"changed": False, "services": [nginx, {"name": "redis", "healthy": True}]}
    lines = [f"web1 | SUCCESS => {json.dumps(web1, indent=4)}"]
    if db1_reachable:
        lines.append(f"db1 | SUCCESS => {json.dumps({'services': [{'name': 'postgresql', 'healthy': True}]}, indent=4)}")
    else:
        lines.append('db1 | UNREACHABLE! => {\n    "changed": false,\n    "msg": "ssh: connect to host db1 port 22: No route to host",\n'
                     '    "unreachable": true\n}')
    return "\n".join(lines) + "\n"


def test_one_request_per_change_from_healthy_to_failing() -> None:
    watch = Watch.of(FLEET, ["nginx", "postgresql"])
    assert watch.targets == {"web1": ("nginx",), "db1": ("postgresql",)}
    assert watch.observe(round_output(nginx_healthy=True)) == ([], [])
    requests, _notes = watch.observe(round_output(nginx_healthy=False))
    assert [request.event()["sentinel"]["summary"] for request in requests] == ["80/tcp: connection refused"]
    assert requests[0].event()["meta"] == {"hosts": "web1"}
    assert watch.observe(round_output(nginx_healthy=False)) == ([], [])  # still failing: no second event
    watch.observe(round_output(nginx_healthy=True))
    assert len(watch.observe(round_output(nginx_healthy=False))[0]) == 1  # failing again after a recovery


def test_an_unreachable_host_keeps_its_state_and_is_noted() -> None:
    watch = Watch.of(FLEET, [])
    requests, notes = watch.observe(round_output(nginx_healthy=True, db1_reachable=False))
    assert requests == []
    assert notes == ["db1: not checked: ssh: connect to host db1 port 22: No route to host"]
    assert watch.observe(round_output(nginx_healthy=True, db1_reachable=False)) == ([], [])  # noted once, not every round
    assert watch.observe(round_output(nginx_healthy=True)) == ([], ["db1: checked again"])


def test_the_round_runs_service_check_with_each_host_s_own_declarations() -> None:
    command = Watch.of(FLEET, ["nginx"]).command("inventory/", become=True, log_lines=20)
    assert command[1:7] == ["web1", "-i", "inventory/", "-m", "sentinel.heal.service_check", "-a"]
    # checked where the heal's enforcement says, under its policy: the executor where the host has it, by default
    assert json.loads(command[7]) == {"services": "{{ autoheal_services | selectattr('name', 'in', [\"nginx\"]) | list }}", "log_lines": 20,
                                      "enforcement": "{{ autoheal_enforcement | default('auto') }}",
                                      "policy_file": "{{ autoheal_policy_file | default('') }}"}
    assert command[-1] == "--become"


def test_the_mapping_names_what_to_heal_for_a_failing_service_and_only_inventory_names_pass() -> None:
    # an operator's mapping: nginx failing as stale_pidfile on web1 is healed as redis there (any declared service)
    watch = Watch.of(FLEET, [], EventMapping.of(None, "failure_class == 'stale_pidfile' && 'redis' || service"))
    requests, notes = watch.observe(round_output(nginx_healthy=False))
    assert [(request.host, request.service, request.source) for request in requests] == [("web1", "redis", "watchdog")]
    assert requests[0].event()["sentinel"]["summary"] == "80/tcp: connection refused"  # what was seen failing
    assert notes == ["web1: nginx is failing; the mapping heals redis on web1"]


@pytest.mark.parametrize(("host_query", "service_query", "why"), [
    ("'db9'", None, "host 'db9' is not an inventory host"),
    ("'web*'", None, "host 'web*' is not an inventory host"),  # never a pattern
    (None, "'postgresql'", "service 'postgresql' is not declared in autoheal_services of web1 (by its name or its unit's)"),
    (None, "evidence", "names no host and service (host 'web1', service {'pidfile': None})"),
    ("missing.field", None, "names no host and service (host None, service 'nginx')"),
])
def test_a_mapping_that_names_no_declared_service_of_an_inventory_host_heals_nothing_and_says_so(
        host_query: str | None, service_query: str | None, why: str) -> None:
    watch = Watch.of(FLEET, [], EventMapping.of(host_query, service_query))
    assert watch.observe(round_output(nginx_healthy=False)) == ([], [f"web1: nginx is failing, and the mapping names nothing to heal: {why}"])
    # noted at the change, not every round while it stays failing
    assert watch.observe(round_output(nginx_healthy=False)) == ([], [])


def test_the_watchdogs_mapping_is_checked_when_the_source_starts() -> None:
    with pytest.raises(ConfigError) as raised:
        EventMapping.of("host[", None)
    assert raised.value.field == "host_query" and raised.value.value == "host["
    assert EventMapping.of(None, None).service.text == "service" and EventMapping.of("", "").host.text == "host"
