"""Event-Driven Ansible on the lab: the real ansible-rulebook (and its Java rules engine) running the collection's
rulebooks and event sources, healing real services on the lab's hosts.

- an Alertmanager alert posted to 127.0.0.1 heals the named service on the named host, and only there;
- an alert naming the service by its unit, as node_exporter's systemd collector does, heals the declared service;
- an alert about another service of a host being healed waits for that heal (one heal at a time on a host);
- a burst of 20 identical alerts, and the same alert again while the heal runs, make one heal;
- a hostile alert (hosts and services outside the inventory, patterns, shell text) runs nothing;
- nginx killed under the watchdog is healed with no other input, and the watchdog stops cleanly;
- the watchdog's mapping (the example of the guide eda.rst) heals nginx when a check-only service through it fails;
- heal.yml with autoheal_target_services checks only those services, and refuses one the host does not declare.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from conftest import Faults, RollOut, episodes, one_line, run_playbook
from guides import code_block
from rulebook import Rulebook, alertmanager_payload, answers, eda_inventory, post_json, systemd_unit_alert

pytestmark = pytest.mark.lab

NGINX = {"node1": "http://10.77.0.11/", "node2": "http://10.77.0.12/"}
JINJA_MARK = "/tmp/sentinel-heal-eda-jinja-rendered"
JINJA_IN_LOG = "{{ lookup('pipe', 'touch " + JINJA_MARK + "') }}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answers(url: str, timeout: float) -> float:
    started = time.monotonic()
    while not answers(url):
        assert time.monotonic() - started < timeout, f"{url} did not answer within {timeout:g} s"
        time.sleep(0.2)
    return time.monotonic() - started


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def alert_rulebook(lab: Any, tmp_path: Path, state_dir: Path) -> Iterator[tuple[Rulebook, str]]:
    port = free_port()
    inventory = eda_inventory(tmp_path / "inventory", state_dir)
    with Rulebook.of("heal_on_alert", inventory, tmp_path / "rulebook.log", ready="listening on 127.0.0.1",
                     variables={"SENTINEL_HEAL_PORT": str(port)}) as rulebook:
        yield rulebook, f"http://127.0.0.1:{port}/alerts"


def test_an_alert_heals_the_named_service_on_the_named_host_once(alert_rulebook: tuple[Rulebook, str], faults: Faults, state_dir: Path) -> None:
    rulebook, url = alert_rulebook
    faults.inject("node1", "nginx-killed")
    faults.inject("node2", "nginx-killed")   # the same failure on another host: not named, not touched
    faults.inject("node1", "redis-killed")   # another service of the named host: not named, not touched
    assert not answers(NGINX["node1"]) and not answers(NGINX["node2"])
    alert = alertmanager_payload("node1", "nginx", alertname="NginxDown")
    # a burst of 20 identical alerts (Alertmanager's repeats, several Prometheus servers)
    for _burst in range(20):
        status, answer = post_json(url, alert)
        assert (status, answer["accepted"]) == (202, [{"host": "node1", "service": "nginx"}])
    rulebook.wait_for(r"^PLAY \[Heal the declared services\]", timeout=30)
    status, _answer = post_json(url, alert)   # and once more while the heal runs
    assert status == 202
    wait_until_answers(NGINX["node1"], timeout=60)
    rulebook.wait_for(r"^PLAY RECAP", timeout=60)
    time.sleep(3)  # time enough for a second job to start, were one to
    assert rulebook.heals() == 1, rulebook.output()
    healed = [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state_dir)]
    assert healed == [("node1", "nginx", "healed")], rulebook.output()
    assert not answers(NGINX["node2"]), "node2 was healed, but no alert named it"
    assert "node2" not in rulebook.output().split("PLAY [Heal the declared services]", 1)[1]


def test_an_alert_that_fires_again_after_the_heal_is_its_relapse_not_a_resend(
        alert_rulebook: tuple[Rulebook, str], faults: Faults, state_dir: Path) -> None:
    """Alertmanager resends one firing with the same startsAt, and the throttle holds it back; nginx down again after
    the heal fires anew (another startsAt): a job of its own, which handles it as the heal's relapse."""
    rulebook, url = alert_rulebook
    faults.inject("node1", "nginx-killed")
    first = alertmanager_payload("node1", "nginx", alertname="NginxDown")
    assert post_json(url, first)[0] == 202
    wait_until_answers(NGINX["node1"], timeout=60)
    rulebook.wait_for(r"^PLAY RECAP", timeout=60)
    assert post_json(url, first)[0] == 202  # a resend of the same firing: nothing
    faults.inject("node1", "nginx-killed")
    again = alertmanager_payload("node1", "nginx", alertname="NginxDown")
    again["alerts"][0]["startsAt"] = "2026-01-01T00:07:30Z"
    assert post_json(url, again)[0] == 202
    wait_until_answers(NGINX["node1"], timeout=60)
    rulebook.wait_for(r"^PLAY RECAP", timeout=60, count=2)
    time.sleep(3)  # time enough for a third job to start, were one to
    assert rulebook.heals() == 2, rulebook.output()
    rows = episodes(state_dir)
    assert [(row["outcome"], row["relapsed_from"]) for row in rows] == [("healed", None), ("healed", rows[0]["id"])], rulebook.output()
    assert " (episode 1); failed again at " in rulebook.output()


def test_an_alert_naming_the_unit_as_node_exporter_does_heals_its_service(alert_rulebook: tuple[Rulebook, str], faults: Faults,
                                                                          state_dir: Path) -> None:
    """node_exporter's systemd collector names redis by its unit (redis-server.service) and node1 by its address and
    port: the alert heals the declared redis there (a stray process on its port: systemd's restarts do not help)."""
    rulebook, url = alert_rulebook
    faults.inject("node1", "redis-port-squat")
    status, answer = post_json(url, systemd_unit_alert("10.77.0.11:9100", "redis-server.service"))
    assert (status, answer["status"], answer["accepted"]) == (202, "accepted", [{"host": "node1", "service": "redis"}]), answer
    rulebook.wait_for(r"^PLAY RECAP", timeout=90)
    healed = [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state_dir)]
    assert healed == [("node1", "redis", "healed")], rulebook.output()
    assert faults.lab.run_in("node1", ["redis-cli", "ping"], timeout=30).stdout.strip() == "PONG"


HOSTILE = [
    {"host": "evil.example.com", "service": "nginx"},
    {"host": "all", "service": "nginx"},
    {"host": "lab", "service": "nginx"},                  # a group
    {"host": "node*", "service": "nginx"},                # a pattern
    {"host": "node1,node2", "service": "nginx"},          # a list
    {"host": "node1:!node2", "service": "nginx"},         # group arithmetic
    {"host": "node1", "service": "sshd"},                 # a service node1 does not declare
    {"host": "node1", "service": "nginx; touch /tmp/sentinel-heal-pwned"},
    {"host": "node1$(touch /tmp/sentinel-heal-pwned)", "service": "nginx"},
]


def test_a_hostile_alert_runs_nothing(alert_rulebook: tuple[Rulebook, str], faults: Faults, state_dir: Path) -> None:
    rulebook, url = alert_rulebook
    faults.inject("node1", "nginx-killed")   # something a widened alert would find to heal
    for labels in HOSTILE:
        alert = alertmanager_payload(labels["host"], labels["service"], alertname="$(touch /tmp/sentinel-heal-pwned)",
                                     runbook="`touch /tmp/sentinel-heal-pwned`")
        for body in (alert, labels):   # as Alertmanager sends it, and as plain JSON
            status, answer = post_json(url, body)
            assert (status, answer["status"], answer["accepted"], len(answer["ignored"])) == (200, "ignored", [], 1), labels
    time.sleep(3)
    assert rulebook.heals() == 0, rulebook.output()
    assert rulebook.output().count("ignored an alert") == 2 * len(HOSTILE)
    assert episodes(state_dir) == []
    assert not answers(NGINX["node1"])
    assert not Path("/tmp/sentinel-heal-pwned").exists()
    assert "pwned" not in sh_any(faults)


def sh_any(faults: Faults) -> str:
    """What node1's /tmp holds: a shell the alert's text reached would have left its mark there."""
    return str(faults.lab.run_in("node1", ["ls", "-a", "/tmp"], timeout=30).stdout)


def test_the_watchdog_heals_a_killed_nginx_with_no_other_input(lab: Any, faults: Faults, tmp_path: Path, state_dir: Path) -> None:
    inventory = eda_inventory(tmp_path / "inventory", state_dir)
    rulebook = Rulebook.of("watchdog", inventory, tmp_path / "rulebook.log", ready="watching",
                           variables={"SENTINEL_HEAL_INTERVAL": "2"})
    with rulebook:
        time.sleep(4)  # a healthy round or two first: the fault comes under a running watch
        assert rulebook.heals() == 0
        # a line of nginx's error log is text from anyone who reaches nginx: the evidence the event carries into the job
        # (ansible-rulebook's ansible_eda variable) then holds a template that must never be rendered. Written now, with
        # nginx's time, so that it is of this run of nginx whatever earlier tests left in the log
        faults.lab.run_in("node1", ["sh", "-c", 'printf "%s [error] 1#1: %s\\n" "$(date "+%Y/%m/%d %H:%M:%S")" "$0" >> /var/log/nginx/error.log',
                                    JINJA_IN_LOG], timeout=30)
        faults.inject("node1", "nginx-killed")
        wait_until_answers(NGINX["node1"], timeout=60)
        rulebook.wait_for(r"^PLAY RECAP", timeout=60)
        time.sleep(4)  # the rounds after the heal see it healthy: no second heal
        assert rulebook.heals() == 1, rulebook.output()
        assert "node1: nginx is failing" in rulebook.output()
        [episode] = episodes(state_dir)
        assert (episode["host"], episode["service"], episode["outcome"]) == ("node1", "nginx", "healed")
        assert "lookup('pipe'" in json.dumps(episode["evidence"]), episode["evidence"]
        assert not Path(JINJA_MARK).exists()
        # Ctrl-C: ansible-rulebook ends as an interrupted program does (130), the source's round stopped with it
        assert rulebook.stop() == 130, rulebook.output()[-3000:]
    assert "Traceback" not in rulebook.output()
    assert rulebook.leftovers() == []


def test_the_watchdogs_mapping_heals_the_service_it_names_for_a_failing_check(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path, state_dir: Path) -> None:
    """The example of the guide eda.rst as written: a check-only service `app` (nginx's page) declared on node1, and the mapping
    that heals nginx when `app` fails."""
    inventory = eda_inventory(tmp_path / "inventory", state_dir)
    declared = yaml.safe_load((inventory / "group_vars" / "lab.yml").read_text())["autoheal_services"]
    app = {"name": "app", "status_check": False, "http": {"url": "http://127.0.0.1/", "body": "Welcome to nginx"}}
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "node1.yml").write_text(yaml.safe_dump({"autoheal_services": [*declared, app]}))
    roll_out("-e", json.dumps({"autoheal_services": [*declared, app]}), hosts="node1")  # a service of the test's own: node1's executor learns it
    [mapping] = re.findall(r'^export SENTINEL_HEAL_SERVICE_QUERY="([^"]+)"$', code_block("eda", "mapping").body, re.MULTILINE)
    rulebook = Rulebook.of("watchdog", inventory, tmp_path / "rulebook.log", ready="watching",
                           variables={"SENTINEL_HEAL_INTERVAL": "2", "SENTINEL_HEAL_SERVICE_QUERY": mapping})
    with rulebook:
        time.sleep(4)
        assert rulebook.heals() == 0
        faults.inject("node1", "nginx-killed")
        wait_until_answers(NGINX["node1"], timeout=60)
        rulebook.wait_for(r"^PLAY RECAP", timeout=60)
        time.sleep(4)
        # app's event and nginx's own name the same heal: one, of nginx, within the rulebook's throttle
        assert rulebook.heals() == 1, rulebook.output()
        assert "node1: app is failing; the mapping heals nginx on node1" in rulebook.output()
        assert [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state_dir)] == [("node1", "nginx", "healed")]
        assert rulebook.stop() == 130, rulebook.output()[-3000:]
    assert "Traceback" not in rulebook.output()
    assert rulebook.leftovers() == []


def test_an_alert_about_another_service_during_a_heal_waits_for_it(alert_rulebook: tuple[Rulebook, str], faults: Faults, state_dir: Path) -> None:
    rulebook, url = alert_rulebook
    faults.inject("node1", "nginx-killed")
    faults.inject("node1", "postgres-killed")
    assert post_json(url, {"host": "node1", "service": "nginx"})[0] == 202
    rulebook.wait_for(r"^PLAY \[Heal the declared services\]", timeout=30)
    assert post_json(url, {"host": "node1", "service": "postgresql"})[0] == 202   # while nginx's heal runs on node1
    rulebook.wait_for(r"^PLAY RECAP", timeout=90, count=2)
    # one heal on the host at a time: the second play starts after the first one's recap
    plays_and_recaps = re.findall(r"^(PLAY \[Heal the declared services\]|PLAY RECAP)", rulebook.output(), re.M)
    assert plays_and_recaps == ["PLAY [Heal the declared services]", "PLAY RECAP"] * 2, rulebook.output()
    assert sorted((episode["service"], episode["outcome"]) for episode in episodes(state_dir)) == [("nginx", "healed"), ("postgresql", "healed")]


def test_a_job_about_one_service_checks_only_it_and_refuses_an_undeclared_one(lab: Any, faults: Faults, state_dir: Path) -> None:
    faults.inject("node1", "nginx-killed")
    only_redis = run_playbook("playbooks/heal.yml", "-l", "node1", "-e", '{"autoheal_target_services": ["redis"]}', state_dir=state_dir)
    assert only_redis.rc == 0 and "node1: every declared service is healthy" in one_line(only_redis.output), only_redis.output
    assert not answers(NGINX["node1"]) and episodes(state_dir) == []
    # as text too (an AWX survey's answer, -e NAME=VALUE): split at the commas
    undeclared = run_playbook("playbooks/heal.yml", "-l", "node1", "-e", "autoheal_target_services=nginx,sshd", state_dir=state_dir)
    refused = one_line(undeclared.output)
    assert undeclared.rc == 2 and "target_services names a service the host does not declare; field: target_services" in refused, refused
    assert "sshd" in refused.split("field: target_services", 1)[1][:40], refused
    assert not answers(NGINX["node1"]) and episodes(state_dir) == []


def test_alerts_of_many_hosts_at_once_are_one_heal_job_and_one_fleet_incident_and_a_restart_keeps_the_window(
        lab: Any, faults: Faults, tmp_path: Path, state_dir: Path) -> None:
    """Three hosts alerted about nginx in one body, with the inventory's autoheal_fleet_min_hosts at 2: one fleet event,
    one heal job for the three, in which the two systemd hosts, failing alike, are one fleet incident (a plan verified
    before run on its canary first) - the sysv host fails in other words, so on its own - and after a restart of the
    rulebook, within the window, an alert about nginx again starts no job."""
    hosts = ("node1", "node2", "node3")
    inventory = eda_inventory(tmp_path / "inventory", state_dir, autoheal_fleet_min_hosts=2)
    for name in hosts:
        faults.inject(name, "nginx-killed")
    body = alertmanager_payload("node1", "nginx")
    body["alerts"] = [dict(body["alerts"][0], labels=dict(body["alerts"][0]["labels"], host=name)) for name in hosts]
    port = free_port()
    with Rulebook.of("heal_on_alert", inventory, tmp_path / "rulebook.log", ready="listening on 127.0.0.1",
                     variables={"SENTINEL_HEAL_PORT": str(port)}) as rulebook:
        status, answer = post_json(f"http://127.0.0.1:{port}/alerts", body)
        assert (status, answer["fleet"]) == (202, [{"hosts": list(hosts), "service": "nginx"}]), answer
        rulebook.wait_for(r"^PLAY RECAP", timeout=120)
        time.sleep(3)  # time enough for a second job to start, were one to
        assert rulebook.heals() == 1, rulebook.output()
    assert sorted((episode["host"], episode["outcome"]) for episode in episodes(state_dir)) == [(name, "healed") for name in hosts]
    with sqlite3.connect(state_dir / "memory.sqlite3") as conn:
        [(incident_id, closed_at)] = conn.execute("SELECT id, closed_at FROM fleet_incidents").fetchall()
        members = {row[0] for row in conn.execute("SELECT host FROM fleet_incident_hosts WHERE incident_id = ?", (incident_id,))}
    assert members == {"node1", "node2"} and closed_at is not None  # its last host healed closed it
    assert f"fleet incident {incident_id} closed" in rulebook.output()

    faults.undo_all()
    faults.inject("node1", "nginx-killed")
    with Rulebook.of("heal_on_alert", inventory, tmp_path / "restarted.log", ready="listening on 127.0.0.1",
                     variables={"SENTINEL_HEAL_PORT": str(port)}) as restarted:
        status, answer = post_json(f"http://127.0.0.1:{port}/alerts", alertmanager_payload("node1", "nginx"))
        assert (status, answer["absorbed"]) == (202, ["nginx on node1: the fleet job 1 of this window covers it (no job of its own)"])
        time.sleep(5)
        assert restarted.heals() == 0, restarted.output()
    assert "no job: nginx on node1: the fleet job 1 of this window covers it" in restarted.output()
