"""The guard in the contexts of real incidents: each built as the loop builds it, from service_check's failure
(``Failure.from_check`` -> ``PolicyContext.from_failure``), its evidence shaped as service_check reports it on a
Debian host with systemd - or gathered by service_check itself on this machine.

What an SRE runs first to look at and repair an nginx, PostgreSQL or redis incident runs unattended; another
service's process on the incident's port is that service, and stopping it waits for a person.

One file of about 600 lines: its tests are incidents made by the same few builders from service_check's evidence
(``_failure``, ``_unit``, ``_owner``, ``_checked``); split, each part would import them all.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from fake_proc import FakeProcess, evidence_on

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import judge_steps
from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import check_services
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure

POLICY = load_policy()
SYSTEMD = {"service_manager": "systemd", "os": {"id": "debian", "version_id": "12"}, "maintenance": None}
APACHE, SQUATTER = 4321, 4388


def _failure(spec: dict[str, Any], failure_class: str, **evidence: Any) -> Failure:
    """A failure as service_check returns it: every key of its evidence, the given ones as the host reported them."""
    reported: dict[str, Any] = {
        "status": {"command": f"systemctl status --no-pager --lines=0 {spec.get('service') or spec['name']}", "rc": 3, "output": ""},
        "logs": {}, "started_at": None, "utc_offset": 0, "port_owners": [], "pidfile": None, "processes": [], "service_pids": [], "paths": [],
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
        listener: tuple[int, int], tmp_path: Path, declared: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pid, port = listener
    # the listener stands for a daemon of an account of its own, whoever runs the tests (root's would be protected)
    monkeypatch.setattr(_processes, "runs_as_root", lambda pid: False)
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


# ---- the service's own processes are its unit's or its pid file's, never its name's --------------------------------

REDIS_SERVER = {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server"}
REDIS_UNIT = {"Id": "redis-server.service", "Names": "redis-server.service redis.service", "ActiveState": "failed"}


def _seen(monkeypatch: pytest.MonkeyPatch, root: Path, spec: dict[str, Any], manager: str, *processes: FakeProcess,
          unit: dict[str, Any] | None = None, program: str | None = None) -> PolicyContext:
    """The context of the incident as the probe reads it on a host that runs ``processes`` (tests/fake_proc.py)."""
    evidence = evidence_on(monkeypatch, root, spec, manager, processes, unit=unit, program=program)
    return PolicyContext.from_failure(Failure.from_check("node1", {"name": spec["name"], "failure_class": "not_running", "summary": "",
                                                                   "spec": spec, "evidence": evidence}, {"service_manager": manager}))


def test_a_process_with_the_services_name_outside_its_unit_is_not_the_services_and_its_units_processes_are(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The lab's redis-server.service incident: a second redis-server a person started outside systemd, on a port of
    its own, under the redis account, was stopped unattended as the service's own. It is nobody the incident knows:
    a person decides; the unit's own processes are the service's."""
    context = _seen(monkeypatch, tmp_path, REDIS_SERVER, "systemd",
                    FakeProcess(700, "redis-server", unit="redis-server.service", uid=110, ports=(6379,)),
                    FakeProcess(701, "redis-server", ppid=700, unit="redis-server.service", uid=110),
                    FakeProcess(900, "redis-server", unit="session-3.scope", uid=110, ports=(6380,)), unit=REDIS_UNIT)
    assert _decide(context, "kill -TERM 900", "service redis-server restart")[0] == ("approve", "default-approve")
    assert _decide(context, "kill -TERM 700", "service redis-server restart")[0] == ("allow", "signal-own-process")
    assert _decide(context, "kill -TERM 701", "service redis-server restart")[0] == ("allow", "signal-own-process")


def test_without_systemd_the_pid_files_process_and_its_children_are_the_services_and_another_of_its_name_is_not(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pidfile = tmp_path / "nginx.pid"
    pidfile.write_text("800\n")
    context = _seen(monkeypatch, tmp_path, {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": str(pidfile)}, "sysv",
                    FakeProcess(800, "nginx", uid=0, ports=(80,)), FakeProcess(801, "nginx", ppid=800, uid=33),
                    FakeProcess(850, "nginx", uid=0, ports=(8080,)), FakeProcess(851, "nginx", ppid=850, uid=33))
    # the master is root's, and the service's own: its pid file names it
    assert _decide(context, "kill -HUP 800")[0] == ("allow", "reload-own-process")
    assert _decide(context, "kill -USR1 801")[0] == ("allow", "nginx-reopen-logs")
    assert _decide(context, "kill -HUP 850")[0] == ("approve", "default-approve")
    assert _decide(context, "kill -TERM 851", "service nginx start")[0] == ("approve", "default-approve")


@pytest.mark.parametrize("name", ["dbus-broker", "systemd-resolve"])
def test_a_roots_process_on_the_port_outside_the_services_unit_is_protected_whatever_its_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    assert name not in POLICY.protected_processes
    nginx = {"name": "nginx", "ports": [80], "process": "nginx"}
    context = _seen(monkeypatch, tmp_path, nginx, "sysv", FakeProcess(4388, name, uid=0, ports=(80,)))
    assert _decide(context, "kill -TERM 4388", "service nginx start")[0] == ("block", "protected-pids-are-never-signalled")
    assert _decide(context, "kill -HUP 4388")[0] == ("block", "protected-pids-are-never-signalled")
    # the same process under an account of its own is a squatter a plan may stop
    context = _seen(monkeypatch, tmp_path / "unprivileged", nginx, "sysv", FakeProcess(4388, name, uid=1000, ports=(80,)))
    assert _decide(context, "kill -TERM 4388", "service nginx start")[0] == ("allow", "kill-port-squatter")


def test_the_workers_a_killed_master_left_on_the_services_port_running_its_program_are_the_services(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """nginx's sysv master was killed, its pid file names it dead, its workers still hold port 80: the service's own,
    bound by the program they run, never by their name alone."""
    program = tmp_path / "usr" / "sbin" / "nginx"
    program.parent.mkdir(parents=True)
    program.write_bytes(b"")
    pidfile = tmp_path / "nginx.pid"
    pidfile.write_text("800\n")
    nginx = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": str(pidfile)}

    def seen(*processes: FakeProcess) -> PolicyContext:
        root = tmp_path / "-".join(str(process.pid) for process in processes)
        if processes[0].unit:
            return _seen(monkeypatch, root, nginx, "systemd", *processes, unit={"Id": "nginx.service", "Names": "nginx.service"},
                         program=str(program))
        return _seen(monkeypatch, root, nginx, "sysv", *processes, program=str(program))

    worker = FakeProcess(801, "nginx", uid=33, exe=str(program.resolve()), ports=(80,))
    workers = seen(worker, FakeProcess(802, "nginx", uid=33, exe=str(program.resolve()), ports=(80,)))
    assert _decide(workers, "kill -TERM 801", "kill -TERM 802", "service nginx start")[:2] == [("allow", "signal-own-process")] * 2
    # all of them in one step, as the runbook of a killed master plans it; never with a pid that is not one of them
    assert _decide(workers, "kill -TERM 801 802", "service nginx start")[0] == ("allow", "signal-own-process")
    assert _decide(workers, "kill -TERM 801 802 1", "service nginx start")[0] != ("allow", "signal-own-process")
    assert _decide(workers, "kill -TERM 801 807", "service nginx start")[0] != ("allow", "signal-own-process")
    assert _decide(workers, "kill -TERM", "service nginx start")[0] != ("allow", "signal-own-process")
    # its name without its program: a squatter, and a person's when root's
    assert _decide(seen(FakeProcess(803, "nginx", uid=33, exe="/usr/bin/python3", ports=(80,))),
                   "kill -TERM 803", "service nginx start")[0] == ("allow", "kill-port-squatter")
    assert _decide(seen(FakeProcess(804, "nginx", uid=0, exe=str(program.resolve()), ports=(80,))),
                   "kill -TERM 804", "service nginx start")[0] == ("block", "protected-pids-are-never-signalled")
    # its program in another unit: that unit's
    assert _decide(seen(FakeProcess(805, "nginx", unit="nginx-admin.service", uid=33, exe=str(program.resolve()), ports=(80,))),
                   "kill -TERM 805", "service nginx start")[0] == ("approve", "signal-another-service")
    # its program on a port that is not the incident's: nobody it knows
    assert _decide(seen(worker, FakeProcess(806, "nginx", uid=33, exe=str(program.resolve()), ports=(8080,))),
                   "kill -TERM 806", "service nginx start")[0] == ("approve", "default-approve")


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


# ---- what an SRE runs first: the shapes of reads and repairs the rules once misread ----------------------------------

POSTGRESQL = {"name": "postgresql", "ports": [5432], "process": "postgres", "user": "postgres",
              "paths": ["/var/lib/postgresql/15/main", "/run/postgresql"], "logs": ["/var/log/postgresql/postgresql-15-main.log"],
              "pidfile": "/var/lib/postgresql/15/main/postmaster.pid", "sockets": ["/run/postgresql/.s.PGSQL.5432"]}
# who owns what on the way to PostgreSQL's declared paths on Debian, as service_check reports it
POSTGRESQL_OWNERS = {"/var": "root", "/var/lib": "root", "/var/lib/postgresql": "postgres", "/var/lib/postgresql/15": "postgres",
                     "/var/lib/postgresql/15/main": "postgres", "/run": "root", "/run/postgresql": "postgres",
                     "/var/log": "root", "/var/log/postgresql": "root", "/var/log/postgresql/postgresql-15-main.log": "postgres"}


def _nginx_config_error() -> PolicyContext:
    return PolicyContext.from_failure(_failure(
        NGINX, "start_failed", unit=_unit("nginx.service"),
        path_owners={"/var": "root", "/var/log": "root", "/var/log/nginx": "root", "/var/log/nginx/error.log": "root", "/run": "root"}))


def _postgresql_down() -> PolicyContext:
    return PolicyContext.from_failure(_failure(
        POSTGRESQL, "not_running", unit=_unit("postgresql@15-main.service", fragment="/lib/systemd/system/postgresql@.service"),
        path_owners=POSTGRESQL_OWNERS))


def _redis_killed() -> PolicyContext:
    return PolicyContext.from_failure(_failure(
        REDIS, "not_running", unit=_unit("redis-server.service", "redis-server.service redis.service"),
        path_owners={"/var": "root", "/var/lib": "root", "/var/lib/redis": "redis", "/run": "root", "/run/redis": "redis"}))


INCIDENTS = {"nginx": _nginx_config_error, "postgresql": _postgresql_down, "redis": _redis_killed}


@pytest.mark.parametrize(("incident", "command", "rule"), [
    # stat's format is its -c option's value, never a path
    ("nginx", "stat -c '%U:%G %a' /var/log/nginx", "describe-files-in-a-format"),
    ("postgresql", "stat -c %a /var/lib/postgresql/15/main", "describe-files-in-a-format"),
    # dpkg's answers about a path, and its check of the installed files against their packages
    ("nginx", "dpkg -S /usr/sbin/nginx", "dpkg-search-paths"),
    ("redis", "dpkg -S /etc/redis/redis.conf", "dpkg-search-paths"),
    ("nginx", "dpkg -V", "dpkg-verify"),
    ("nginx", "dpkg -V nginx-core", "dpkg-verify"),
    # nginx's own configuration as nginx reads it
    ("nginx", "nginx -T", "nginx-config-dump"),
    # a unit's properties that hold no secret, one or several
    ("nginx", "systemctl show -p NRestarts nginx", "systemctl-show-state"),
    ("postgresql", "systemctl show -p ActiveState,SubState,MainPID,ExecMainStatus postgresql@15-main", "systemctl-show-state"),
    ("redis", "systemctl show --property=MemoryCurrent redis-server", "systemctl-show-state-long-option"),
    # curl prints the status, and the newline curl itself reads in -w
    ("nginx", "curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1/", "local-http-probe"),
    ("nginx", 'curl -s -o /dev/null -w "%{http_code} %{time_total}\\n" http://127.0.0.1/', "local-http-probe"),
    # the size of the incident's own data, whose files are secrets to read
    ("postgresql", "du -sh /var/lib/postgresql/15/main/base", "disk-usage-of-the-incidents-data"),
    ("postgresql", "du -sh /var/lib/postgresql/15/main/base /var/lib/postgresql/15/main/pg_wal", "disk-usage-of-the-incidents-data"),
    ("redis", "du -sh /var/lib/redis/appendonlydir", "disk-usage-of-the-incidents-data"),
    ("redis", "du -s /var/lib/redis/dump.rdb", "disk-usage-of-the-incidents-data"),
])
def test_what_an_sre_runs_first_runs_unattended(incident: str, command: str, rule: str) -> None:
    assert _decide(INCIDENTS[incident](), command) == [("allow", rule)]


@pytest.mark.parametrize(("incident", "command"), [
    ("nginx", "stat -c %a /etc/shadow"),                                  # a secret stays one, whatever the format
    ("nginx", "stat -c %a"),                                              # a format is no file
    ("nginx", "dpkg -S /etc/ssl/private/site.key"),
    ("postgresql", "nginx -T"),                                           # another service's configuration, printed
    ("nginx", "nginx -T -c /tmp/other.conf"),                             # another configuration, run as root
    ("nginx", "systemctl show nginx"),                                    # every property, Environment= included
    ("nginx", "systemctl show -p Environment nginx"),
    ("nginx", "systemctl show -p ActiveState,ExecStart nginx"),           # a command line may hold a password
    ("nginx", "systemctl show -p ActiveState, nginx"),
    ("nginx", "curl -s -o /dev/null -w '%{http_code}\\t' http://127.0.0.1/"),  # only curl's newline
    ("nginx", "curl -s -o /dev/null -w '%{url}\\n' http://127.0.0.1/"),
    ("nginx", "curl -s -o /dev/null -w %{http_code}\\\\n http://127.0.0.1/"),  # a backslash a shell would read
    ("nginx", "tail -n 50 '/var/log/nginx/error.log\\n'"),              # a backslash where no rule takes one
    ("redis", "du -sh /var/lib/postgresql/15/main/base"),                 # another service's data
    ("postgresql", "du -sh /var/lib/postgresql/.pgpass"),                 # an account's dot files are no data
    ("postgresql", "du -sh /run/postgresql/server.key"),                  # nor a key beside its socket
    ("postgresql", "du -ah /var/lib/postgresql/15/main/base"),            # every file's name
    ("postgresql", "du -sh /var/lib/postgresql/15/x/../main/base"),
])
def test_what_is_next_to_those_shapes_still_needs_a_person(incident: str, command: str) -> None:
    [(decision, rule)] = _decide(INCIDENTS[incident](), command)
    assert decision != "allow", rule


@pytest.fixture
def left_over_socket() -> Iterator[tuple[Path, Path]]:
    """A socket a killed daemon left in a directory its account owns (PostgreSQL's /run/postgresql), and its lock file
    naming a dead pid: (socket, lock). In a short directory: a socket's path has at most 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="sock") as directory:
        socket_path, lock = Path(directory) / ".s.PGSQL.5432", Path(directory) / ".s.PGSQL.5432.lock"
        subprocess.run([sys.executable, "-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", str(socket_path)],
                       check=True)
        dead = subprocess.Popen(["true"])
        dead.wait()
        lock.write_text(f"{dead.pid}\n{directory}\n")
        os.chown(directory, pwd.getpwnam("nobody").pw_uid, -1)
        yield socket_path, lock


def test_the_left_over_socket_and_lock_service_check_saw_are_read_and_removed_in_one_command(left_over_socket: tuple[Path, Path]) -> None:
    """service_check saw the lock file itself, a file and no link, in the directory the service's account owns: a read
    of it prints the lock, not what a link planted there would lead to; and the remnants go in one rm."""
    socket_path, lock = left_over_socket
    failure = _checked({"name": "postgresql", "status_check": False, "process": "definitely-not-postgres", "paths": [str(socket_path.parent)],
                        "sockets": [str(socket_path)]})
    assert failure.evidence["path_owners"][str(socket_path.parent)] == "nobody"
    context = PolicyContext.from_failure(failure)
    assert _decide(context, f"cat {lock}", f"rm -f {socket_path} {lock}") == [("allow", "read-files"), ("allow", "remove-stale-socket")]
    # what service_check did not see there may be a link the account put in its place: a person reads it
    assert _decide(context, f"cat {socket_path.parent}/notes")[0][0] == "approve"


# ---- a plan that ends where the package wants is judged as the one repair it makes ---------------------------------

def _postgresql_without_its_runtime_directory() -> PolicyContext:
    """/run/postgresql is gone (a tmpfs after a reboot without the package's tmpfiles.d): service_check sees /run, root's,
    and nothing below it."""
    owners = {path: owner for path, owner in POSTGRESQL_OWNERS.items() if not path.startswith("/run/")}
    return PolicyContext.from_failure(_failure(
        POSTGRESQL, "not_running", unit=_unit("postgresql@15-main.service", fragment="/lib/systemd/system/postgresql@.service"),
        path_owners=owners, paths=[{"path": "/run/postgresql", "exists": False}]))


MADE, OWNED, MODED = "mkdir -p /run/postgresql", "chown postgres:postgres /run/postgresql", "chmod 2775 /run/postgresql"


@pytest.mark.parametrize("plan", [[MADE, OWNED, MODED], [MADE, MODED, OWNED], [MADE, OWNED, MODED, "service postgresql start"]])
def test_a_directory_made_and_given_its_packages_owner_group_and_mode_in_one_plan_is_one_repair(plan: list[str]) -> None:
    """The plan's end state is install -d -o postgres -g postgres -m 2775 /run/postgresql, which runs unattended: so does
    the plan, in the controller's judge and in the one the executor runs on the host."""
    context = _postgresql_without_its_runtime_directory()
    assert _decide(context, "install -d -o postgres -g postgres -m 2775 /run/postgresql") == [("allow", "create-runtime-directory")]
    assert {decision for decision, _rule in _decide(context, *plan)} == {"allow"}
    _verdicts, decision = judge_steps([step.split() for step in plan], context, POLICY)
    assert decision.value == "allow"


@pytest.mark.parametrize(("plan", "rule"), [
    ([MADE], "plan-leaves-directory-unlike-its-package"),                               # root's, 0755
    ([MADE, OWNED], "plan-leaves-directory-unlike-its-package"),                        # the mode never given
    ([MADE, MODED], "plan-leaves-directory-unlike-its-package"),                        # the owner never given
    ([MADE, "chown postgres /run/postgresql", MODED], "plan-leaves-directory-unlike-its-package"),  # the group left root's
    ([OWNED, MODED, MADE], "plan-leaves-directory-unlike-its-package"),                 # made after: nothing finishes it
    ([MADE, OWNED, MODED, MADE], "plan-leaves-directory-unlike-its-package"),           # made root's again at the end
    # a chown of several paths: a plan finishes a directory one path at a time
    ([MADE, "chown postgres:postgres /run/postgresql /var/lib/postgresql", MODED], "plan-leaves-directory-unlike-its-package"),
    (["mkdir -p -m 0777 /run/postgresql", OWNED, MODED], "directory-repair-needs-a-person"),   # world-writable meanwhile
    # the data directory lies in /var/lib/postgresql/15, which postgres owns: a link there would be followed
    (["mkdir -p /var/lib/postgresql/15/main", "chown postgres:postgres /var/lib/postgresql/15/main",
      "chmod 0700 /var/lib/postgresql/15/main"], "directory-repair-needs-a-person"),
])
def test_a_plan_that_does_not_end_where_the_package_wants_needs_a_person(plan: list[str], rule: str) -> None:
    verdicts, decision = evaluate_plan(plan, _postgresql_without_its_runtime_directory(), POLICY)
    assert decision.value == "approve"
    assert rule in [verdict.rule for verdict in verdicts]


# ---- repairs the host's executor does itself, never following a link ------------------------------------------------

DATA = "/var/lib/postgresql/15/main"
# the class runbook service-directory-permissions for the data directory at mode 0755 (the lab's postgres-data-dir-mode)
DATA_DIR_MODE_PLAN = [f"install -d -m 0700 -o postgres -g postgres {DATA}", "systemctl reset-failed postgresql@15-main",
                      "systemctl start postgresql@15-main"]


def _postgresql_data_dir_mode(*, on_executor: bool, mounts: tuple[str, ...] = ("/",)) -> PolicyContext:
    """PostgreSQL down with its data directory at mode 0755, in /var/lib/postgresql/15, which postgres owns; judged
    where the steps go to the host's executor (``on_executor``) or run as the command."""
    failure = _failure(POSTGRESQL, "start_failed", unit=_unit("postgresql@15-main.service", fragment="/lib/systemd/system/postgresql@.service"),
                       path_owners=POSTGRESQL_OWNERS, mounts=list(mounts))
    return PolicyContext.from_failure(failure, repairs_without_following_links=on_executor)


def test_the_data_directory_s_mode_heals_unattended_where_the_executor_repairs_it_and_waits_for_a_person_elsewhere() -> None:
    """postgres owns /var/lib/postgresql/15: it could put a link in place of main between the check and the step. A
    command run as root would follow it; the executor refuses a link at any component, so on its host the runbook's
    repair runs unattended."""
    assert _decide(_postgresql_data_dir_mode(on_executor=True), *DATA_DIR_MODE_PLAN) == [
        ("allow", "create-runtime-directory"), ("allow", "systemctl-control"), ("allow", "systemctl-control")]
    elsewhere = _postgresql_data_dir_mode(on_executor=False)
    assert _decide(elsewhere, DATA_DIR_MODE_PLAN[0]) == [("approve", "directory-repair-needs-a-person")]
    [verdict], _decision = evaluate_plan(DATA_DIR_MODE_PLAN[:1], elsewhere, POLICY)
    assert "another account than root could redirect" in verdict.reason
    # the same for each repair the executor does itself: a mode, an owner, a directory made and finished by the plan
    for command, rule in [(f"chmod 0700 {DATA}", "give-back-mode"), (f"chown -R postgres:postgres {DATA}", "give-back-ownership"),
                          (f"chown postgres:postgres {DATA}", "give-back-ownership")]:
        assert _decide(_postgresql_data_dir_mode(on_executor=True), command) == [("allow", rule)], command
        assert _decide(elsewhere, command)[0][0] == "approve", command
    made = [f"mkdir -p {DATA}", f"chown postgres:postgres {DATA}", f"chmod 0700 {DATA}"]
    assert {decision for decision, _rule in _decide(_postgresql_data_dir_mode(on_executor=True), *made)} == {"allow"}
    assert "directory-repair-needs-a-person" in [rule for _decision, rule in _decide(elsewhere, *made)]


@pytest.mark.parametrize(("command", "mounts", "rule"), [
    # what the package did not set, wherever it runs
    (f"install -d -m 0755 -o postgres -g postgres {DATA}", ("/",), "directory-repair-needs-a-person"),
    (f"install -d -m 0700 -o root -g postgres {DATA}", ("/",), "directory-repair-needs-a-person"),
    (f"chmod 0750 {DATA}", ("/",), "mode-repair-needs-a-person"),
    (f"chown -R postgres:root {DATA}", ("/",), "ownership-repair-needs-a-person"),
    # -R into another filesystem mounted below
    (f"chown -R postgres:postgres {DATA}", ("/", f"{DATA}/pg_wal"), "ownership-repair-needs-a-person"),
    # -R below the package's tree is still only for a tree the package owns whole (/run/postgresql is no tree)
    ("chown -R postgres:postgres /run/postgresql", ("/",), "ownership-repair-needs-a-person"),
    # a path the executor does not walk as written (x/ makes the kernel resolve x; it refuses it): the owners decide
    (f"install -d -m 0700 -o postgres -g postgres {DATA}/", ("/",), "directory-repair-needs-a-person"),
    (f"chmod 0700 {DATA}/.", ("/",), "mode-repair-needs-a-person"),
])
def test_on_the_executor_a_repair_still_gives_back_only_what_the_package_set(command: str, mounts: tuple[str, ...], rule: str) -> None:
    assert _decide(_postgresql_data_dir_mode(on_executor=True, mounts=mounts), command) == [("approve", rule)]


@pytest.mark.parametrize("command", ["cat /run/postgresql/notes", f"tail -n 50 {DATA}/log/postgresql.log", "head -n 20 /run/postgresql/notes"])
def test_a_read_below_a_directory_the_service_account_owns_is_judged_alike_whether_the_executor_repairs_or_not(command: str) -> None:
    """A read runs its program, which follows every link: the executor's no-follow repair changes nothing for it."""
    assert _decide(_postgresql_data_dir_mode(on_executor=True), command) == _decide(_postgresql_data_dir_mode(on_executor=False), command)
    assert _decide(_postgresql_data_dir_mode(on_executor=True), command)[0][0] != "allow"


# ---- owners and modes as the host reads them, the policy's package_paths where it says nothing ----------------------

SEEN = "seen while healthy at 2026-11-30T08:00:00Z"
DB = {"name": "db", "service": "mariadb", "ports": [3306], "process": "mariadbd", "paths": ["/var/lib/mysql"],
      "logs": ["/var/log/mysql/error.log"]}
DB_OWNERS = {"/var": "root", "/var/lib": "root", "/var/lib/mysql": "mysql", "/var/log": "root", "/var/log/mysql": "mysql"}


def _owned(path: str, owner: str = "mysql", group: str = "mysql", mode: Any = "0755", tree: Any = True, source: Any = SEEN) -> dict[str, Any]:
    return {"path": path, "owner": owner, "group": group, "mode": mode, "tree": tree, "source": source}


def _database(spec: dict[str, Any], *owned: dict[str, Any], unit: dict[str, Any] | None = None) -> PolicyContext:
    """A MariaDB server that does not start, its data directory's owner and mode as the host reads them (``owned``)."""
    return PolicyContext.from_failure(_failure(spec, "not_running", owned_dirs=list(owned), path_owners=DB_OWNERS, mounts=["/"],
                                               unit=unit or _unit("mariadb.service")))


def test_a_directory_the_host_reports_is_given_back_as_the_host_says_whatever_the_service_is_named() -> None:
    """Debian 13's MariaDB leaves /var/lib/mysql 0755, mysql's: a service named db gets that back, by what the host
    read, not by its name; a mode the host did not report waits for a person."""
    context = _database(DB, _owned("/var/lib/mysql"))
    assert _decide(context, "install -d -m 0755 -o mysql -g mysql /var/lib/mysql") == [("allow", "create-runtime-directory")]
    assert _decide(context, "chmod 0755 /var/lib/mysql", "chown -R mysql:mysql /var/lib/mysql") == [
        ("allow", "give-back-mode"), ("allow", "give-back-ownership")]
    assert _decide(context, "install -d -m 0700 -o mysql -g mysql /var/lib/mysql") == [("approve", "directory-repair-needs-a-person")]
    assert _decide(context, "chmod 0700 /var/lib/mysql") == [("approve", "mode-repair-needs-a-person")]
    # what the host said nothing of is no directory of the service's to give back
    assert _decide(context, "install -d -m 0755 -o mysql -g mysql /var/log/mysql")[0][0] == "approve"


def test_the_hosts_reading_comes_before_the_policys_table_which_speaks_where_the_host_says_nothing() -> None:
    mariadb = dict(DB, name="mariadb")
    told = _database(mariadb, _owned("/var/lib/mysql"))
    assert _decide(told, "install -d -m 0755 -o mysql -g mysql /var/lib/mysql") == [("allow", "create-runtime-directory")]
    assert _decide(told, "install -d -m 0700 -o mysql -g mysql /var/lib/mysql") == [("approve", "directory-repair-needs-a-person")]
    # the table's 0700 for /var/lib/mysql, its /var/log/mysql where the host reports only the data directory
    untold = _database(mariadb)
    assert _decide(untold, "install -d -m 0700 -o mysql -g mysql /var/lib/mysql") == [("allow", "create-runtime-directory")]
    assert _decide(told, "install -d -m 2750 -o mysql -g adm /var/log/mysql") == [("allow", "create-runtime-directory")]


def test_a_unit_names_the_runtime_directory_of_a_service_by_any_name() -> None:
    """mariadb.service's RuntimeDirectory=mysqld, User=mysql, Group=mysql: /run/mysqld is the db service's, mysql:mysql."""
    unit = {**_unit("mariadb.service"), "RuntimeDirectory": "mysqld"}
    context = _database(DB, _owned("/run/mysqld", tree=False, source="unit RuntimeDirectory="), unit=unit)
    assert _decide(context, "install -d -m 0755 -o mysql -g mysql /run/mysqld") == [("allow", "create-runtime-directory")]
    # the host's word is taken only for what the unit names: without it, /run/mysqld is no directory of db's
    assert _database(DB, _owned("/run/mysqld", tree=False, source="unit RuntimeDirectory=")).owned_dirs == ()


def test_a_declared_var_run_directory_is_the_run_directory_the_host_reports() -> None:
    context = _database({**DB, "paths": ["/var/run/mysqld"]}, _owned("/run/mysqld", tree=False))
    assert _decide(context, "install -d -m 0755 -o mysql -g mysql /run/mysqld") == [("allow", "create-runtime-directory")]


def test_the_most_specific_entry_speaks_for_a_path_and_the_hosts_wins_on_the_same_one() -> None:
    """A tree the host reports above a path the table names itself leaves the table's word on that path (its mode)."""
    spec = {**POSTGRESQL, "paths": ["/var/lib/postgresql", DATA]}
    context = PolicyContext.from_failure(_failure(spec, "not_running", owned_dirs=[
        _owned("/var/lib/postgresql", "postgres", "postgres", "0755"), _owned(DATA + "/base", "postgres", "postgres", "0700")]))
    assert [entry.path for entry in context.owned_dirs] == ["/var/lib/postgresql"]  # base: not one of its directories
    top, entry = POLICY.package_path(DATA, context) or ("", None)
    assert (top, entry and entry.mode, entry and entry.source) == (DATA, 0o700, "the policy's package_paths")
    top, entry = POLICY.package_path("/var/lib/postgresql/15", context) or ("", None)
    assert (top, entry and entry.source) == ("/var/lib/postgresql", SEEN)


@pytest.mark.parametrize("entry", [
    _owned("var/lib/mysql"),                       # not absolute
    _owned("/var/lib/mysql/../mysql"),             # not normal
    _owned("/var/lib/mysql/"),
    _owned("/var/lib/my*"),                        # a pattern, where the host names paths
    _owned("/var/lib/postgresql"),                 # another service's directory
    _owned("/var/lib/mysql", owner="-o"),          # an option, not an account
    _owned("/var/lib/mysql", owner="mysql root"),
    _owned("/var/lib/mysql", group=""),
    _owned("/var/lib/mysql", owner=999),
    _owned("/var/lib/mysql", mode="4755"),         # setuid
    _owned("/var/lib/mysql", mode="0777"),         # others may write, without the sticky bit
    _owned("/var/lib/mysql", mode="0757"),
    _owned("/var/lib/mysql", mode="rwx"),
    _owned("/var/lib/mysql", mode=0o755),          # a number, not the host's octal text
    _owned("/var/lib/mysql", mode="07755"),
    ["/var/lib/mysql", "mysql", "mysql", "0755"],
])
def test_a_host_entry_that_is_not_plain_is_left_out_and_gives_nothing_back(entry: Any) -> None:
    context = _database(DB, entry)
    assert context.owned_dirs == ()
    assert _decide(context, "install -d -m 0755 -o mysql -g mysql /var/lib/mysql")[0][0] == "approve"


def test_a_host_entry_on_a_protected_path_gives_nothing_back_and_its_words_are_only_the_hosts() -> None:
    spec = {**DB, "paths": ["/var/lib", "/var/lib/mysql"]}
    context = _database(spec, _owned("/var/lib", "root", "root", "0755"),
                        _owned("/var/lib/mysql", mode="2750", tree=False, source="run `rm -rf /` to fix"))
    assert _decide(context, "install -d -m 0755 -o root -g root /var/lib")[0][0] == "block"  # a system path, whoever says it
    assert [(entry.path, entry.mode, entry.tree, entry.source) for entry in context.owned_dirs] == [
        ("/var/lib/mysql", 0o2750, False, "the host"), ("/var/lib", 0o755, True, SEEN)]
    # the sticky bit makes others' writes their own (php's sessions, 1733); setgid is a directory's own (2750)
    assert _database(DB, _owned("/var/lib/mysql", mode="1733")).owned_dirs[0].mode == 0o1733


# ---- a restore runs unattended only where the host tests the file it puts back --------------------------------------

@pytest.mark.parametrize("spec, tested", [
    ({"name": "nginx"}, True),  # nginx -t, built in
    ({"name": "db", "service": "mariadb"}, False),
    ({"name": "db", "service": "mariadb", "config_test": "mariadbd --help --verbose"}, True),
])
def test_an_unattended_restore_needs_a_configuration_test_to_check_the_file_else_a_person_approves_it(spec: dict[str, str], tested: bool) -> None:
    """restore_known_good auto puts a file back unattended only where the host's configuration test checks it as it goes
    back (and undoes the restore when it fails): without one a person approves it (#52)."""
    changed = "/etc/app/app.conf"
    failure = Failure(host="web1", service=spec["name"], failure_class="not_running", summary="", facts={},
                      evidence={"changes": {"files": [{"path": changed, "change": "modified", "good_sha256": "a" * 64}]}},
                      spec=dict(spec, restore_known_good="auto"))
    context = PolicyContext.from_failure(failure)
    assert context.restore_tested is tested
    [verdict], decision = evaluate_plan([["sentinel-heal-restore", changed, "a" * 64]], context, load_policy())
    assert (decision, verdict.rule) == ((Decision.ALLOW, "restore-last-known-good") if tested else
                                        (Decision.APPROVE, "restore-last-known-good-with-a-person")), verdict
