"""Runbooks' structured conditions (match.query) and values (vars): JMESPath over the incident document."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.conditions import compile_query, incident_document, jmespath_true
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import NotApplicable
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import Reading, read_failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary, parse_runbook
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError, RunbookError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import package_dir
from helpers import nginx_failure

SQUATTER = {"pid": 4242, "process": "python3", "cmdline": "python3 -m http.server 80"}


def runbook(front: str) -> Any:
    return parse_runbook(f"---\nid: t\ntitle: a test runbook\nservices: [nginx]\n{front}\n---\nbody\n", "/runbooks/t.md")


@pytest.mark.parametrize(("value", "true"), [
    (None, False), (False, False), ("", False), ([], False), ({}, False),
    (0, True), (0.0, True), (True, True), ("no", True), ([None], True), ({"a": None}, True),
])
def test_truth_is_jmespaths_own(value: Any, true: bool) -> None:
    assert jmespath_true(value) is true


def test_the_incident_document_holds_the_structured_evidence_and_the_outputs() -> None:
    document = incident_document(nginx_failure("port_conflict", owner=SQUATTER), {"nginx -t": "syntax is ok"})
    assert document["service"] == "nginx" and document["failure_class"] == "port_conflict"
    assert document["evidence"]["port_owners"][0]["pid"] == 4242
    assert document["outputs"] == {"nginx -t": "syntax is ok"} and document["reading"] is None and document["unit"] is None
    assert compile_query("evidence.port_owners[?process != 'nginx'].pid | [0]", field="q").search(document) == 4242


def test_a_query_matches_with_the_class_and_the_regexes_and_only_when_all_hold() -> None:
    book = runbook('match:\n  failure_class: [port_conflict]\n  evidence: {summary: "held by"}\n'
                   '  query: ["evidence.port_owners[?process != \'nginx\']", "spec.ports[0] == `80`"]\nsteps: ["kill -TERM {port_owner_pid}"]')
    assert book.matches(nginx_failure("port_conflict", owner=SQUATTER), {})
    # nginx itself holds the port: the structure says it is not another process's
    assert not book.matches(nginx_failure("port_conflict", owner={**SQUATTER, "process": "nginx"}), {})
    assert not book.matches(nginx_failure("not_running"), {})
    # the query is one more condition: it ranks above the same runbook without it
    plain = runbook('match:\n  failure_class: [port_conflict]\n  evidence: {summary: "held by"}\nsteps: ["kill -TERM {port_owner_pid}"]')
    assert book.specificity > plain.specificity


def test_a_single_query_may_be_written_as_text() -> None:
    book = runbook('match:\n  query: "evidence.pidfile.exists && !(evidence.pidfile.alive)"\nsteps: ["rm -f {stale_pidfile}"]')
    assert book.matches(nginx_failure("stale_pidfile"), {}) and not book.matches(nginx_failure("not_running"), {})


def test_missing_fields_and_type_errors_answer_nothing_instead_of_failing() -> None:
    failure = nginx_failure("stale_pidfile")
    assert not runbook('match:\n  query: evidence.disk.full\nsteps: ["service {init_service} start"]').matches(failure, {})
    # length() of a boolean is a type error while evaluating: the condition does not hold, and nothing raises
    typed = runbook('match:\n  query: "length(evidence.pidfile.alive) > `0`"\nsteps: ["service {init_service} start"]')
    assert not typed.matches(failure, {})
    # the outputs of evidence commands are there by command
    outputs = runbook('match:\n  query: "contains(outputs.\\"nginx -t\\", \'syntax is ok\')"\nsteps: ["service {init_service} start"]')
    assert outputs.matches(failure, {"nginx -t": "nginx: the configuration file syntax is ok"}) and not outputs.matches(failure, {})


@pytest.mark.parametrize(("front", "field", "said"), [
    ("match:\n  query: 'evidence.['", "match.query[0]", "Invalid jmespath expression"),
    ("match:\n  query: ['service', 'nosuch(evidence)']", "match.query[1]", "unknown function: nosuch()"),
    ("match:\n  query: 'length(evidence, summary)'", "match.query[0]", "length() takes 1 argument(s), got 2"),
    ("match:\n  query: 'max_by(evidence.processes)'", "match.query[0]", "max_by() takes 2 argument(s), got 1"),
    ("match:\n  query: ['']", "match.query[0]", "required text"),
    ("vars:\n  target: 'evidence.paths[?'", "vars.target", "Incomplete expression"),
])
def test_a_bad_expression_fails_the_load_naming_file_field_expression_and_jmespaths_words(front: str, field: str, said: str) -> None:
    with pytest.raises(RunbookError) as caught:
        runbook(front + '\nsteps: ["service {init_service} start"]')
    assert caught.value.field == field and "/runbooks/t.md" in str(caught.value) and said in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_vars_fill_steps_and_escalations_from_the_structure() -> None:
    book = runbook("vars:\n  squatter: evidence.port_owners[?process != 'nginx'].pid | [0]\n"
                   "  squatter_name: evidence.port_owners[0].cmdline\nsteps: ['kill -TERM {squatter}', 'service {init_service} start']")
    steps = book.render_steps(nginx_failure("port_conflict", owner=SQUATTER))
    assert [step.argv for step in steps] == [("kill", "-TERM", "4242"), ("service", "nginx", "start")]
    assert steps[0].template == "kill -TERM {squatter}"  # memory keeps the template, to fill it from the next incident
    told = runbook("vars:\n  squatter_name: evidence.port_owners[0].cmdline\nescalate: '{squatter_name} holds the port'")
    assert told.render_escalation(nginx_failure("port_conflict", owner=SQUATTER), {}) == "python3 -m http.server 80 holds the port"


@pytest.mark.parametrize(("owners", "why"), [
    ([], "null: no port owner"),
    ([{**SQUATTER, "pid": ""}], "empty text"),
    ([{**SQUATTER, "pid": [4242, 4243]}], "a list"),
    ([{**SQUATTER, "pid": {"main": 4242}}], "an object"),
    ([{**SQUATTER, "pid": True}], "a boolean"),
    ([{**SQUATTER, "pid": "4242; reboot"}], "not one plain argument"),
    ([{**SQUATTER, "pid": "42 43"}], "two arguments"),
])
def test_a_var_that_is_not_one_plain_value_makes_the_runbook_not_apply(owners: list[dict[str, Any]], why: str) -> None:
    book = runbook("vars:\n  squatter: evidence.port_owners[0].pid\nsteps: ['kill -TERM {squatter}', 'service {init_service} start']")
    failure = nginx_failure("port_conflict")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": owners})
    with pytest.raises(NotApplicable):
        book.render_steps(failure)
    escalation = runbook("vars:\n  squatter: evidence.port_owners[0].pid\nescalate: 'pid {squatter} holds the port'")
    if why in ("not one plain argument", "two arguments"):
        assert escalation.render_escalation(failure, {}) == f"pid {owners[0]['pid']} holds the port"  # text for people
    else:
        with pytest.raises(NotApplicable):
            escalation.render_escalation(failure, {})


@pytest.mark.parametrize(("front", "field"), [
    ("vars:\n  stale_pidfile: evidence.pidfile.path\nsteps: ['rm -f {stale_pidfile}']", "vars.stale_pidfile"),
    ("vars:\n  Target: evidence.pidfile.path\nsteps: ['rm -f {Target}']", "vars.Target"),
    ("vars: [evidence.pidfile.path]\nsteps: ['rm -f {target}']", "vars"),
    ("vars:\n  target: evidence.pidfile.path\nsteps: ['rm -f {other}']", "steps[0]"),
])
def test_vars_are_new_placeholders_and_steps_may_use_only_known_ones(front: str, field: str) -> None:
    with pytest.raises(RunbookError) as caught:
        runbook(front)
    assert caught.value.field == field


def test_a_projection_var_fills_an_argument_of_its_own_with_one_argument_per_item_found() -> None:
    book = runbook("vars:\n  pids: evidence.port_owners[*].pid\nsteps: ['kill -TERM {pids}', 'service {init_service} start']")
    told = runbook("vars:\n  pids: evidence.port_owners[*].pid\nescalate: 'pids {pids} hold the port'")
    failure = nginx_failure("port_conflict")
    owners = [{**SQUATTER, "pid": 41}, {**SQUATTER, "pid": 42}]
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": owners})
    assert book.render_steps(failure)[0].argv == ("kill", "-TERM", "41", "42")
    assert told.render_escalation(failure, {}) == "pids 41 42 hold the port"
    inside = runbook("vars:\n  pids: evidence.port_owners[*].pid\nsteps: ['kill -TERM x{pids}']")
    with pytest.raises(NotApplicable):  # never spliced into an argument
        inside.render_steps(failure)
    for unsafe in ("41; reboot", "", True):
        spoiled = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": [*owners, {**SQUATTER, "pid": unsafe}]})
        with pytest.raises(NotApplicable):
            book.render_steps(spoiled)


def test_the_workers_of_a_killed_master_on_its_port_are_stopped_by_pid_then_the_service_starts() -> None:
    [lost] = [rb for rb in RunbookLibrary.load().runbooks if rb.id == "service-processes-outlived-master"]
    workers = [{**SQUATTER, "pid": pid, "process": "nginx", "service_program": True, "unit": None} for pid in (41, 42)]
    failure = nginx_failure("stale_pidfile")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": workers})
    assert lost.matches(failure, {})
    assert [step.argv for step in lost.render_steps(failure)] == [("kill", "-TERM", "41", "42"), ("service", "nginx", "start")]
    # a process carrying the name without running the program, one of another service, or the pid file's own tree
    for owner in ({"service_program": False}, {"service": "apache2"}, {"unit": "nginx-admin.service"}):
        other = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": [{**workers[0], **owner}]})
        assert not lost.matches(other, {}), owner
    known = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": workers[:1], "service_pids": [41]})
    assert not lost.matches(known, {})


def test_the_port_conflict_class_stops_a_foreign_owner_never_the_services_own_process() -> None:
    [port_conflict] = [rb for rb in RunbookLibrary.load().runbooks if rb.id == "port-conflict"]
    squatted = nginx_failure("port_conflict", owner=SQUATTER)
    assert port_conflict.matches(squatted, {})
    assert [step.argv for step in port_conflict.render_steps(squatted)] == [("kill", "-TERM", "4242"), ("service", "nginx", "start")]
    # the service's own process on its port (a leftover master) is another runbook's case: this class does not apply
    assert not port_conflict.matches(nginx_failure("port_conflict", owner={**SQUATTER, "process": "nginx"}), {})
    # the first foreign owner, wherever the service's own sits in the list
    both = nginx_failure("port_conflict", owner={**SQUATTER, "pid": 7, "process": "nginx"})
    both = dataclasses.replace(both, evidence={**both.evidence, "port_owners": [*both.evidence["port_owners"], SQUATTER]})
    assert incident_document(both, {})["foreign_port_owners"] == [SQUATTER]
    assert port_conflict.render_steps(both)[0].argv == ("kill", "-TERM", "4242")


def test_a_process_of_the_services_own_units_on_its_port_is_never_a_stranger() -> None:
    """What service_check says of a port owner in the cgroup of one of the service's units (the unit an umbrella fronts,
    a helper under another name): the service's own, so no class kills it, and the guard reads its pid as the
    service's, never as a squatter's."""
    [port_conflict] = [rb for rb in RunbookLibrary.load().runbooks if rb.id == "port-conflict"]
    helper = {**SQUATTER, "process": "nginx-helper", "unit": "nginx.service", "own": True}
    failure = nginx_failure("port_conflict", owner=helper)
    assert incident_document(failure, {})["foreign_port_owners"] == []
    assert not port_conflict.matches(failure, {})
    context = PolicyContext.from_failure(failure)
    assert 4242 in context.service_pids
    stranger = nginx_failure("port_conflict", owner={**helper, "unit": "squatter.service", "own": False})
    assert incident_document(stranger, {})["foreign_port_owners"] != [] and 4242 not in PolicyContext.from_failure(stranger).service_pids


REDIS_SPEC = {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server", "user": "redis",
              "logs": ["/var/log/redis/redis-server.log"], "paths": ["/var/lib/redis", "/run/redis"]}
REDIS_DATA = {"path": "/var/lib/redis", "owner": "redis", "group": "redis", "mode": "0750", "tree": True,
              "source": "the policy's package_paths"}
REDIS_LOGS = {"path": "/var/log/redis", "owner": "redis", "group": "adm", "mode": "2750", "tree": True,
              "source": "the policy's package_paths"}


def redis_failure(journal: str = "", *, paths: list[dict[str, Any]] | None = None, disk: list[dict[str, Any]] | None = None,
                  unit: dict[str, Any] | None = None) -> Failure:
    """A redis incident on a systemd host, with its declared paths and log filesystem as service_check reports them."""
    declared = paths if paths is not None else [{"path": "/var/lib/redis", "exists": True, "type": "directory", "owner": "redis",
                                                 "group": "redis", "mode": "0750"}, {"path": "/run/redis", "exists": False}]
    # as journalctl --output=short-iso writes it
    journal = "\n".join(f"2026-11-25T08:00:00+0000 cache1 {line}" for line in journal.splitlines())
    unit = {"Id": "redis-server.service", "RuntimeDirectory": "redis", "journal": journal, **(unit or {})}
    return Failure(host="cache1", service="redis", failure_class="restart_loop", summary="redis-cli ping: rc=1",
                   evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "paths": declared,
                             "disk": disk or [], "unit": unit},
                   spec=REDIS_SPEC, facts={"service_manager": "systemd"})


def read(failure: Failure) -> Reading:
    """The reading heal makes, locating paths in the package directories of the default policy."""
    return read_failure(failure, {}, locate=functools.partial(package_dir, load_policy(), PolicyContext.from_failure(failure)))


def test_missing_paths_name_what_the_service_says_then_the_declared_paths_that_do_not_exist() -> None:
    said = redis_failure("redis-server[90]: >>> 'dir /var/lib/redis'\nredis-server[90]: No such file or directory",
                         paths=[{"path": "/var/lib/redis", "exists": False}, {"path": "/run/redis", "exists": False}])
    missing = incident_document(said, {}, read(said))["missing_paths"]
    # /run/redis is the unit's RuntimeDirectory=: systemd makes it at each start and removes it at each stop
    assert missing == [{"path": "/var/lib/redis", "source": "journal of redis-server.service", "package_dir": REDIS_DATA},
                       {"path": "/var/lib/redis", "source": "service_check", "package_dir": REDIS_DATA}]
    # without systemd's word for it, a missing /run/redis is missing (and the package's directory)
    sysv = dataclasses.replace(said, evidence={**said.evidence, "unit": None}, facts={})
    assert [found["path"] for found in incident_document(sysv, {}, read(sysv))["missing_paths"]] == ["/var/lib/redis", "/run/redis"]
    # a path no package made: listed, without a package directory
    elsewhere = redis_failure(paths=[{"path": "/srv/cache", "exists": False}])
    assert incident_document(elsewhere, {}, read(elsewhere))["missing_paths"] == [
        {"path": "/srv/cache", "source": "service_check", "package_dir": None}]
    assert incident_document(redis_failure(), {}, read(redis_failure()))["missing_paths"] == []


def test_misowned_paths_compare_a_declared_directory_with_its_packages_owner_and_name_the_permission_error() -> None:
    root_owned = redis_failure(paths=[{"path": "/var/lib/redis", "exists": True, "owner": "root", "group": "root", "mode": "0750"}])
    assert incident_document(root_owned, {}, read(root_owned))["misowned_paths"] == [
        {"path": "/var/lib/redis", "source": "service_check", "owner": "root", "group": "root", "mode": "0750", "package_dir": REDIS_DATA}]
    # redis names no path when it cannot open its log: the path is its declared log, in the package's log directory
    denied = redis_failure("redis-server[90]: *** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n"
                           "redis-server[90]: Can't open the log file: Permission denied")
    assert incident_document(denied, {}, read(denied))["misowned_paths"] == [
        {"path": "/var/log/redis/redis-server.log", "source": "journal of redis-server.service", "owner": None, "group": None,
         "mode": None, "package_dir": REDIS_LOGS}]
    # a declared path that is no package's directory is compared with the declared account
    other = redis_failure(paths=[{"path": "/srv/cache", "exists": True, "owner": "www-data", "group": "www-data", "mode": "0755"}])
    assert [(found["path"], found["package_dir"]) for found in incident_document(other, {}, read(other))["misowned_paths"]] == [
        ("/srv/cache", None)]
    assert incident_document(redis_failure(), {}, read(redis_failure()))["misowned_paths"] == []
    # below a package's directory (a tree): what it should be is not known, so no class gives anything back
    below = redis_failure(paths=[{"path": "/var/lib/redis/backup", "exists": True, "owner": "root", "group": "root", "mode": "0755"}])
    assert [(found["path"], found["package_dir"]) for found in incident_document(below, {}, read(below))["misowned_paths"]] == [
        ("/var/lib/redis/backup", None)]
    assert not _class("service-directory-permissions").matches(below, {}, read(below))


def test_full_log_filesystems_are_those_of_the_declared_logs() -> None:
    inodes = {"path": "/var/log/redis", "full": False, "inodes_exhausted": True, "used_percent": 12, "inodes_percent": 100}
    full = redis_failure(disk=[inodes, {"path": "/var/lib/redis", "full": True, "inodes_exhausted": False}])
    assert incident_document(full, {}, read(full))["full_log_filesystems"] == [
        {"log": "/var/log/redis/redis-server.log", "directory": "/var/log/redis", "full": False, "inodes_exhausted": True,
         "used_percent": 12, "inodes_percent": 100, "package_dir": REDIS_LOGS}]
    data_only = redis_failure(disk=[{"path": "/var/lib/redis", "full": True, "inodes_exhausted": True}])
    assert incident_document(data_only, {}, read(data_only))["full_log_filesystems"] == []


def _class(runbook_id: str) -> Any:
    return next(rb for rb in RunbookLibrary.load().runbooks if rb.id == runbook_id)


def test_the_directory_classes_restore_the_packages_directory_and_start_the_unit() -> None:
    gone = redis_failure("redis-server[90]: >>> 'dir /var/lib/redis'\nredis-server[90]: No such file or directory",
                         paths=[{"path": "/var/lib/redis", "exists": False}, {"path": "/run/redis", "exists": False}])
    missing = _class("service-directory-missing")
    assert missing.matches(gone, {}, read(gone))
    assert [step.argv for step in missing.render_steps(gone, read(gone))] == [
        ("install", "-d", "-m", "0750", "-o", "redis", "-g", "redis", "/var/lib/redis"), ("systemctl", "reset-failed", "redis-server"),
        ("systemctl", "start", "redis-server")]
    # only /run/redis absent, which systemd makes at the start: nothing is missing
    assert not missing.matches(redis_failure(), {}, read(redis_failure()))
    denied = redis_failure("redis-server[90]: Can't open the log file: Permission denied")
    permissions = _class("service-directory-permissions")
    assert permissions.matches(denied, {}, read(denied)) and not missing.matches(denied, {}, read(denied))
    assert permissions.render_steps(denied, read(denied))[0].argv == (
        "install", "-d", "-m", "2750", "-o", "redis", "-g", "adm", "/var/log/redis")
    # a directory of no package: neither class acts (required-path-missing escalates it)
    elsewhere = redis_failure(paths=[{"path": "/srv/cache", "exists": False}])
    assert not missing.matches(elsewhere, {}, read(elsewhere))


def test_the_log_filesystem_classes_remove_rotated_logs_then_empty_the_live_one_of_a_log_in_the_services_own_directory() -> None:
    out_of_inodes = redis_failure(disk=[{"path": "/var/log/redis", "full": False, "inodes_exhausted": True}])
    rotated, truncate = _class("log-filesystem-full"), _class("log-filesystem-full-truncate")
    assert rotated.matches(out_of_inodes, {}, read(out_of_inodes)) and not truncate.matches(out_of_inodes, {}, read(out_of_inodes))
    [remove, *_rest] = rotated.render_steps(out_of_inodes, read(out_of_inodes))
    log = "/var/log/redis/redis-server.log"
    assert remove.argv == ("rm", "-f", f"{log}.1", *(f"{log}.{n}.gz" for n in range(1, 13)))
    out_of_space = redis_failure(disk=[{"path": "/var/log/redis", "full": True, "inodes_exhausted": False}])
    assert truncate.render_steps(out_of_space, read(out_of_space))[0].argv == ("truncate", "-s", "0", log)
    # a log in a shared directory (/var/log itself) is not the service's own: neither class applies
    shared = dataclasses.replace(out_of_space, spec={**out_of_space.spec, "logs": ["/var/log/redis.log"]},
                                 evidence={**out_of_space.evidence, "disk": [{"path": "/var/log", "full": True}]})
    assert not rotated.matches(shared, {}, read(shared)) and not truncate.matches(shared, {}, read(shared))
    # a log path so long that the removal would pass the policy's max_command_length: not this class
    long_log = "/var/log/redis/" + "r" * 30 + ".log"
    lengthy = dataclasses.replace(out_of_inodes, spec={**out_of_inodes.spec, "logs": [long_log]})
    assert not rotated.matches(lengthy, {}, read(lengthy))


def test_evidence_entries_of_another_shape_are_passed_over_by_the_views() -> None:
    odd = redis_failure(paths=["/var/lib/redis", {"exists": False}, {"path": None, "exists": False}], disk=["/var/log/redis", None])
    document = incident_document(odd, {}, read(odd))
    assert (document["missing_paths"], document["misowned_paths"], document["full_log_filesystems"]) == ([], [], [])


def test_a_file_the_service_must_open_is_given_back_where_the_package_owns_its_directory_whole() -> None:
    """redis cannot open its root-owned log ("Can't open the log file: Permission denied", or nothing at all when a
    sysv script started it): the file class gives the file back the owner and group of everything in /var/log/redis,
    with chown -h; the directory class would only make the directory again."""
    [file_class] = [rb for rb in RunbookLibrary.load().runbooks if rb.id == "service-file-ownership"]
    for said in ("redis-server[90]: Can't open the log file: Permission denied", ""):
        failure = redis_failure(said)
        failure = dataclasses.replace(failure, evidence={**failure.evidence, "path_owners": {
            "/var": "root", "/var/log": "root", "/var/log/redis": "redis", "/var/log/redis/redis-server.log": "root"}})
        reading = read(failure)
        assert file_class.matches(failure, {}, reading), said
        assert file_class.render_steps(failure, reading)[0].argv == ("chown", "-h", "redis:adm", "/var/log/redis/redis-server.log")
    # a log service_check saw as a link is no file of the service's to give back
    linked = redis_failure()
    linked = dataclasses.replace(linked, evidence={**linked.evidence, "path_owners": {"/var/log/redis/redis-server.log": "(link)"}})
    assert not file_class.matches(linked, {}, read(linked))
