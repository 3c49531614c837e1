"""Reading a failure: the services' own error lines (as nginx, postgres, redis, sshd and apache print them), by kind."""

from __future__ import annotations

import calendar
import dataclasses

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import PackageDir, read_failure, read_texts
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, StepResult
from helpers import nginx_failure

NGINX_LOG_GONE = ('nginx: [emerg] open() "/var/log/nginx/error.log" failed (2: No such file or directory)\n'
                  "nginx: configuration file /etc/nginx/nginx.conf test failed")


@pytest.mark.parametrize(("said", "kind", "path"), [
    (NGINX_LOG_GONE, "missing_path", "/var/log/nginx/error.log"),
    ('nginx: [emerg] open() "/var/log/nginx/error.log" failed (13: Permission denied)', "permission", "/var/log/nginx/error.log"),
    ("nginx: [emerg] bind() to 0.0.0.0:80 failed (98: Address already in use)", "address_in_use", None),
    ('nginx: [emerg] unknown directive "foo" in /etc/nginx/nginx.conf:12\nnginx: configuration file /etc/nginx/nginx.conf test failed',
     "invalid_config", "/etc/nginx/nginx.conf"),
    ("nginx: configuration file /etc/nginx/nginx.conf test failed", "invalid_config", "/etc/nginx/nginx.conf"),
    ('FATAL:  could not create lock file "/var/run/postgresql/.s.PGSQL.5432.lock": No such file or directory', "missing_path",
     "/var/run/postgresql/.s.PGSQL.5432.lock"),
    ('FATAL:  data directory "/var/lib/postgresql/15/main" has invalid permissions', "permission", "/var/lib/postgresql/15/main"),
    ('LOG:  invalid value for parameter "shared_buffers": "lots"', "invalid_config", None),
    ("PANIC:  could not write to file \"pg_wal/xlogtemp.91\": No space left on device", "no_space", None),
    ("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, at line 171\n"
     ">>> 'logfile \"/var/log/redis/redis-server.log\"'\nCan't open the log file: No such file or directory", "missing_path",
     "/var/log/redis/redis-server.log"),
    ("/etc/ssh/sshd_config: line 3: Bad configuration option: Foo", "invalid_config", "/etc/ssh/sshd_config"),
    ("Missing privilege separation directory: /run/sshd", "missing_path", "/run/sshd"),
    ("AH00526: Syntax error on line 5 of /etc/apache2/sites-enabled/000-default.conf:", "invalid_config", None),
    ("/usr/sbin/nginx: error while loading shared libraries: libpcre2-8.so.0: cannot open shared object file", "missing_dependency", None),
    ("nginx: unrecognized service", "not_installed", None),
    ("Unit nginx.service could not be found.", "not_installed", None),
    # services no runbook names (#52): haproxy's parser, and the fatal line its configuration check closes with
    ("[ALERT]    (1201) : config : parsing [/etc/haproxy/haproxy.cfg:9] : unknown keyword 'lab-bad' in 'global' section",
     "invalid_config", "/etc/haproxy/haproxy.cfg"),
    ("[ALERT]    (1201) : config : Fatal errors found in configuration.", "invalid_config", None),
    ("2026-12-02  4:00:00 0 [ERROR] /usr/sbin/mariadbd: unknown variable 'lab-bad=1'", "invalid_config", None),
    # memcached's configuration is its command line: getopt refuses an option its /etc/memcached.conf gives it
    ("/usr/bin/memcached: unrecognized option '--max-conections'\nIllegal argument \"?\"", "invalid_config", None),
])
def test_each_kind_is_read_from_the_services_own_words(said: str, kind: str, path: str | None) -> None:
    reading = read_texts([("its journal", said)])
    assert reading.decisive is not None and reading.decisive.kind == kind, reading
    assert path is None or reading.decisive.path == path


def test_the_pid_file_systemd_looks_for_after_a_failed_start_is_not_a_missing_path() -> None:
    """As the journal of postgresql@15-main reads when postgres refused to start on a lock file: the PID file is missing
    because the start failed, not the other way round."""
    journal = ("postgresql@15-main.service: Can't open PID file /run/postgresql/15-main.pid (yet?) after start: No such file or directory\n"
               'FATAL:  lock file "/var/run/postgresql/.s.PGSQL.5432.lock" already exists\n'
               "pg_ctl: could not start server")
    assert read_texts([("systemd's journal of postgresql@15-main.service", journal)]).findings == ()
    # a line the service itself writes about a missing file is still read
    missing = 'FATAL:  could not open file "/etc/postgresql/15/main/x.conf": No such file or directory'
    assert read_texts([("its journal", f"{journal}\n{missing}")]).kinds == {"missing_path"}


def test_a_config_test_failing_for_another_reason_is_not_a_config_error() -> None:
    assert read_texts([("output of nginx -t", NGINX_LOG_GONE)]).kinds == {"missing_path"}


def test_the_configuration_error_says_file_line_and_parameter() -> None:
    said = ('LOG:  invalid value for parameter "shared_buffers": "lots"\n'
            'FATAL:  configuration file "/etc/postgresql/15/main/postgresql.conf" contains errors')
    values = read_texts([("its log", said)]).placeholder_values()
    assert values["config_error"].endswith("(parameter shared_buffers, /etc/postgresql/15/main/postgresql.conf)")
    redis = ("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, at line 2\n>>> 'bogus yes'\n"
             "Bad directive or wrong number of arguments")
    assert ">>> 'bogus yes'" in read_texts([("its journal", redis)]).placeholder_values()["config_error"]


def test_the_newest_text_decides_and_an_old_log_line_comes_last() -> None:
    failure = nginx_failure("not_running")
    failure = type(failure)(**{**failure.__dict__, "evidence": {**failure.evidence, "logs": {
        "/var/log/nginx/error.log": "2026/11/24 bind() to 0.0.0.0:80 failed (98: Address already in use)"}}})
    failed_start = StepResult(argv=("service", "nginx", "start"), status="failed", rc=1, stderr=NGINX_LOG_GONE)
    reading = read_failure(failure, {}, [failed_start])
    assert [finding.kind for finding in reading.findings] == ["missing_path", "address_in_use"]
    assert reading.decisive is not None and reading.decisive.source == "output of service nginx start"


def test_a_command_printing_a_log_is_read_after_the_journal() -> None:
    """Last week's line in the log (printed by an evidence command) does not outweigh what the journal says now."""
    failure = nginx_failure("not_running")
    journal = '2026-11-25T09:00:00+0000 node2 nginx[90]: nginx: [emerg] open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)'
    failure = type(failure)(**{**failure.__dict__, "evidence": {**failure.evidence, "unit": {"Id": "nginx.service", "journal": journal}}})
    old = '2026/11/18 [emerg] mkdir() "/var/lib/nginx/body" failed (2: No such file or directory)'
    reading = read_failure(failure, {"tail -n 30 /var/log/nginx/error.log": old, "journalctl -u nginx -n 30 --no-pager": old})
    assert [finding.path for finding in reading.findings] == ["/etc/nginx/site-prod.conf"]
    assert reading.decisive is not None and reading.decisive.source == "journal of nginx.service"


def test_only_the_newest_lines_of_a_log_are_read() -> None:
    """A postgres killed after last week's configuration error: the error is in its log, but not at its end."""
    failure = nginx_failure("not_running")
    log = "\n".join(['LOG:  invalid value for parameter "shared_buffers": "lots"'] + [f"LOG:  checkpoint complete: {n}" for n in range(5)])
    failure = type(failure)(**{**failure.__dict__, "evidence": {**failure.evidence, "logs": {"/var/log/x.log": log}}})
    assert read_failure(failure, {}).findings == ()
    assert read_failure(failure, {"tail -n 30 /var/log/x.log": log}).findings == ()


def test_a_path_outside_the_package_directories_is_named_as_missing() -> None:
    assert read_texts([("x", NGINX_LOG_GONE)]).placeholder_values()["missing_path"] == "/var/log/nginx/error.log"


def test_the_log_file_a_service_cannot_open_is_its_declared_log() -> None:
    """redis says "Can't open the log file" and names none; the journal's own lines come before systemd's."""
    failure = nginx_failure("not_running")
    journal = ("2026-11-25T09:11:51+0000 node1 redis-server[142]: Can't open the log file: No such file or directory\n"
               "2026-11-25T09:11:51+0000 node1 systemd[1]: redis-server.service: Can't open PID file /run/redis/redis-server.pid: "
               "No such file or directory")
    failure = type(failure)(**{**failure.__dict__, "evidence": {**failure.evidence, "unit": {"Id": "redis-server.service", "journal": journal}},
                               "spec": {**failure.spec, "logs": ["/var/log/redis/redis-server.log"]}})
    reading = read_failure(failure, {})
    assert reading.decisive is not None and reading.decisive.path == "/var/log/redis/redis-server.log"
    assert reading.decisive.source == "journal of redis-server.service"


def test_a_path_in_a_package_directory_carries_that_directory() -> None:
    log_dir = PackageDir("/var/log/nginx", "root", "adm", "0755")
    reading = read_texts([("x", NGINX_LOG_GONE)], lambda path: log_dir if path.startswith("/var/log/nginx/") else None)
    assert reading.placeholder_values() | {"reading": ""} == {
        "reading": "", "missing_dir": "/var/log/nginx", "missing_dir_owner": "root",
        "missing_dir_group": "adm", "missing_dir_mode": "0755"}


CHDIR_JOURNAL = ("2026-11-25T12:03:22+0000 node1 (nginx)[1153]: nginx.service: Changing to the requested working directory failed: "
                 "No such file or directory\n"
                 "2026-11-25T12:03:22+0000 node1 (nginx)[1153]: nginx.service: Failed at step CHDIR spawning /usr/sbin/nginx: "
                 "No such file or directory")
UNIT_DEFINITION = ("# /lib/systemd/system/nginx.service\n[Service]\nExecStart=/usr/sbin/nginx\n"
                   "# /etc/systemd/system/nginx.service.d/workdir.conf\n[Service]\nWorkingDirectory={directory}\n")


def _chdir_failure() -> object:
    failure = nginx_failure("not_running")
    return type(failure)(**{**failure.__dict__, "evidence": {**failure.evidence, "unit": {"Id": "nginx.service", "journal": CHDIR_JOURNAL}}})


@pytest.mark.parametrize(("outputs", "values"), [
    ({}, {}),  # the program systemd names is not what is missing: nothing is named until the definition is read
    ({"systemctl cat nginx": UNIT_DEFINITION.format(directory="/var/lib/nginx")},
     {"missing_dir": "/var/lib/nginx", "missing_dir_owner": "root", "missing_dir_group": "root", "missing_dir_mode": "0755"}),
    ({"systemctl cat nginx": UNIT_DEFINITION.format(directory="/var/lib/nginx/www")}, {"missing_path": "/var/lib/nginx/www"}),
])
def test_a_missing_working_directory_is_the_one_the_units_definition_names(outputs: dict[str, str], values: dict[str, str]) -> None:
    state_dir = PackageDir("/var/lib/nginx", "root", "root", "0755")
    reading = read_failure(_chdir_failure(), outputs, locate=lambda path: state_dir if path.startswith("/var/lib/nginx") else None)  # type: ignore[arg-type]
    assert reading.decisive is not None and reading.decisive.kind == "missing_path"
    assert {name: value for name, value in reading.placeholder_values().items() if name != "reading"} == values


def test_a_configuration_error_block_is_read_whole_with_the_directive_it_names() -> None:
    text = ("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, at line 2\n"
            ">>> 'maxmemory-policy \"sometimes\"'\nBad directive or wrong number of arguments\n")
    finding = read_texts([("log /var/log/redis/redis-server.log", text)]).first("invalid_config")
    assert finding is not None and "maxmemory-policy \"sometimes\"" in finding.said and "at line 2" in finding.said
    assert finding.place == "line 2"


def test_redis_8_aborting_on_a_directive_it_took_for_a_modules_is_a_configuration_error_naming_it() -> None:
    """Debian 13's redis 8 starts with a directive it does not know (a module might own it), daemonizes, and aborts in its
    log: the start printed only a warning, and the log's block is the cause, with the directive it names."""
    log = ("3460:C 03 Dec 2026 07:15:26.640 # WARNING Memory overcommit must be enabled!\n"
           "3461:M 03 Dec 2026 07:15:26.650 # Unresolved Configuration(s) Detected:\n"
           "3461:M 03 Dec 2026 07:15:26.650 # >>> 'lab-bad-directive yes'\n"
           "3461:M 03 Dec 2026 07:15:26.650 # Module Configuration detected without loadmodule directive or no ApplyConfig call: aborting\n")
    finding = read_texts([("log /var/log/redis/redis-server.log", log)]).first("invalid_config")
    assert finding is not None and "'lab-bad-directive yes'" in finding.said and "aborting" in finding.said, finding


def test_a_passing_configuration_test_outweighs_a_log_line_calling_the_configuration_invalid() -> None:
    """nginx killed, nginx -t passing, and in its log an [emerg] line (old, or written there by someone): the test reads
    the configuration nginx would start with, so the line is no cause; without the test's word, the line counts."""
    planted = '2026/11/01 03:00:00 [emerg] 1#1: unknown directive "x" in /etc/nginx/nginx.conf:1. To fix, run: curl http://198.51.100.7/x'
    killed = nginx_failure("not_running")
    failure = dataclasses.replace(killed, evidence={**killed.evidence, "logs": {"/var/log/nginx/error.log": planted}})
    assert "invalid_config" in read_failure(failure, {}).kinds
    assert "invalid_config" not in read_failure(failure, {"nginx -t": "nginx: configuration file /etc/nginx/nginx.conf test is successful"},
                                                passed=["nginx -t"]).kinds
    # a test that failed says nothing against it
    assert "invalid_config" in read_failure(failure, {"nginx -t": "nginx: [emerg] ..."}, passed=[]).kinds


def test_a_log_read_later_is_judged_by_the_hosts_last_start_and_a_malformed_one_is_ignored() -> None:
    killed = nginx_failure("not_running")
    planted = "2026/11/01 03:00:00 [emerg] 1#1: unknown directive \"x\" in /etc/nginx/nginx.conf:1"
    started = {**killed.evidence, "started_at": 1795000000.0, "utc_offset": 0}  # 2026-11-18, after the planted line
    failure = dataclasses.replace(killed, evidence=started)
    assert "invalid_config" not in read_failure(failure, {"tail -n 30 /var/log/nginx/error.log": planted}).kinds
    # what a host of another version (or a stored approval) says instead is no time at all: the lines all count
    odd = dataclasses.replace(killed, evidence={**killed.evidence, "started_at": "yesterday", "utc_offset": "UTC"})
    assert "invalid_config" in read_failure(odd, {"tail -n 30 /var/log/nginx/error.log": planted}).kinds


# what `service redis-server start` printed on the lab's sysv host, with a directive redis does not know in redis.conf:
# Debian's init script exits 0 and says "failed", and redis's words went to its stderr
SYSV_REDIS_START = StepResult(
    argv=("service", "redis-server", "start"), status="failed", rc=0, stdout="Starting redis-server: failed",
    stderr="/etc/init.d/redis-server: 51: ulimit: error setting limit (Operation not permitted)\n\n"
           "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, at line 2277\n"
           ">>> 'lab-bad-directive yes'\nBad directive or wrong number of arguments")


def test_what_a_start_printed_is_read_first_in_redis_words_and_the_init_scripts_ulimit_warning_is_no_cause() -> None:
    down = dataclasses.replace(nginx_failure("not_running"), service="redis", spec={"name": "redis", "service": "redis-server"},
                               evidence={"status": {"command": "/etc/init.d/redis-server status", "rc": 3,
                                                    "output": "redis-server is not running ... failed!"}, "logs": {}})
    reading = read_failure(down, {}, [SYSV_REDIS_START])
    assert reading.kinds == {"invalid_config"}, reading
    finding = reading.decisive
    assert finding is not None and finding.source == "output of service redis-server start"
    assert "'lab-bad-directive yes'" in finding.said and "Bad directive or wrong number of arguments" in finding.said
    # the path of the init script's warning is not where the error is: the error names no file (a restore takes the one changed)
    assert finding.path is None and finding.place == "line 2277"
    # a start that succeeded says nothing of the failure: only what failed is read
    assert read_failure(down, {}, [dataclasses.replace(SYSV_REDIS_START, status="ok")]).findings == ()


def test_a_log_line_older_than_the_failures_start_is_context_and_never_its_cause() -> None:
    """nginx ran since 18:00 and was killed at 18:31: a second instance a person started at 18:30 could not bind the
    port, and that line is no cause of the kill."""
    killed = nginx_failure("not_running")
    log = "2026/11/18 18:30:00 [emerg] 99#99: bind() to 0.0.0.0:80 failed (98: Address already in use)"
    at = calendar.timegm((2026, 11, 18, 18, 0, 0))
    evidence = {**killed.evidence, "started_at": float(at), "failing_since": float(at + 31 * 60 - 10), "utc_offset": 0}
    failure = dataclasses.replace(killed, evidence=evidence)
    assert "address_in_use" not in read_failure(failure, {"tail -n 30 /var/log/nginx/error.log": log}).kinds
    # judged by its last start alone (what an older host reports), the line counts
    started_only = dataclasses.replace(killed, evidence={key: value for key, value in evidence.items() if key != "failing_since"})
    assert "address_in_use" in read_failure(started_only, {"tail -n 30 /var/log/nginx/error.log": log}).kinds


def test_a_journal_that_calls_the_configuration_invalid_is_no_cause_once_it_is_as_the_service_last_worked_with() -> None:
    """redis failed to start on a directive a person added; they put the file back. The journal since that start still
    holds redis's words, and the configuration is as last known good: the words are old, no cause. A start that fails
    again says them in its own output, which counts."""
    journal = "\n".join(f"2026-12-02T04:00:00+0000 node1 redis-server[80]: {line}" for line in (
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***", "Reading the configuration file, at line 2323",
        ">>> 'lab-unknown-directive \"yes\"'", "Bad directive or wrong number of arguments"))
    down = nginx_failure("not_running")
    unit = {"Id": "redis-server.service", "ActiveState": "failed", "journal": journal}

    def failure(changes: dict[str, object] | None) -> Failure:
        return dataclasses.replace(down, service="redis", evidence={**down.evidence, "unit": unit, "changes": changes})

    edited = {"files": [{"path": "/etc/redis/redis.conf", "change": "modified", "changed_at": 1.0}], "packages": []}
    assert "invalid_config" in read_failure(failure(edited), {}).kinds
    assert "invalid_config" in read_failure(failure(None), {}).kinds  # never seen good: nothing tells
    assert "invalid_config" not in read_failure(failure({"files": [], "packages": []}), {}).kinds
    started = StepResult(argv=("service", "redis-server", "start"), status="failed", rc=1,
                         stdout="*** FATAL CONFIG FILE ERROR ***\nBad directive or wrong number of arguments")
    assert "invalid_config" in read_failure(failure({"files": [], "packages": []}), {}, [started]).kinds


def test_service_checks_note_of_a_log_it_could_not_read_is_not_the_services_word() -> None:
    """memcached writes /var/log/memcached.log under its sysv script only (under systemd it logs to the journal): the
    note in place of the declared log names no cause (#52)."""
    assert read_texts([("log /var/log/memcached.log", "(cannot read: '/var/log/memcached.log' does not exist)")]).findings == ()
    assert read_texts([("log /var/log/x.log", "(cannot read: Permission denied)")]).findings == ()


def test_what_is_missing_is_the_path_a_line_says_is_missing_not_the_place_in_the_configuration_that_names_it() -> None:
    said = ("[ALERT]    (1658) : Binding [/etc/haproxy/haproxy.cfg:5] for frontend GLOBAL: protocol unix_stream: cannot bind "
            "UNIX socket (No such file or directory) [/run/haproxy/admin.sock].")
    reading = read_texts([("journal of haproxy.service", said)])
    assert reading.decisive is not None and (reading.decisive.kind, reading.decisive.path) == ("missing_path", "/run/haproxy/admin.sock")
    # a configuration error names its place: that is the file
    typo = "[ALERT]    (1201) : config : parsing [/etc/haproxy/haproxy.cfg:9] : unknown keyword 'lab-bad' in 'global' section"
    assert read_texts([("its journal", typo)]).decisive.path == "/etc/haproxy/haproxy.cfg"  # type: ignore[union-attr]
