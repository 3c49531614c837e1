"""Debian's two releases side by side, with the kinds of services no runbook names: node1 boots bookworm (Debian 12),
node2 and node3 trixie (Debian 13: systemd 257, PostgreSQL 17), node3 under sysv. Each runs, besides the lab's nginx,
PostgreSQL and redis, a second web server (apache2 on :8081), a proxy in front of it (haproxy on :8080), a second SQL
database (MariaDB) and, on the systemd hosts, a cache (memcached) - declared as an operator declares their own
(inventories/releases.yml), nothing added for the collection's sake. Each fault class runs on several services and
releases in one heal: a killed process, a port squatter, a missing directory, a configuration typo made after a
healthy check (restored once a person approved the diff the job showed), and a unit killed into its start limit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import SYSV_HOSTS, Faults, acted, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
RELEASES = {"node2": "trixie", "node3": "trixie"}
INVENTORY = ("-i", "tests/integration/inventories/releases.yml")
# the services the lab image has off at boot: each host's, with its port
EXTRA = {"apache2": 8081, "haproxy": 8080, "mariadb": 3306, "memcached": 11211}
SYSTEMD_ONLY = {"memcached"}


def services_of(host: str) -> list[str]:
    return [name for name in EXTRA if host != "node3" or name not in SYSTEMD_ONLY]


def listens(lab: Any, host: str, port: int) -> bool:
    return bool(sh(lab, host, "ss", "-Hltn", f"sport = :{port}").strip())


pytestmark = pytest.mark.own_fleet


@pytest.fixture(scope="module")
def releases(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's fleet with node2 and node3 on trixie, the extra services started, and the executors (node1, node2)
    told of them (sentinel.heal.host with the inventory's services); a test after this module on the session's fleet
    boots it again (conftest's own_fleet)."""
    lab.up(inits=SYSV_HOSTS, suites=RELEASES)
    for host in lab.HOSTS:
        for name in services_of(host):
            sh(lab, host, "service", name, "start")
    rolled = run_playbook("playbooks/host.yml", *INVENTORY, "-e", "autoheal_target=executor", *lab.AS_ADMIN, "--tags", "host_policy",
                          state_dir=tmp_path_factory.mktemp("releases-roll-out"))
    assert rolled.rc == 0, rolled.output
    yield lab


def heal(state: Path, *args: str) -> Any:
    return run_playbook(HEAL, *INVENTORY, *args, state_dir=state)


def test_each_host_boots_its_release_and_every_declared_service_is_healthy(releases: Any, tmp_path: Path) -> None:
    assert {status.name: (status.suite, status.init_system) for status in releases.status()} == {
        "node1": ("bookworm", "systemd"), "node2": ("trixie", "systemd"), "node3": ("trixie", "sysv")}
    assert sh(releases, "node1", "cat", "/etc/debian_version").startswith("12.")
    for host in ("node2", "node3"):
        assert sh(releases, host, "cat", "/etc/debian_version").startswith("13.")
        assert sh(releases, host, "ls", "/etc/postgresql").split() == ["17"]
    run = heal(tmp_path)
    assert run.rc == 0, run.output
    for host in releases.HOSTS:
        assert f"{host}: every declared service is healthy" in run.output, run.output


def test_killed_services_heal_and_a_proxy_waits_for_its_backend_rather_than_being_restarted_blindly(
        releases: Any, faults: Faults, tmp_path: Path) -> None:
    """On the sysv host apache2 and MariaDB are killed: haproxy in front of apache2 answers 503 until apache2 is back. Its
    configuration names apache2's address (server apache2 127.0.0.1:8081), so apache2 is healed first and haproxy,
    checked again, answers: nothing runs for it. On the systemd hosts a killed MariaDB (bookworm's, started by its
    socket), a killed haproxy (trixie's) and a killed memcached (Restart=always) are back by systemd's Restart=, or
    healed, and the run says so."""
    faults.inject("node3", "service-killed", "apache2", "8081", "apache2")
    faults.inject("node3", "service-killed", "mariadb", "3306", "mariadbd", "mariadbd-safe")
    faults.inject("node1", "service-killed", "mariadb", "3306", "mariadbd")
    faults.inject("node1", "service-killed", "memcached", "11211", "memcached")
    faults.inject("node2", "service-killed", "haproxy", "8080", "haproxy")
    assert "503" in sh(releases, "node3", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:8080/")
    run = heal(tmp_path)
    said = one_line(run.output)
    assert run.rc == 0, run.output
    assert "node3: apache2 healed in 1 attempt" in said and "node3: mariadb healed in 1 attempt" in said, run.output
    assert "haproxy answers again since what it needs was healed first: apache2 (healed); nothing ran for haproxy" in said, run.output
    assert not any("haproxy" in " ".join(argv) for _purpose, argv in acted(tmp_path, "node3")), acted(tmp_path, "node3")
    for host, port in (("node3", 8081), ("node3", 8080), ("node3", 3306), ("node1", 3306), ("node1", 11211), ("node2", 8080)):
        assert listens(releases, host, port), (host, port)


def test_port_squatters_are_stopped_and_each_service_started_on_both_releases(releases: Any, faults: Faults, tmp_path: Path) -> None:
    """memcached (Restart=always) cycles on the taken port until its start limit stops it: the squatter is stopped and
    the unit reset and started (in a second run: the lab keeps one squatter per host)."""
    squatted = (("node1", "haproxy"), ("node2", "apache2"), ("node3", "mariadb"))
    for host, service in squatted:
        faults.inject(host, "service-port-squat", service, str(EXTRA[service]))
    run = heal(tmp_path)
    said = one_line(run.output)
    assert run.rc == 0, run.output
    faults.inject("node2", "service-port-squat", "memcached", "11211")
    again = heal(tmp_path, "--limit", "node2")
    said += one_line(again.output)
    assert again.rc == 0, again.output
    for host, service in (*squatted, ("node2", "memcached")):
        assert re.search(rf"{host}: {service} healed in 1 attempt with: kill -TERM \d+", said), run.output
        assert "python3" not in sh(releases, host, "ss", "-Hltnp", f"sport = :{EXTRA[service]}")


def test_a_missing_directory_gets_the_owner_and_mode_the_host_showed_while_healthy(releases: Any, faults: Faults, tmp_path: Path) -> None:
    """No table names haproxy's runtime directory or MariaDB's on Debian 13: what they are is read from the host, as the
    directory was while the service passed its checks. (memcached has none it needs: without /run/memcached it runs and
    only says it cannot write its pid file.)"""
    healthy = heal(tmp_path)
    assert healthy.rc == 0, healthy.output
    gone = (("node1", "apache2", "/var/log/apache2"), ("node2", "haproxy", "/run/haproxy"), ("node2", "mariadb", "/run/mysqld"))
    before = {directory: sh(releases, host, "stat", "-c", "%U %G %a", directory) for host, _service, directory in gone}
    for host, service, directory in gone:
        faults.inject(host, "service-directory-gone", service, str(EXTRA[service]), directory)
    run = heal(tmp_path)
    said = one_line(run.output)
    assert run.rc == 0, run.output
    for host, service, directory in gone:
        owner, group, mode = before[directory].split()
        assert f"{host}: {service} healed in 1 attempt with: install -d -m {int(mode, 8):04o} -o {owner} -g {group} {directory}" in said, run.output
        assert sh(releases, host, "stat", "-c", "%U %G %a", directory) == before[directory]
        assert listens(releases, host, EXTRA[service])


def test_a_configuration_typo_after_a_healthy_check_waits_with_its_diff_and_is_restored_once_approved(
        releases: Any, faults: Faults, tmp_path: Path) -> None:
    """apache2's site is edited as sed -i edits a link: sites-enabled/000-default.conf, the link a2ensite made, becomes
    an edited copy; what goes back is the link. memcached's configuration is its command line (an option getopt
    refuses, in a file no package owns), its unit Restart=always."""
    typos = (("node1", "apache2", "/etc/apache2/sites-enabled/000-default.conf", "ServerNmae example.org"),
             ("node2", "haproxy", "/etc/haproxy/haproxy.cfg", "\tbalanse roundrobin"),
             ("node2", "memcached", "/etc/memcached.conf", "--max-conections 1024"),
             ("node3", "mariadb", "/etc/mysql/mariadb.conf.d/50-server.cnf", "innodb_bufer_pool_size = 64M"))
    healthy = heal(tmp_path)  # the last known good configuration, kept while every check passes
    assert healthy.rc == 0, healthy.output
    for host, service, path, line in typos:
        faults.inject(host, "service-config-typo", service, str(EXTRA[service]), path, line)
    waiting = heal(tmp_path)
    said = one_line(waiting.output)
    assert waiting.rc == 0, waiting.output
    plans = {}
    for host, service, path, line in typos:
        found = re.search(rf"{host}: {service} awaits approval of plan ([0-9a-f]{{32}}): sentinel-heal-restore {re.escape(path)} ", said)
        assert found, waiting.output
        plans[host, service] = found[1]
        # the job's own output shows what the restore puts back, where no terminal showed a diff
        link = " as the link to ../sites-available/000-default.conf it was" if service == "apache2" else ""
        assert f"puts back {path}{link}: '-{line.strip()}" in said.replace("\\t", ""), waiting.output
    for host, service, path, line in typos:
        approved = run_playbook(APPROVE, *INVENTORY, "-e", f"plan_id={plans[host, service]}", "-e", "approver=alice", state_dir=tmp_path)
        assert approved.rc == 0 and f"{host}: {service} healed in 1 attempt with: sentinel-heal-restore {path}" in one_line(approved.output), \
            approved.output
        assert line.strip() not in sh(releases, host, "cat", path)
        assert listens(releases, host, EXTRA[service])
    assert sh(releases, "node1", "readlink", typos[0][2]).strip() == "../sites-available/000-default.conf"


def test_a_unit_killed_into_its_start_limit_heals_in_one_run_on_both_releases_and_escalates_with_both_give_ups_when_the_killer_stays(
        releases: Any, faults: Faults, tmp_path: Path) -> None:
    for host in ("node1", "node2"):
        faults.inject(host, "service-killed-into-start-limit", "memcached", "11211")
    run = heal(tmp_path)
    said = one_line(run.output)
    assert run.rc == 0, run.output
    for host in ("node1", "node2"):
        assert f"{host}: memcached healed in 1 attempt with: systemctl reset-failed memcached; systemctl start memcached" in said, run.output
        assert sh(releases, host, "systemctl", "is-active", "memcached").strip() == "active"
    faults.inject("node2", "service-killed-into-start-limit", "memcached", "11211", "keep-killing")
    again = heal(tmp_path / "again", "--limit", "node2")
    said = one_line(again.output)
    assert again.rc != 0 and "node2: memcached escalated" in said, again.output
    assert "attempt 1 ran systemctl reset-failed memcached; systemctl start memcached and it failed again" in said, again.output
    assert "keeps failing under systemd's own Restart=" in said, again.output
