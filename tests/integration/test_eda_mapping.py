"""Alerts from four monitors through the real ansible-rulebook (and its Java rules engine): Alertmanager with the
webhook source's defaults, Grafana, Zabbix and Uptime Kuma with the JMESPath mappings the guide eda.rst gives, each the
body the monitor documents (tests/unit/plugins/plugin_utils/eda/payloads). Each names exactly one inventory host and
service, or nothing; no lab host is touched (the rule prints the event)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT
from rulebook import Rulebook, alertmanager_payload, post_body, post_json

PAYLOADS = ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "eda" / "payloads"
sys.path.insert(0, str(PAYLOADS.parent))
from test_alert_mapping import INVENTORY, MONITORS  # noqa: E402  (the same mappings, inventory and payloads as the unit tests)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_four_monitors_payloads_name_exactly_one_host_and_service_through_ansible_rulebook(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    ports = {monitor: free_port() for monitor in ("alertmanager", *MONITORS)}
    sources = [{"name": "alertmanager", "sentinel.heal.alert_webhook": {"inventory": str(inventory), "port": ports["alertmanager"]}}]
    for monitor, (alerts, host, service) in MONITORS.items():
        sources.append({"name": monitor, "sentinel.heal.alert_webhook": {
            "inventory": str(inventory), "port": ports[monitor], "alerts_query": alerts, "host_query": host, "service_query": service}})
    rules = [{"name": "Print the heal request", "condition": "event.sentinel.host is defined", "action": {"print_event": {"pretty": False}}}]
    (tmp_path / "rulebook.yml").write_text(yaml.safe_dump([{"name": "Mapped alerts", "hosts": "all", "sources": sources, "rules": rules}]))
    command = [str(Path(sys.executable).with_name("ansible-rulebook")), "-r", str(tmp_path / "rulebook.yml"), "-i", str(inventory), "-v"]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    bodies: dict[str, Any] = {"alertmanager": alertmanager_payload("web1", "redis")}
    bodies.update({monitor: json.loads((PAYLOADS / f"{monitor}.json").read_text(encoding="utf-8")) for monitor in MONITORS})
    expected = {"alertmanager": ("web1", "redis", "alertmanager"), "grafana": ("web1", "nginx", "mapped"),
                "zabbix": ("db1", "postgresql", "mapped"), "uptime_kuma": ("web2", "nginx", "mapped")}

    with Rulebook(command, env, tmp_path / "rulebook.log", ready="listening on 127.0.0.1", cwd=tmp_path) as rulebook:
        rulebook.wait_for(r"listening on 127\.0\.0\.1", timeout=60, count=len(ports))
        for monitor, body in bodies.items():
            status, answer = post_json(f"http://127.0.0.1:{ports[monitor]}/{monitor}", body)
            host, service, source = expected[monitor]
            assert status == 202 and answer["accepted"] == [{"host": host, "service": service}], (monitor, answer)
            rulebook.wait_for(f"'host': '{host}', 'service': '{service}', 'source': '{source}'", timeout=30)
        assert answer_of(post_json(f"http://127.0.0.1:{ports['grafana']}/grafana", {"alerts": [
            {"status": "firing", "labels": {"host": "web*", "service": "nginx"}}]})) == ([], ["host 'web*' is not an inventory host"])
        # what no source can read is refused, and the log says from where and why
        assert post_body(f"http://127.0.0.1:{ports['alertmanager']}/alertmanager", b"\xff not json")[0] == 400
        rulebook.wait_for(r"refused a body from 127\.0\.0\.1: it is not JSON \(", timeout=10)
    printed = [line for line in rulebook.output().splitlines() if "'sentinel':" in line]
    assert len(printed) == len(bodies), rulebook.output()[-4000:]  # one event each, nothing for what was ignored


def answer_of(response: tuple[int, Any]) -> tuple[list[Any], list[str]]:
    """What the source answered: accepted (202), or ignored (200, and it says so)."""
    status, answer = response
    assert (status, answer["status"]) == ((202, "accepted") if answer["accepted"] else (200, "ignored")), answer
    return answer["accepted"], answer["ignored"]
