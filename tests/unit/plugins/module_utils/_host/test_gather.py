"""The evidence of a service (module_utils/_host/gather.py): its own processes are its unit's cgroup or its pid
file's tree, never its name's, and who holds its ports (a /proc of the test's own, tests/fake_proc.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_proc import FakeProcess, evidence_on

REDIS_UNIT = {"Id": "redis-server.service", "Names": "redis-server.service redis.service", "ActiveState": "failed"}


def test_on_systemd_the_services_own_processes_are_its_units_and_not_another_of_its_name(monkeypatch: pytest.MonkeyPatch,
                                                                                         tmp_path: Path) -> None:
    """A second redis-server a person started outside systemd (its own port, the redis account) carries the service's
    name: it is among what runs by that name, never among the service's own processes."""
    evidence = evidence_on(monkeypatch, tmp_path, {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server"},
                           "systemd", [FakeProcess(700, "redis-server", unit="redis-server.service", uid=110, ports=(6379,)),
                                       FakeProcess(701, "redis-server", ppid=700, unit="redis-server.service", uid=110),
                                       FakeProcess(900, "redis-server", unit="session-3.scope", uid=110, ports=(6380,)),
                                       FakeProcess(950, "redis-server", uid=110)],
                           unit=REDIS_UNIT)
    assert evidence["service_pids"] == [700, 701]
    assert evidence["processes"] == [700, 701, 900, 950]
    [owner] = evidence["port_owners"]
    assert (owner["pid"], owner["own"], owner["root"]) == (700, True, False)


@pytest.mark.parametrize("triggered_by, own", [("mariadb.socket", True), ("", False), ("mariadb.path", False)])
def test_systemd_holding_the_port_of_a_socket_activated_service_is_the_services_own_and_no_stranger(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, triggered_by: str, own: bool) -> None:
    """bookworm's MariaDB is started by mariadb.socket: pid 1 holds port 3306 while the server restarts (#52)."""
    unit = {"Id": "mariadb.service", "Names": "mariadb.service mysql.service", "ActiveState": "activating", "TriggeredBy": triggered_by}
    evidence = evidence_on(monkeypatch, tmp_path, {"name": "db", "service": "mariadb", "ports": [3306], "process": "mariadbd"},
                           "systemd", [FakeProcess(1, "systemd", unit="init.scope", uid=0, ports=(3306,))], unit=unit)
    [owner] = evidence["port_owners"]
    assert (owner["pid"], owner["own"]) == (1, own)


def test_without_systemd_the_services_own_processes_are_its_pid_files_and_what_descends_from_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pidfile = tmp_path / "nginx.pid"
    pidfile.write_text("800\n")
    spec = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": str(pidfile)}
    host = [FakeProcess(800, "nginx", uid=0, ports=(80,)), FakeProcess(801, "nginx", ppid=800, uid=33),
            FakeProcess(802, "nginx", ppid=800, uid=33), FakeProcess(803, "sh", ppid=802, uid=33),
            # another nginx, a person's test instance: its name, not its parent
            FakeProcess(850, "nginx", uid=0, ports=(8080,)), FakeProcess(851, "nginx", ppid=850, uid=33)]
    evidence = evidence_on(monkeypatch, tmp_path, spec, "sysv", host)
    assert evidence["service_pids"] == [800, 801, 802, 803]
    assert evidence["processes"] == [800, 801, 802, 850, 851]
    # a pid file whose pid another program now has names no process of the service's
    pidfile.write_text("803\n")
    assert evidence_on(monkeypatch, tmp_path / "reused", spec, "sysv", host)["service_pids"] == []


def test_a_port_owner_says_whether_it_is_roots_and_whether_it_runs_the_services_program(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Debian's redis-server is a link to redis-check-rdb: the kernel names the file the link leads to, and after an
    upgrade replaced it under a running server, that file "(deleted)"."""
    bin_dir = tmp_path / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "redis-check-rdb").write_bytes(b"")
    (bin_dir / "redis-server").symlink_to("redis-check-rdb")
    real = str((bin_dir / "redis-check-rdb").resolve())
    host = [FakeProcess(700, "redis-server", uid=110, exe=real, ports=(6379,)),
            FakeProcess(701, "redis-server", uid=110, exe=real + " (deleted)", ports=(6379,)),
            FakeProcess(702, "redis-server", uid=0, exe="/usr/bin/python3", ports=(6379,)),
            FakeProcess(703, "dbus-broker", uid=0, ports=(6379,))]
    evidence = evidence_on(monkeypatch, tmp_path, {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server"},
                           "sysv", host, program=str(bin_dir / "redis-server"))
    assert sorted((owner["pid"], owner["root"], owner["service_program"]) for owner in evidence["port_owners"]) == [
        (700, False, True), (701, False, True), (702, True, False), (703, True, False)]
