from __future__ import annotations

import dataclasses
import functools
import re
import time
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import render_step
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import read_failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary, parse_runbook
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import RunbookError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, PlanSource
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import package_dir
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import nginx_failure, on_systemd

POLICY = load_policy()
CONFIG_ERROR = (
    "nginx: [emerg] unexpected \"}\" in /etc/nginx/sites-enabled/default:25\n"
    "nginx: configuration file /etc/nginx/nginx.conf test failed"
)


def _plan(planner: Planner, failure, outputs=None, excluded=frozenset()):  # type: ignore[no-untyped-def]
    """As the diagnose node plans: with the reading of the failure and the outputs, package directories from the policy."""
    remembered, _sent_away = planner.remembered_fix(failure, excluded, {})
    locate = functools.partial(package_dir, POLICY, PolicyContext.from_failure(failure))
    return planner.plan(failure, Diagnosis("d", remembered, outputs or {}, read_failure(failure, outputs or {}, locate=locate)), excluded)


def _with_journal(failure: Failure, journal: str, failure_class: str = "not_running") -> Failure:
    """As journalctl --output=short-iso writes it, every line the service's own (IDENT[PID]: MESSAGE)."""
    journal = "\n".join(f"2026-11-25T08:00:00+0000 {failure.host} {line}" for line in journal.splitlines())
    unit = {"Id": f"{failure.init_service}.service", "ActiveState": "failed", "journal": journal}
    return dataclasses.replace(failure, failure_class=failure_class, evidence={**failure.evidence, "unit": unit},
                               facts={**failure.facts, "service_manager": "systemd"})


def _postgres(failure_class: str = "not_running") -> Failure:
    return Failure(host="db1", service="postgresql", failure_class=failure_class, summary="postgresql: rc=3",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": []},
                   spec={"name": "postgresql", "ports": [5432], "process": "postgres"})


def test_a_config_test_that_fails_for_a_missing_log_directory_recreates_the_directory(library: RunbookLibrary) -> None:
    """nginx -t fails, but for the log directory, not the configuration: the directory comes back as its package made it."""
    said = 'nginx: [emerg] open() "/var/log/nginx/error.log" failed (2: No such file or directory)\n' + CONFIG_ERROR.splitlines()[1]
    plan = _plan(Planner(library, None), nginx_failure("not_running"), {"nginx -t": said})
    assert plan.reference == "service-directory-missing" and plan.escalation is None
    assert [step.argv for step in plan.steps] == [("install", "-d", "-m", "0755", "-o", "root", "-g", "adm", "/var/log/nginx"),
                                                  ("service", "nginx", "start")]


def test_a_missing_path_outside_the_service_directories_escalates_with_its_line(library: RunbookLibrary) -> None:
    failure = _with_journal(nginx_failure(), 'nginx[90]: nginx: [emerg] open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)')
    plan = _plan(Planner(library, None), failure)
    assert plan.reference == "required-path-missing" and plan.steps == ()
    assert plan.escalation is not None and '"/etc/nginx/site-prod.conf" failed (2: No such file or directory)' in plan.escalation
    assert not re.search(r"\{[a-z_:]+\}", plan.escalation)


def test_an_invalid_parameter_escalates_at_once_in_the_services_own_words(library: RunbookLibrary) -> None:
    """Before any start or restart, though postgres's not_running would have a start runbook."""
    journal = ('pg_ctl[812]: 2026-11-25 08:00:00 UTC LOG:  invalid value for parameter "shared_buffers": "lots"\n'
               'pg_ctl[812]: 2026-11-25 08:00:00 UTC FATAL:  configuration file "/etc/postgresql/15/main/postgresql.conf" contains errors')
    plan = _plan(Planner(library, None), _with_journal(_postgres(), journal))
    assert plan.reference == "service-config-invalid" and plan.steps == ()
    assert plan.escalation is not None and 'invalid value for parameter "shared_buffers": "lots"' in plan.escalation
    assert "/etc/postgresql/15/main/postgresql.conf" in plan.escalation and "parameter shared_buffers" in plan.escalation


def test_a_data_directory_with_the_wrong_mode_gets_the_packages_owner_and_mode_back(library: RunbookLibrary) -> None:
    journal = 'postgresql@15-main[90]: FATAL:  data directory "/var/lib/postgresql/15/main" has invalid permissions'
    plan = _plan(Planner(library, None), _with_journal(_postgres(), journal))
    assert plan.reference == "service-directory-permissions"
    assert [step.argv for step in plan.steps] == [("install", "-d", "-m", "0700", "-o", "postgres", "-g", "postgres", "/var/lib/postgresql/15/main"),
                                                  ("systemctl", "reset-failed", "postgresql"), ("systemctl", "start", "postgresql")]


def test_a_service_that_is_not_installed_escalates_at_once(library: RunbookLibrary) -> None:
    failure = dataclasses.replace(nginx_failure("not_installed"), evidence={
        "status": {"command": "systemctl status nginx", "rc": 4, "output": "Unit nginx.service could not be found."}, "logs": {},
        "port_owners": [], "processes": []})
    plan = _plan(Planner(library, None), failure)
    assert plan.reference == "service-not-installed" and plan.steps == ()
    assert plan.escalation is not None and "Unit nginx.service could not be found." in plan.escalation


def test_stale_nginx_pid_plan_removes_exactly_that_file_and_starts(library: RunbookLibrary) -> None:
    plan = _plan(Planner(library, None), nginx_failure(), {"nginx -t": "nginx: configuration file /etc/nginx/nginx.conf test is successful"})
    assert plan.source is PlanSource.RUNBOOK and plan.reference == "nginx-stale-pid"
    assert [step.argv for step in plan.steps] == [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]


def test_port_conflict_plan_targets_the_pid_seen_on_the_port(library: RunbookLibrary) -> None:
    failure = nginx_failure("port_conflict", owner={"port": 80, "pid": 4242, "process": "python3", "cmdline": "python3 -m http.server 80"})
    plan = _plan(Planner(library, None), failure)
    assert plan.reference == "port-conflict"
    assert [step.argv for step in plan.steps] == [("kill", "-TERM", "4242"), ("service", "nginx", "start")]


def test_a_config_error_escalates_with_nginx_own_words_instead_of_restarting(library: RunbookLibrary) -> None:
    planner = Planner(library, None)
    assert "nginx -t" in planner.evidence_commands(nginx_failure("not_running"))
    plan = _plan(planner, nginx_failure("not_running"), {"nginx -t": CONFIG_ERROR})
    assert plan.steps == () and plan.reference == "nginx-config-error"
    assert plan.escalation is not None and 'unexpected "}" in /etc/nginx/sites-enabled/default:25' in plan.escalation


SITE = "/etc/nginx/sites-available/default"
GOOD = "a" * 64
CONFIG_OK_OUTPUTS = {"nginx -t": "nginx: configuration file /etc/nginx/nginx.conf test is successful"}


def _changed(failure: Failure, *files: tuple[str, str | None], setting: str = "approve") -> Failure:
    """The failure with what changed since its last known good check (a kept copy's hash, or None when none was kept)."""
    changes = {"good_at": 1.0, "packages": [], "files": [
        {"path": path, "change": "modified", "diff": f"--- {path} (last known good)\n+++ {path}\n@@ -1 +1 @@\n-good\n+bad\n",
         **({"good_sha256": digest} if digest else {})} for path, digest in files]}
    return dataclasses.replace(failure, evidence={**failure.evidence, "changes": changes}, spec={**failure.spec, "restore_known_good": setting})


def test_a_config_error_the_changed_file_explains_is_restored_from_its_last_known_good_copy(library: RunbookLibrary) -> None:
    # nginx names the link in sites-enabled; the host names the file it leads to
    plan = _plan(Planner(library, None), _changed(nginx_failure("not_running"), (SITE, GOOD)), {"nginx -t": CONFIG_ERROR})
    assert plan.reference == "restore-known-good" and [step.argv for step in plan.steps] == [
        ("sentinel-heal-restore", SITE, GOOD), ("service", "nginx", "restart")]
    # on systemd, a unit its start limit stopped is reset first
    plan = _plan(Planner(library, None), on_systemd(_changed(nginx_failure("not_running"), (SITE, GOOD)), "nginx.service"),
                 {"nginx -t": CONFIG_ERROR})
    assert [step.argv for step in plan.steps] == [("sentinel-heal-restore", SITE, GOOD), ("systemctl", "reset-failed", "nginx"),
                                                  ("systemctl", "restart", "nginx")]


@pytest.mark.parametrize("files, setting", [
    ([("/etc/nginx/conf.d/other.conf", GOOD)], "approve"),  # a change elsewhere does not explain the error
    ([(SITE, None)], "approve"),  # no copy was kept (over the size limit)
    ([(SITE, GOOD)], "off"),  # the service's restores are off
])
def test_no_restore_is_planned_where_the_change_does_not_explain_the_error_or_nothing_can_be_put_back(
        library: RunbookLibrary, files: list[tuple[str, str | None]], setting: str) -> None:
    plan = _plan(Planner(library, None), _changed(nginx_failure("not_running"), *files, setting=setting), {"nginx -t": CONFIG_ERROR})
    assert plan.reference == "nginx-config-error" and plan.steps == () and plan.escalation


@pytest.mark.parametrize("named", ["/usr/sbin/mariadbd", "/var/lib/mysql/ib_buffer_pool", None])
def test_an_error_that_names_no_file_of_a_configuration_is_explained_by_the_only_changed_file(named: str | None) -> None:
    """MariaDB's "[ERROR] /usr/sbin/mariadbd: unknown variable ...": the path of the line is the program; the line before
    it, InnoDB's note of the buffer pool it loads, names a data file (#52)."""
    changed = "/etc/mysql/mariadb.conf.d/50-server.cnf"
    failure = _changed(nginx_failure("not_running"), (changed, GOOD))
    assert (failure.known_good_copy(named) or {}).get("path") == changed


def test_an_error_that_names_a_configuration_file_that_did_not_change_is_not_explained_by_another_change() -> None:
    failure = _changed(nginx_failure("not_running"), ("/etc/mysql/mariadb.conf.d/50-server.cnf", GOOD))
    assert failure.known_good_copy("/etc/mysql/my.cnf") is None
    declared = dataclasses.replace(failure, spec=dict(failure.spec, configs=["/srv/app/*.yml"]))
    assert declared.known_good_copy("/srv/app/settings.yml") is None
    # named by its name only (nginx names the link in sites-enabled, the host the file it leads to)
    assert (failure.known_good_copy("/usr/share/mysql/50-server.cnf") or {}).get("path") == "/etc/mysql/mariadb.conf.d/50-server.cnf"


def test_a_restore_puts_back_the_diff_a_person_sees_read_from_the_file_as_it_is_now(library: RunbookLibrary) -> None:
    failure = _changed(nginx_failure("not_running"), (SITE, GOOD))
    plan = _plan(Planner(library, None), failure, {"nginx -t": CONFIG_ERROR})
    [shown] = failure.puts_back(plan)
    assert shown == {"path": SITE, "sha256": GOOD, "diff": f"--- {SITE}\n+++ {SITE} (last known good)\n@@ -1 +1 @@\n-bad\n+good\n"}


@pytest.mark.parametrize("setting, decision", [("approve", "approve"), ("auto", "allow")])
def test_a_remembered_restore_is_replayed_for_the_new_copy_and_only_under_the_services_restore_setting(
        tmp_path: Path, library: RunbookLibrary, setting: str, decision: str) -> None:
    """A verified restore is remembered like any heal; replayed, it puts back the copy the host kept this time, and the
    guard decides as the service's setting says now: approve waits for a person again, off plans no restore at all."""
    failure = _changed(nginx_failure("not_running"), (SITE, GOOD), setting="auto")
    with Memory(tmp_path) as memory:
        planner = Planner(library, memory)
        first = _plan(planner, failure, {"nginx -t": CONFIG_ERROR})
        attempt = Attempt(number=1, plan=first, outcome="healed", verified=True, started_at=time.time(), finished_at=time.time())
        memory.record_attempt(incident_id="x", failure=failure, attempt=attempt)
        again = _changed(nginx_failure("not_running"), (SITE, "b" * 64), setting=setting)
        plan = _plan(planner, again, {"nginx -t": CONFIG_ERROR})
        assert plan.source is PlanSource.MEMORY and plan.steps[0].argv == ("sentinel-heal-restore", SITE, "b" * 64)
        verdicts, _decision = evaluate_plan([step.argv for step in plan.steps], PolicyContext.from_failure(again), POLICY)
        assert verdicts[0].decision.value == decision
        off = _plan(planner, _changed(nginx_failure("not_running"), (SITE, "b" * 64), setting="off"), {"nginx -t": CONFIG_ERROR})
        assert off.reference == "nginx-config-error" and off.steps == ()


def test_a_start_that_fails_after_a_package_change_whose_previous_version_apt_keeps_is_offered_a_downgrade_for_a_person(
        library: RunbookLibrary) -> None:
    cached = "/var/cache/apt/archives/nginx-common_1.22.1-9_all.deb"
    changes = {"good_at": 1.0, "files": [], "packages": [
        {"action": "upgrade", "package": "nginx-common", "at": 2.0, "before": "1.22.1-9", "after": "1.22.1-9+lab1", "cached": cached}]}
    failure = on_systemd(nginx_failure("not_running"), "nginx.service", Result="exit-code")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "changes": changes})
    planner = Planner(library, None)
    offer = _plan(planner, failure, CONFIG_OK_OUTPUTS)
    assert offer.reference == "downgrade-cached-package" and [step.argv for step in offer.steps] == [
        ("dpkg", "-i", cached), ("systemctl", "restart", "nginx")]
    verdicts, _decision = evaluate_plan([step.argv for step in offer.steps], PolicyContext.from_failure(failure), POLICY)
    assert (verdicts[0].decision.value, verdicts[0].rule) == ("approve", "downgrade-to-the-cached-version")
    # killed after the change, it is started again: no downgrade
    killed = dataclasses.replace(failure, evidence={**failure.evidence, "unit": {"Id": "nginx.service", "Result": "signal"}})
    assert _plan(planner, killed, CONFIG_OK_OUTPUTS).reference != "downgrade-cached-package"


def test_a_verified_fix_from_memory_comes_first_and_says_so(tmp_path: Path, library: RunbookLibrary) -> None:
    failure = nginx_failure(pid=100)
    with Memory(tmp_path) as memory:
        planner = Planner(library, memory)
        first = _plan(planner, failure)
        attempt = Attempt(number=1, plan=first, outcome="healed", verified=True, started_at=time.time(), finished_at=time.time())
        episode, _plan_id = memory.record_attempt(incident_id="x", failure=failure, attempt=attempt)
        again = nginx_failure(pid=200)
        plan = _plan(planner, again)
    assert plan.source is PlanSource.MEMORY and plan.reference == f"episode {episode}"
    assert "verified fix" in plan.rationale
    # rendered for the new incident, not replayed verbatim
    assert [step.argv for step in plan.steps] == [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]


def test_a_remembered_plan_fills_its_runbooks_vars_from_the_new_incident_however_often_it_is_replayed(tmp_path: Path) -> None:
    squatter = parse_runbook("---\nid: squatter\ntitle: t\nservices: [nginx]\nmatch:\n  failure_class: [port_conflict]\n"
                             "vars:\n  stray: evidence.port_owners[0].pid\nsteps: ['kill -TERM {stray}', 'service {init_service} start']\n"
                             "---\n", "/runbooks/squatter.md")
    planner_library = RunbookLibrary([squatter])
    pids = []
    with Memory(tmp_path) as memory:
        planner = Planner(planner_library, memory)
        for pid in (4242, 5353, 6464):  # a runbook's plan, then replayed from memory twice
            failure = nginx_failure("port_conflict", owner={"port": 80, "pid": pid, "process": "python3"})
            plan = _plan(planner, failure)
            pids.append((plan.source, plan.steps[0].argv))
            attempt = Attempt(number=1, plan=plan, outcome="healed", verified=True, started_at=time.time(), finished_at=time.time())
            memory.record_attempt(incident_id=str(pid), failure=failure, attempt=attempt)
    assert pids == [(PlanSource.RUNBOOK, ("kill", "-TERM", "4242")), (PlanSource.MEMORY, ("kill", "-TERM", "5353")),
                    (PlanSource.MEMORY, ("kill", "-TERM", "6464"))]


def test_a_failure_no_runbook_knows_gets_one_blind_plan_then_an_escalation_with_what_the_evidence_says(library: RunbookLibrary) -> None:
    planner = Planner(library, None)
    failure = dataclasses.replace(nginx_failure("not_running", owner={"port": 80, "pid": 4242, "process": "python3"}), evidence=dict(
        nginx_failure("not_running", owner={"port": 80, "pid": 4242, "process": "python3"}).evidence,
        # /srv/www: no directory of nginx's package, which the class service-directory-missing would recreate
        paths=[{"path": "/srv/www", "exists": False}], disk=[{"path": "/var/lib", "full": True}]))
    first = _plan(planner, failure)
    assert first.reference == "service-not-running"
    second = _plan(planner, failure, excluded=frozenset({first.templates}))
    assert second.steps == () and second.escalation and "every known plan was tried" in second.escalation
    # the plans as they ran, not their templates, and the cause in the evidence's words
    assert "(service nginx start)" in second.escalation and "{" not in second.escalation
    assert ("port 80 is held by python3 (pid 4242); /srv/www is missing; the filesystem of /var/lib is full"
            in second.escalation)


def test_service_steps_speak_systemctl_to_the_unit_that_runs_the_service_on_systemd_hosts(library: RunbookLibrary) -> None:
    planner = Planner(library, None)
    sysv = nginx_failure("not_running")
    assert _plan(planner, sysv).steps[0].argv == ("service", "nginx", "start")
    assert _plan(planner, on_systemd(sysv, "nginx.service")).steps[0].argv == ("systemctl", "start", "nginx")
    # Debian's postgresql is a wrapper: the cluster's own unit is started
    cluster = dataclasses.replace(on_systemd(sysv, "postgresql@15-main.service"), service="postgresql", spec={"name": "postgresql"})
    assert render_step("service {init_service} restart", cluster).argv == ("systemctl", "restart", "postgresql@15-main")
    # another service's name, or a verb systemctl does not share, stays as written
    assert render_step("service ssh start", cluster).argv == ("service", "ssh", "start")
    assert render_step("service {init_service} status", cluster).argv == ("service", "postgresql", "status")


def test_a_runbook_whose_placeholder_has_no_value_does_not_apply(library: RunbookLibrary) -> None:
    failure = nginx_failure("port_conflict")  # no port owner in the evidence
    plan = _plan(Planner(library, None), failure)
    assert plan.reference != "port-conflict"


def test_a_user_runbook_replaces_a_shipped_one_with_the_same_id(tmp_path: Path) -> None:
    (tmp_path / "mine.md").write_text(
        "---\nid: nginx-stale-pid\ntitle: ours\nservices: [nginx]\nmatch: {failure_class: [stale_pidfile]}\n"
        "steps: ['service {init_service} restart']\npriority: 50\n---\nbody\n"
    )
    library = RunbookLibrary.load([tmp_path])
    plan = _plan(Planner(library, None), nginx_failure())
    assert plan.rationale == "ours" and [s.argv for s in plan.steps] == [("service", "nginx", "restart")]


OPTIONAL_STEP = """---
id: reset-then-start
title: start, after a reset where systemd runs the service
services: [nginx]
match: {failure_class: [not_running]}
steps:
  - {run: "systemctl reset-failed {unit}", optional: true}
  - service {init_service} start
priority: 90
---
"""


def test_an_optional_step_is_left_out_where_its_placeholder_has_no_value() -> None:
    library = RunbookLibrary([parse_runbook(OPTIONAL_STEP, "reset-then-start.md")])
    planner = Planner(library, None)
    sysv = nginx_failure("not_running")
    assert [step.argv for step in _plan(planner, sysv).steps] == [("service", "nginx", "start")]
    assert [step.argv for step in _plan(planner, on_systemd(sysv, "nginx.service")).steps] == [
        ("systemctl", "reset-failed", "nginx"), ("systemctl", "start", "nginx")]
    # the plan without its optional step failed before: the runbook does not offer it again
    tried = _plan(planner, sysv).templates
    assert _plan(planner, sysv, excluded=frozenset({tried})).reference != "reset-then-start"
    # nor, when it failed with its optional step, without it
    tried = _plan(planner, on_systemd(sysv, "nginx.service")).templates
    assert _plan(planner, sysv, excluded=frozenset({tried})).reference != "reset-then-start"


def test_a_step_with_an_unknown_key_names_it() -> None:
    with pytest.raises(RunbookError) as error:
        parse_runbook(OPTIONAL_STEP.replace("optional: true", "optinal: true"), "typo.md")
    assert error.value.field == "steps[0].optinal"


def test_apache_without_its_log_directory_gets_it_back_as_debian_makes_it(library: RunbookLibrary) -> None:
    apache = Failure(host="web2", service="apache2", failure_class="not_running", summary="apache2: rc=3",
                     evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": []},
                     spec={"name": "apache2", "ports": [80], "process": "apache2"})
    journal = ("apachectl[71]: (2)No such file or directory: AH02291: Cannot access directory '/var/log/apache2/' for main error log\n"
               "apachectl[71]: AH00014: Configuration check failed")
    plan = _plan(Planner(library, None), _with_journal(apache, journal))
    assert plan.reference == "service-directory-missing"
    assert plan.steps[0].argv == ("install", "-d", "-m", "0750", "-o", "root", "-g", "adm", "/var/log/apache2")


def test_any_service_that_left_a_stale_pid_file_gets_it_removed_and_is_started(library: RunbookLibrary) -> None:
    cron = Failure(host="h", service="cron", failure_class="stale_pidfile", summary="cron: pid file /run/crond.pid names pid 812",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [],
                             "pidfile": {"path": "/run/crond.pid", "exists": True, "pid": 812, "alive": False}},
                   spec={"name": "cron", "process": "cron", "pidfile": "/run/crond.pid"})
    plan = _plan(Planner(library, None), cron)
    assert plan.reference == "stale-pidfile"
    assert [step.argv for step in plan.steps] == [("rm", "-f", "/run/crond.pid"), ("service", "cron", "start")]


def _php_fpm_with_sockets(*sockets: dict[str, object]) -> Failure:
    return Failure(host="h", service="php8.2-fpm", failure_class="stale_socket", summary="php8.2-fpm: rc=3",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "sockets": list(sockets)},
                   spec={"name": "php8.2-fpm", "process": "php-fpm8.2", "sockets": [str(info["path"]) for info in sockets]})


def _socket(path: str, stale: bool, lock_stale: bool) -> dict[str, object]:
    return {"path": path, "exists": True, "socket": True, "bound": not stale, "stale": stale,
            "lock": {"path": f"{path}.lock", "exists": lock_stale, "pid": 812 if lock_stale else None, "alive": False, "stale": lock_stale}}


def test_a_left_over_socket_and_its_lock_are_removed_before_the_start_and_only_what_is_left_over(library: RunbookLibrary) -> None:
    both = _plan(Planner(library, None), _php_fpm_with_sockets(_socket("/run/php/www.sock", stale=True, lock_stale=True)))
    assert both.reference == "stale-socket"
    assert [step.argv for step in both.steps] == [("rm", "-f", "/run/php/www.sock.lock"), ("rm", "-f", "/run/php/www.sock"),
                                                  ("service", "php8.2-fpm", "start")]
    # the first socket is bound (a live pool has it); the second is left over, without a lock file
    one = _plan(Planner(library, None), _php_fpm_with_sockets(_socket("/run/php/live.sock", stale=False, lock_stale=False),
                                                              _socket("/run/php/dead.sock", stale=True, lock_stale=False)))
    assert [step.argv for step in one.steps] == [("rm", "-f", "/run/php/dead.sock"), ("service", "php8.2-fpm", "start")]


def test_a_mysql_server_of_any_name_gets_its_runtime_directory_back_as_its_unit_makes_it(library: RunbookLibrary) -> None:
    """No runbook of MySQL's own: the class runbook recreates /run/mysqld for a service the inventory calls db, with the
    owner, group and mode its unit gives it (RuntimeDirectory=mysqld, User=mysql, Group=mysql), which the host reports."""
    journal = ("2026-11-25T08:00:00+0000 db1 mariadbd[812]: 2026-11-25  8:00:00 0 [ERROR] mariadbd: Can't create/write to file "
               "'/run/mysqld/mysqld.pid' (Errcode: 2 \"No such file or directory\")")
    unit = {"Id": "mariadb.service", "ActiveState": "failed", "RuntimeDirectory": "mysqld", "User": "mysql", "Group": "mysql", "journal": journal}
    owned = [{"path": "/run/mysqld", "owner": "mysql", "group": "mysql", "mode": "0755", "tree": False, "source": "unit RuntimeDirectory="}]
    failure = Failure(host="db1", service="db", failure_class="not_running", summary="mariadb: rc=3",
                      evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "unit": unit, "owned_dirs": owned,
                                "path_owners": {"/run": "root"}},
                      spec={"name": "db", "service": "mariadb", "ports": [3306], "process": "mariadbd"}, facts={"service_manager": "systemd"})
    plan = _plan(Planner(library, None), failure)
    assert plan.reference == "service-directory-missing", plan
    assert [step.command for step in plan.steps] == ["install -d -m 0755 -o mysql -g mysql /run/mysqld", "systemctl reset-failed mariadb",
                                                     "systemctl start mariadb"]
    _verdicts, decision = evaluate_plan([step.argv for step in plan.steps], PolicyContext.from_failure(failure), POLICY)
    assert decision.value == "allow"
    reading = read_failure(failure, {}, locate=functools.partial(package_dir, POLICY, PolicyContext.from_failure(failure)))
    assert reading.decisive is not None and reading.decisive.package_dir is not None
    assert reading.decisive.package_dir.source == "unit RuntimeDirectory="


def test_corrupted_tables_escalate_whatever_the_inventory_names_the_server(library: RunbookLibrary) -> None:
    log = "2026-11-25  8:00:00 0 [ERROR] mariadbd: Table './shop/orders' is marked as crashed and should be repaired"
    failure = Failure(host="db1", service="shop-db", failure_class="unhealthy", summary="mariadb-admin ping: rc=1",
                      evidence={"status": {"output": ""}, "logs": {"/var/log/mysql/error.log": log}, "port_owners": [], "processes": []},
                      spec={"name": "shop-db", "ports": [3306], "logs": ["/var/log/mysql/error.log"]})
    plan = _plan(Planner(library, None), failure)
    assert (plan.reference, plan.steps) == ("mysql-corrupted-tables", ()) and "a DBA takes a backup" in (plan.escalation or "")
