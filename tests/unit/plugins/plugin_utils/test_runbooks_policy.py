"""Every shipped runbook, judged by the default policy for the services it is written for."""

from __future__ import annotations

import functools
import posixpath
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import NotApplicable
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ, Reading, read_texts
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook, RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import Policy, PolicyContext, evaluate, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import package_dir

# Declarations like an operator's (the lab's, plus services the lab does not run), for the policy check below.
SPECS: dict[str, dict[str, Any]] = {
    "nginx": {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]},
    "postgresql": {"name": "postgresql", "ports": [5432], "process": "postgres", "pidfile": "/var/lib/postgresql/15/main/postmaster.pid",
                   "logs": ["/var/log/postgresql/postgresql-15-main.log"], "user": "postgres",
                   "paths": ["/var/lib/postgresql/15/main", "/run/postgresql"], "sockets": ["/run/postgresql/.s.PGSQL.5432"]},
    "redis": {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server", "pidfile": "/run/redis/redis-server.pid",
              "logs": ["/var/log/redis/redis-server.log"], "user": "redis", "paths": ["/var/lib/redis", "/run/redis"]},
    "apache2": {"name": "apache2", "ports": [80], "logs": ["/var/log/apache2/error.log"]},
    "mariadb": {"name": "mariadb", "ports": [3306], "process": "mariadbd", "user": "mysql", "logs": ["/var/log/mysql/error.log"],
                "sockets": ["/run/mysqld/mysqld.sock"]},
    "php8.2-fpm": {"name": "php8.2-fpm", "process": "php-fpm8.2", "logs": ["/var/log/php8.2-fpm.log"], "sockets": ["/run/php/php8.2-fpm.sock"]},
    "sshd": {"name": "sshd", "service": "ssh", "ports": [22], "process": "sshd"},
    "cron": {"name": "cron", "process": "cron"},
    "packages": {"name": "packages", "status_check": False, "check_command": "apt-get -qq check"},
}


# Runbooks whose plan a person approves, and the plan-level rule that says so: removing a service's logs is
# a decision about evidence, not a remediation to run unattended.
NEED_A_PERSON = {
    "log-filesystem-full": {"plan-removes-logs"},
    "log-filesystem-full-truncate": {"truncate-service-log"},  # truncate follows a symlink planted in its place
}
# ... and for one service only, where the step runs as the command: a cluster's data directory lies in
# /var/lib/postgresql/15, which postgres owns (and so could put a link in place of main), so a repair of its owner or
# mode waits for a person; the host's executor does these repairs itself without following a link, and there they run
NEED_A_PERSON_FOR = {
    ("service-directory-permissions", "postgresql"): {"directory-repair-needs-a-person"},
    ("service-directory-missing", "postgresql"): {"directory-repair-needs-a-person"},
    ("service-file-ownership", "postgresql"): {"ownership-repair-needs-a-person"},
}

# Who owns the directories on the way to the declared paths, as service_check reports them on a Debian host: root,
# but for the service accounts' own
SERVICE_OWNED = {"/var/lib/postgresql": "postgres", "/var/lib/postgresql/15": "postgres", "/var/lib/postgresql/15/main": "postgres",
                 "/run/postgresql": "postgres", "/var/lib/redis": "redis", "/var/log/redis": "redis", "/run/redis": "redis"}


def _path_owners(spec: dict[str, Any]) -> dict[str, str]:
    paths = [*spec.get("paths", []), *spec.get("logs", []), *spec.get("sockets", []), *([spec["pidfile"]] if "pidfile" in spec else [])]
    owners = {}
    for path in paths:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            component = "/" + "/".join(parts[:depth])
            owners[component] = SERVICE_OWNED.get(component, "root")
    return owners


# What a service says when a file in one of its package directories is missing or not its own
READING_LINES = {"missing_path": 'open() "{path}" failed (2: No such file or directory)',
                 "permission": 'open() "{path}" failed (13: Permission denied)'}


def _reading_of_a_package_path(runbook: Runbook, failure: Failure, context: PolicyContext, policy: Policy) -> Reading:
    """The reading a runbook that matches on one would see: a line of its kind (of the first kind its queries hold for)
    naming a file in a package directory of the service; NOTHING_READ when the runbook reads nothing or the service has
    no package directory."""
    names = {failure.service, failure.init_service}
    entry = next((entry for entry in policy.package_paths if names & set(entry.services)), None)
    kinds = [kind for kind in READING_LINES if kind in runbook.readings or (runbook.queries and not runbook.readings)]
    if entry is None:
        return NOTHING_READ
    for kind in kinds:
        line = READING_LINES[kind].format(path=entry.path.replace("*", "15") + "/file")
        reading = read_texts([("its journal", line)], functools.partial(package_dir, policy, context))
        if runbook.readings or runbook.matches(failure, {}, reading):
            return reading
    return NOTHING_READ


def _left_over(socket: str) -> dict[str, Any]:
    """A declared socket as service_check reports one a killed daemon left, with its lock naming a reused pid."""
    lock = {"path": f"{socket}.lock", "exists": True, "pid": 812, "alive": False, "process": "sshd", "stale": True}
    return {"path": socket, "exists": True, "socket": True, "bound": False, "stale": True, "lock": lock}


# The unit that runs each service on a systemd host, as service_check resolves it (Debian's postgresql is a wrapper).
UNITS = {"postgresql": "postgresql@15-main.service", "sshd": "ssh.service", "redis": "redis-server.service"}


@pytest.mark.parametrize("on_executor", [False, True])
@pytest.mark.parametrize("service_manager", ["sysv", "systemd"])
def test_every_shipped_runbook_step_and_evidence_command_is_allowed_for_its_own_services(service_manager: str, on_executor: bool) -> None:
    """No lab needed: what each runbook would run gets ALLOW from the default policy for the incidents it is for,
    on sysv and on systemd hosts (where `service X start` becomes `systemctl start UNIT`), judged as one plan, with the
    steps run as the command or sent to the host's executor (``on_executor``); the runbooks of NEED_A_PERSON wait for a
    person, by the plan-level rule named there, and those of NEED_A_PERSON_FOR only where the command runs."""
    policy = load_policy()
    for runbook in RunbookLibrary.load().runbooks:
        services = [name for name in SPECS if name in runbook.services or SPECS[name].get("service") in runbook.services] or list(SPECS)
        assert services, runbook.id
        for service in services:
            spec = SPECS[service]
            # a squatter on the port (a protected one, such as sshd, would rightly need a human)
            owners = [{"port": spec["ports"][0], "pid": 4242, "process": "python3", "cmdline": "python3 -m http.server"}] if spec.get("ports") else []
            failure = Failure(host="h", service=service, failure_class=(runbook.failure_classes or ("not_running",))[0], summary="",
                              evidence={"status": {"output": ""}, "logs": {}, "port_owners": owners, "processes": [4343],
                                        "pidfile": {"path": spec.get("pidfile", "/run/x.pid"), "exists": True, "pid": 812, "alive": False},
                                        "sockets": [_left_over(path) for path in spec.get("sockets", [])],
                                        # the filesystem of each declared log full (space and inodes)
                                        "disk": [{"path": posixpath.dirname(log), "full": True, "inodes_exhausted": True}
                                                 for log in spec.get("logs", [])],
                                        "unit": {"Id": UNITS.get(service, f"{service}.service")} if service_manager == "systemd" else None,
                                        "path_owners": _path_owners(spec), "mounts": ["/"]},
                              spec=spec, facts={"service_manager": service_manager})
            context = PolicyContext.from_failure(failure, repairs_without_following_links=on_executor)
            for command in runbook.evidence_commands:
                verdict = evaluate(command, context, policy)
                assert verdict.decision is Decision.ALLOW, (runbook.id, service, command, verdict.reason)
            reading = _reading_of_a_package_path(runbook, failure, context, policy)
            try:
                steps = runbook.render_steps(failure, reading)
            except NotApplicable:  # a port owner's pid for a service without ports, a unit on a host without systemd, a reading
                # about a path in none of the service's package directories: the planner skips the runbook too
                if (runbook.readings or runbook.queries) and not runbook.matches(failure, {}, reading):
                    continue
                assert not spec.get("ports") or (service_manager != "systemd" and "{unit}" in " ".join(runbook.templates)), (runbook.id, service)
                continue
            verdicts, _decision = evaluate_plan([step.argv for step in steps], context, policy)
            expected = {verdict.rule for verdict in verdicts if verdict.decision is not Decision.ALLOW}
            needed = NEED_A_PERSON.get(runbook.id, set()) | (set() if on_executor else NEED_A_PERSON_FOR.get((runbook.id, service), set()))
            assert expected == needed, (runbook.id, service, [v.reason for v in verdicts])
