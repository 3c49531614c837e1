"""The guard in the contexts of real incidents: each built as the loop builds it, from service_check's failure
(``Failure.from_check`` -> ``PolicyContext.from_failure``), its evidence shaped as service_check reports it on a
Debian host with systemd - or gathered by service_check itself on this machine.

What an SRE runs first to look at and repair an nginx, PostgreSQL or redis incident runs unattended; another
service's process on the incident's port is that service, and stopping it waits for a person.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._probe import check_services
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure

POLICY = load_policy()
SYSTEMD = {"service_manager": "systemd", "os": {"id": "debian", "version_id": "12"}, "maintenance": None}
APACHE, SQUATTER = 4321, 4388


def _failure(spec: dict[str, Any], failure_class: str, **evidence: Any) -> Failure:
    """A failure as service_check returns it: every key of its evidence, the given ones as the host reported them."""
    reported: dict[str, Any] = {
        "status": {"command": f"systemctl status --no-pager --lines=0 {spec.get('service') or spec['name']}", "rc": 3, "output": ""},
        "logs": {}, "started_at": None, "utc_offset": 0, "port_owners": [], "pidfile": None, "processes": [], "paths": [],
        "sockets": [], "disk": [], "path_owners": {}, "mounts": ["/"], "packages": {"names": [], "etc": []}, "unit": None,
        "installed": {"unit": True, "init_script": True, "program": "/usr/sbin/x"}, "changes": None, "collected_at": 0.0,
    }
    reported.update(evidence)
    return Failure.from_check("node1", {"name": spec["name"], "failure_class": failure_class, "summary": "", "spec": spec,
                                        "evidence": reported}, SYSTEMD)


def _unit(unit_id: str, names: str | None = None, fragment: str | None = None) -> dict[str, Any]:
    return {"Id": unit_id, "Names": names or unit_id, "LoadState": "loaded", "ActiveState": "failed", "SubState": "failed",
            "FragmentPath": fragment or f"/lib/systemd/system/{unit_id}", "DropInPaths": "", "journal": [], "cause": None}


NGINX = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"],
         "http": {"url": "http://127.0.0.1/"}}


def _owner(pid: int, process: str, unit: str | None, **marks: Any) -> dict[str, Any]:
    return {"port": 80, "pid": pid, "process": process, "cmdline": process, "unit": unit, "own": False, "service": None, **marks}


def _nginx_port_taken(*owners: dict[str, Any], unit_read: bool = True) -> PolicyContext:
    return PolicyContext.from_failure(_failure(
        NGINX, "port_conflict", port_owners=list(owners), unit=_unit("nginx.service") if unit_read else None,
        pidfile={"path": "/run/nginx.pid", "exists": False, "pid": None, "alive": False, "process": None}))


def _decide(context: PolicyContext, *plan: str) -> list[tuple[str, str]]:
    verdicts, _decision = evaluate_plan(list(plan), context, POLICY)
    return [(verdict.decision.value, verdict.rule) for verdict in verdicts]


# ---- another service on the incident's port is that service, never a squatter -----------------------------------

@pytest.mark.parametrize(("owner", "expected"), [
    # apache2.service holds nginx's port: stopping it is stopping apache2, as systemctl stop apache2 would
    (_owner(APACHE, "apache2", "apache2.service"), ("approve", "signal-another-service")),
    # a process of another unit carries nginx's own name: that unit's nginx, not an orphan of this one
    (_owner(APACHE, "nginx", "nginx-admin.service"), ("approve", "signal-another-service")),
    # on a host without systemd: another declared service's process (service_check names it)
    (_owner(APACHE, "apache2", None, service="apache2"), ("approve", "signal-another-service")),
    # a process started by hand in a login session, or with no unit at all: a squatter
    (_owner(SQUATTER, "python3", "session-3.scope"), ("allow", "kill-port-squatter")),
    (_owner(SQUATTER, "python3", None), ("allow", "kill-port-squatter")),
    # the incident's own unit's process (its cgroup): the service's own, also where systemctl could not say more
    (_owner(SQUATTER, "nginx", "nginx.service", own=True), ("allow", "signal-own-process")),
    ({key: value for key, value in _owner(SQUATTER, "nginx", "nginx.service").items() if key != "own"}, ("allow", "signal-own-process")),
])
def test_a_port_holder_of_another_service_is_that_service_and_only_one_outside_every_service_is_a_squatter(
        owner: dict[str, Any], expected: tuple[str, str]) -> None:
    context = _nginx_port_taken(owner, unit_read="own" in owner)
    assert _decide(context, f"kill -TERM {owner['pid']}", "service nginx start")[0] == expected
    if expected[1] == "signal-another-service":
        assert _decide(context, f"kill {owner['pid']}")[0] == expected  # the default signal is TERM too
        assert _decide(context, f"kill -HUP {owner['pid']}")[0] == expected  # nor is it nginx's to reload
        assert _decide(context, "systemctl stop apache2")[0][0] == "approve"


@pytest.fixture
def listener() -> Iterator[tuple[int, int]]:
    """A process of this machine listening on a TCP port: (its pid, the port)."""
    process = subprocess.Popen([sys.executable, "-c", "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
                                "print(s.getsockname()[1], flush=True)\ntime.sleep(120)"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    yield process.pid, port
    process.kill()
    process.wait()


def _checked(*services: dict[str, Any]) -> Failure:
    result = check_services(dict(services=list(services), log_lines=5, redact_values=[], evidence_commands=[]))
    return Failure.from_check("localhost", result["failures"][0], result["facts"])


@pytest.mark.parametrize("declared", ["process", "pidfile", "none"])
def test_a_port_holder_service_check_finds_to_be_another_declared_service_is_that_service(
        listener: tuple[int, int], tmp_path: Path, declared: str) -> None:
    pid, port = listener
    web = {"name": "web", "status_check": False, "ports": [port], "process": "no-such-webserver"}
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    (tmp_path / "other.pid").write_text(f"{pid}\n")
    others = {"process": [{"name": "other", "status_check": False, "process": comm}],
              "pidfile": [{"name": "other", "status_check": False, "process": "no-such-daemon", "pidfile": str(tmp_path / "other.pid"),
                           "check_command": "true"}],
              "none": []}[declared]
    failure = _checked(web, *others)
    assert failure.failure_class == "port_conflict"
    [verdict], _decision = evaluate_plan([f"kill -TERM {pid}"], PolicyContext.from_failure(failure), POLICY)
    assert (verdict.decision.value, verdict.rule) == (("allow", "kill-port-squatter") if declared == "none" else
                                                      ("approve", "signal-another-service"))


# ---- a unit under every name systemd knows it by ----------------------------------------------------------------

REDIS = {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server", "pidfile": "/run/redis/redis-server.pid",
         "logs": ["/var/log/redis/redis-server.log"], "user": "redis", "paths": ["/var/lib/redis", "/run/redis"]}


def _redis_down(names: str) -> PolicyContext:
    return PolicyContext.from_failure(_failure(REDIS, "not_running", unit=_unit("redis-server.service", names)))


@pytest.mark.parametrize(("plan", "expected"), [
    (["systemctl restart redis"], [("allow", "systemctl-control")]),
    (["journalctl -u redis -n 50 --no-pager"], [("allow", "journal-reading")]),
    (["systemctl status redis.service"], [("allow", "systemctl-status-own-unit")]),
    # the alias is the unit: stopped under one name, started under the other, nothing is left stopped
    (["systemctl stop redis", "systemctl start redis-server"], [("allow", "systemctl-control")] * 2),
    (["systemctl stop redis-server", "systemctl start redis"], [("allow", "systemctl-control")] * 2),
    (["systemctl stop redis"], [("approve", "plan-leaves-service-stopped")]),
])
def test_an_alias_systemd_reports_for_the_incidents_unit_is_that_unit(plan: list[str], expected: list[tuple[str, str]]) -> None:
    assert _decide(_redis_down("redis-server.service redis.service"), *plan) == expected


@pytest.mark.parametrize("command", ["systemctl restart redis", "journalctl -u redis -n 50", "systemctl restart redis-sentinel"])
def test_a_name_systemd_does_not_report_for_the_unit_is_not_the_incidents(command: str) -> None:
    """No alias without the host's word for it (redis.service exists only where the unit was enabled), and a name that
    merely starts like the service's is another unit."""
    assert _decide(_redis_down("redis-server.service"), command)[0][0] == "approve"
