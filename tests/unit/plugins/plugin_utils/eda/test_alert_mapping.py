"""Alerts from other monitors (Grafana, Zabbix, Uptime Kuma), mapped to a host and a service with JMESPath: exactly what
the inventory holds, or nothing. The payloads are written from each monitor's documented webhook body."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from guides import code_block

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import AlertMapping, read_alerts
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet, read_fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

PAYLOADS = Path(__file__).parent / "payloads"
INVENTORY = """
web:
  hosts:
    web1: {ansible_host: 10.0.0.1}
    web2: {ansible_host: 10.0.0.2}
  vars:
    autoheal_services: [{name: nginx, ports: [80]}, {name: redis}]
db:
  hosts:
    db1: {autoheal_services: [{name: postgresql}]}
"""
# alerts_query, host_query, service_query: as the guide eda.rst gives them
MONITORS = {
    "grafana": ("alerts[?status == 'firing']", "labels.host", "labels.service"),
    "zabbix": ("[@][?value == '1']", "host", "service"),
    "uptime_kuma": ("[@][?heartbeat.status == `0`]", "monitor.hostname", "monitor.tags[?name == 'service'].value | [0]"),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    path = tmp_path_factory.mktemp("inventory") / "hosts.yml"
    path.write_text(INVENTORY)
    return read_fleet(str(path))


def payload(monitor: str) -> Any:
    return json.loads((PAYLOADS / f"{monitor}.json").read_text(encoding="utf-8"))


def mapped(monitor: str, body: Any, fleet: Fleet) -> tuple[list[tuple[str, str, str]], list[str]]:
    requests, ignored = read_alerts(body, fleet, mapping=AlertMapping.of(*MONITORS[monitor]))
    return [(request.host, request.service, request.source) for request in requests], ignored


@pytest.mark.parametrize(("monitor", "healed"), [
    ("grafana", [("web1", "nginx", "mapped")]),
    ("zabbix", [("db1", "postgresql", "mapped")]),
    ("uptime_kuma", [("web2", "nginx", "mapped")]),
])
def test_each_monitors_alert_names_its_host_and_service(monitor: str, healed: list[tuple[str, str, str]], fleet: Fleet) -> None:
    requests, ignored = mapped(monitor, payload(monitor), fleet)
    assert requests == healed
    if monitor == "grafana":  # the resolved alert is not one of the alerts; the firing one about sshd is refused
        assert ignored == ["service 'sshd' is not declared in autoheal_services of web2 (by its name or its unit's)"]
    else:
        assert ignored == []


def test_the_mapping_is_documented_for_each_monitor() -> None:
    for monitor, (alerts, host, service) in MONITORS.items():
        source = code_block("eda", monitor).body
        assert f"alerts_query: \"{alerts}\"" in source and f"host_query: \"{host}\"" in source and f"service_query: \"{service}\"" in source


def test_what_is_not_an_alert_by_the_monitors_own_words_heals_nothing(fleet: Fleet) -> None:
    up = payload("uptime_kuma")
    up["heartbeat"]["status"] = 1
    assert mapped("uptime_kuma", up, fleet) == ([], [])
    recovered = {**payload("zabbix"), "value": "0"}
    assert mapped("zabbix", recovered, fleet) == ([], [])


@pytest.mark.parametrize(("hostname", "why"), [
    ("web*", "host 'web*' is not an inventory host"),
    ("web", "host 'web' is not an inventory host"),
    ("all", "host 'all' is not an inventory host"),
    ("web1; reboot", "host 'web1; reboot' is not an inventory host"),
    (["web1", "web2"], "names no host and service (host ['web1', 'web2'], service 'nginx')"),
    (None, "names no host and service (host None, service 'nginx')"),
])
def test_a_mapped_host_that_is_not_exactly_an_inventory_host_is_ignored_never_widened(hostname: Any, why: str, fleet: Fleet) -> None:
    body = copy.deepcopy(payload("uptime_kuma"))
    body["monitor"]["hostname"] = hostname
    assert mapped("uptime_kuma", body, fleet) == ([], [why])


def test_the_host_may_be_its_address_and_the_service_must_be_declared(fleet: Fleet) -> None:
    body = copy.deepcopy(payload("uptime_kuma"))
    body["monitor"]["hostname"] = "10.0.0.2"
    assert mapped("uptime_kuma", body, fleet) == ([("web2", "nginx", "mapped")], [])
    body["monitor"]["tags"][0]["value"] = "postgresql"
    assert mapped("uptime_kuma", body, fleet) == (
        [], ["service 'postgresql' is not declared in autoheal_services of web2 (by its name or its unit's)"])


@pytest.mark.parametrize(("queries", "field", "said"), [
    ((None, "labels.host", None), "host_query", "go together"),
    ((None, None, "labels.service"), "service_query", "go together"),
    (("alerts", None, None), "alerts_query", "needs host_query and service_query"),
    (("alerts[?", "labels.host", "labels.service"), "alerts_query", "invalid JMESPath expression"),
    ((None, "labels.host", "nosuch(labels)"), "service_query", "unknown function: nosuch()"),
])
def test_a_bad_mapping_is_refused_when_the_source_starts(queries: tuple[Any, Any, Any], field: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AlertMapping.of(*queries)
    assert caught.value.field == field and said in str(caught.value)


def test_without_queries_alertmanager_and_plain_json_are_read_as_before() -> None:
    assert AlertMapping.of(None, None, None) is None and AlertMapping.of("", "", "") is None


def test_an_inventory_whose_variables_use_a_lookup_is_read_outside_ansibles_own_commands(tmp_path: Path) -> None:
    """ansible-rulebook starts the source in a Python of its own, where no Ansible CLI put the collection loader in place:
    the inventory's lookup must still be found (a fresh interpreter, as the source has), and the next source of the
    rulebook must still start: ansible-rulebook runs each with runpy.run_path, which the loader's path hook broke."""
    (tmp_path / "port").write_text("8081")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"web1": {"autoheal_services": [
        {"name": "apache2", "ports": ["{{ lookup('ansible.builtin.file', '" + str(tmp_path / "port") + "') | int }}"]}]}}}}))
    # the directory that holds ansible_collections/, as the source is installed
    collections = Path(read_fleet.__code__.co_filename).parents[6]
    source = collections / "ansible_collections" / "sentinel" / "heal" / "extensions" / "eda" / "plugins" / "event_source" / "alert_webhook.py"
    read = (f"from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import read_fleet; "
            f"print(read_fleet({str(inventory)!r}).services); import runpy; print(callable(runpy.run_path({str(source)!r})['main']))")
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(collections)!r}); {read}"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and done.stdout.split("\n")[:2] == ["{'web1': ('apache2',)}", "True"], done.stderr
