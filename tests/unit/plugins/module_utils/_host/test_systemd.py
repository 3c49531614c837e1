"""Reading systemd's answers: the cause in a unit's journal, its time spans, the classes its state implies.

The inputs are what `systemctl show` and `journalctl -o short-iso` print on Debian 12 (systemd 252); the lab's
systemd hosts run the real commands (tests/integration/test_systemd_lab.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host.systemd import (
    DYING_WORDS_S,
    classify,
    describe,
    directory_units,
    fronted_units,
    journal_cause,
    read_unit,
    timespan_seconds,
    unit_masked,
    units_of,
    units_started,
    went_down_at,
)

NGINX_DROP_IN = "\n".join([
    "2026-11-23T23:27:41+0000 node1 systemd[1]: Starting nginx.service - A high performance web server and a reverse proxy server...",
    "2026-11-23T23:27:41+0000 node1 nginx[663]: 2026/11/23 23:27:41 [emerg] 663#663: "
    'open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)',
    "2026-11-23T23:27:41+0000 node1 nginx[663]: nginx: configuration file /etc/nginx/site-prod.conf test failed",
    "2026-11-23T23:27:41+0000 node1 systemd[1]: nginx.service: Control process exited, code=exited, status=1/FAILURE",
    "2026-11-23T23:27:41+0000 node1 systemd[1]: nginx.service: Failed with result 'exit-code'.",
    "2026-11-23T23:27:41+0000 node1 systemd[1]: Failed to start nginx.service - A high performance web server and a reverse proxy server.",
])

MISSING_BINARY = """\
2026-11-23T23:27:41+0000 node1 systemd[1]: Starting app.service - an app...
2026-11-23T23:27:41+0000 node1 systemd[1]: app.service: Failed to locate executable /opt/app/bin/app: No such file or directory
2026-11-23T23:27:41+0000 node1 systemd[1]: app.service: Failed at step EXEC spawning /opt/app/bin/app: No such file or directory
2026-11-23T23:27:41+0000 node1 systemd[1]: app.service: Main process exited, code=exited, status=203/EXEC
2026-11-23T23:27:41+0000 node1 systemd[1]: app.service: Failed with result 'exit-code'."""

KILLED = """\
2026-11-23T23:06:29+0000 node1 systemd[1]: nginx.service: Main process exited, code=killed, status=9/KILL
2026-11-23T23:06:29+0000 node1 systemd[1]: nginx.service: Failed with result 'signal'."""


def test_the_cause_is_the_services_own_error_lines_before_systemds() -> None:
    assert journal_cause(NGINX_DROP_IN) == (
        '2026/11/23 23:27:41 [emerg] 663#663: open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)'
        " | nginx: configuration file /etc/nginx/site-prod.conf test failed")


def test_systemds_own_words_are_the_cause_when_the_program_never_ran() -> None:
    assert journal_cause(MISSING_BINARY) == (
        "app.service: Failed to locate executable /opt/app/bin/app: No such file or directory"
        " | app.service: Failed at step EXEC spawning /opt/app/bin/app: No such file or directory")


def test_a_program_refusing_its_options_names_the_cause() -> None:
    """memcached's wrapper turns /etc/memcached.conf into its command line; getopt's words are the service's error."""
    journal = ("2026-12-02T23:11:02+0000 node2 systemd-memcached-wrapper[2344]: /usr/bin/memcached: unrecognized option '--max-conections'\n"
               '2026-12-02T23:11:02+0000 node2 systemd-memcached-wrapper[2344]: Illegal argument "?"\n'
               "2026-12-02T23:11:02+0000 node2 systemd[1]: memcached.service: Main process exited, code=exited, status=1/FAILURE")
    assert journal_cause(journal) == "/usr/bin/memcached: unrecognized option '--max-conections' | Illegal argument \"?\""


def test_bookkeeping_lines_are_no_cause() -> None:
    assert journal_cause(KILLED) is None and journal_cause("") is None


@pytest.mark.parametrize(("text", "seconds"), [("100ms", 0.1), ("6s", 6.0), ("1min 30s", 90.0), ("2h", 7200.0), ("", 0.0), ("infinity", 0.0)])
def test_systemd_time_spans_in_seconds(text: str, seconds: float) -> None:
    assert timespan_seconds(text) == seconds


CLEAN_STOP = {"failed_step": None, "ExecMainCode": "1", "ExecMainStatus": "0"}


@pytest.mark.parametrize(("unit", "expected"), [
    ({"LoadState": "masked", "SubState": "dead"}, "masked"),
    ({"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "0"}, "auto_restart"),
    # a deploy script's restarts: the runs ended cleanly, systemd's Restart= did none of them
    ({"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "0", **CLEAN_STOP}, "start_limit_hit"),
    # started again and again by someone while each run failed
    ({"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "0", "ExecMainCode": "1", "ExecMainStatus": "1"}, "restart_loop"),
    # systemd's own restarts: it keeps the failed run's result, and only the journal says it gave up
    ({"ActiveState": "failed", "Result": "exit-code", "NRestarts": "5", "journal": "x: Start request repeated too quickly."}, "restart_loop"),
    # failed once, restarted last week: not a loop
    ({"ActiveState": "failed", "Result": "signal", "NRestarts": "1", "journal": KILLED}, None),
])
def test_the_class_systemds_state_implies(unit: dict[str, object], expected: str | None) -> None:
    assert classify(unit) == expected


def test_the_sentence_names_the_step_that_failed_its_drop_ins_and_the_cause() -> None:
    unit = {"Id": "nginx.service", "ActiveState": "failed", "Result": "exit-code", "NRestarts": "0",
            "failed_step": {"step": "ExecStartPre", "path": "/usr/sbin/nginx", "code": "exited", "status": "1"},
            "DropInPaths": "/etc/systemd/system/nginx.service.d/prod.conf", "failed_requirements": [], "cause": "open() failed"}
    assert describe(unit, "not_running") == (
        "unit nginx.service failed to start: result exit-code, ExecStartPre /usr/sbin/nginx exited with status 1;"
        " its drop-ins: /etc/systemd/system/nginx.service.d/prod.conf; its journal says: open() failed")


def test_the_sentence_names_systemds_exit_status_and_the_signal() -> None:
    user = {"Id": "app.service", "ActiveState": "failed", "Result": "exit-code",
            "failed_step": {"step": "ExecStart", "path": "/opt/app/bin/app", "code": "exited", "status": "217"}}
    killed = {"Id": "nginx.service", "ActiveState": "failed", "Result": "signal", "ExecMainCode": "2", "ExecMainStatus": "9"}
    assert describe(user, "not_running") == "unit app.service failed: result exit-code, ExecStart /opt/app/bin/app exited with status 217/USER"
    assert describe(killed, "not_running") == "unit nginx.service failed: result signal, main process killed by signal SIGKILL"


# Recorded from the lab: PostgreSQL 15 on a data directory PG_VERSION says is 14, and redis on a bad directive.
POSTGRES_VERSION_MISMATCH = (
    "2026-11-27T18:25:15+0000 node2 postgresql@15-main[150]: Error: /usr/lib/postgresql/15/bin/pg_ctl start exited with status 1:\n"
    "2026-11-27T18:25:15+0000 node2 postgresql@15-main[150]: 2026-11-27 18:25:15.130 UTC [153] FATAL:  database files are incompatible"
    " with server\n"
    "2026-11-27T18:25:15+0000 node2 postgresql@15-main[150]: 2026-11-27 18:25:15.130 UTC [153] DETAIL:  The data directory was"
    " initialized by PostgreSQL version 14, which is not compatible with this version 15.18.\n"
    "2026-11-27T18:25:15+0000 node2 postgresql@15-main[150]: pg_ctl: could not start server\n"
    "2026-11-27T18:25:15+0000 node2 systemd[1]: postgresql@15-main.service: Failed with result 'protocol'.\n"
)
REDIS_FATAL_BLOCK = (
    "2026-11-27T18:25:15+0000 node1 redis-server[99]: *** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n"
    "2026-11-27T18:25:15+0000 node1 redis-server[99]: Reading the configuration file, at line 2\n"
    "2026-11-27T18:25:15+0000 node1 redis-server[99]: >>> 'maxmemory-policy \"sometimes\"'\n"
    "2026-11-27T18:25:15+0000 node1 redis-server[99]: Bad directive or wrong number of arguments\n"
    "2026-11-27T18:25:16+0000 node1 systemd[1]: redis-server.service: Main process exited, code=exited, status=1/FAILURE\n"
)


def test_an_error_that_spans_lines_is_quoted_whole() -> None:
    """PostgreSQL's DETAIL says which versions, redis's block which line and directive: without them the cause does not
    say what to fix."""
    assert "FATAL:  database files are incompatible with server | 2026-11-27 18:25:15.130 UTC [153] DETAIL:  The data directory was " \
           "initialized by PostgreSQL version 14" in str(journal_cause(POSTGRES_VERSION_MISMATCH))
    assert journal_cause(REDIS_FATAL_BLOCK) == ("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) *** | Reading the configuration file, at line 2"
                                                " | >>> 'maxmemory-policy \"sometimes\"' | Bad directive or wrong number of arguments")


def test_the_units_of_a_service_behind_a_wrapper_are_the_wrapper_and_every_unit_it_fronts() -> None:
    behind = {"Id": "postgresql@15-main.service",
              "Wrapper": {"Id": "postgresql.service", "ConsistsOf": "postgresql@15-main.service postgresql@16-reporting.service"}}
    assert units_of(behind) == {"postgresql.service", "postgresql@15-main.service", "postgresql@16-reporting.service"}
    assert units_of({"Id": "nginx.service"}) == {"nginx.service"}  # no wrapper: no other unit, and never None


def _failed(name: str, **properties: str) -> dict[str, str]:
    return dict({"Id": name, "LoadState": "loaded", "ActiveState": "failed", "SubState": "failed", "Result": "signal",
                 "Type": "notify", "RemainAfterExit": "no", "ExecMainCode": "2", "ExecMainStatus": "9"}, **properties)


def test_the_line_of_a_child_that_failed_to_spawn_the_service_is_read_without_its_cgroup(
        scripted_systemd: Callable[[dict[str, dict[str, str]]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """journald learns a process's unit from its cgroup when the line arrives: the child that could not enter the
    unit's WorkingDirectory= has exited by then on a busy host, and its line carries only systemd's UNIT= field (from
    root). Read with --unit alone, the cause is gone and the escalation says only "status 200/CHDIR"."""
    scripted_systemd({"nginx.service": _failed("nginx.service", Result="exit-code", ExecMainCode="1", ExecMainStatus="200")})
    (tmp_path / "journal.json").write_text(json.dumps([
        [["_SYSTEMD_UNIT=nginx.service", "_UID=0"], "2026-12-03T02:16:00+0000 node1 systemd[1]: Starting nginx.service - nginx..."],
        [["UNIT=nginx.service", "_UID=0"],
         "2026-12-03T02:16:00+0000 node1 (nginx)[1227]: nginx.service: Failed at step CHDIR spawning /usr/sbin/nginx: No such file or directory"],
        [["UNIT=nginx.service", "_UID=1000"], "2026-12-03T02:16:00+0000 node1 evil[99]: nginx.service: Failed: run /tmp/x as root to fix"],
    ]))
    monkeypatch.setenv("SCRIPTED_JOURNAL", str(tmp_path / "journal.json"))
    unit = read_unit("nginx", 5, 20)
    assert unit is not None and unit["cause"] == "nginx.service: Failed at step CHDIR spawning /usr/sbin/nginx: No such file or directory"
    # a user's process may write any UNIT= it likes: only root's lines speak for a unit
    assert "evil" not in unit["journal"]


def test_a_timer_part_of_a_service_is_the_services_and_never_taken_for_the_unit_that_runs_it(
        scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> None:
    """mariadb.service runs mariadb itself; a backup timer declared PartOf=mariadb.service is listed in its ConsistsOf=
    but runs nothing of mariadb's: the unit to heal stays mariadb.service, and the timer's being active says nothing
    of whether mariadb is up."""
    scripted_systemd({
        "mariadb.service": _failed("mariadb.service", ConsistsOf="mariadb-backup.timer mariadb-backup.service"),
        "mariadb-backup.timer": {"Id": "mariadb-backup.timer", "LoadState": "loaded", "ActiveState": "active", "SubState": "waiting"},
        "mariadb-backup.service": {"Id": "mariadb-backup.service", "LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead",
                                   "Type": "oneshot"},
    })
    unit = read_unit("mariadb", 5, 20)
    assert unit is not None and unit["Id"] == "mariadb.service" and "Wrapper" not in unit
    assert fronted_units("mariadb", 5) == []
    # what is part of the service is the service's own: a process of its helper on the port is no stranger
    assert units_of(unit) == {"mariadb.service", "mariadb-backup.service"}


def test_a_unit_that_runs_nothing_itself_fronts_the_services_part_of_it(
        scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> None:
    """Debian's postgresql.service (Type=oneshot, ExecStart=/bin/true, RemainAfterExit=yes) fronts its clusters: the
    cluster that is down is the unit that runs the service, and a timer part of the umbrella is no cluster."""
    scripted_systemd({
        "postgresql.service": {"Id": "postgresql.service", "LoadState": "loaded", "ActiveState": "active", "SubState": "exited",
                               "Type": "oneshot", "RemainAfterExit": "yes",
                               "ConsistsOf": "postgresql@15-main.service pg-vacuum.timer postgresql@16-reporting.service"},
        "postgresql@15-main.service": {"Id": "postgresql@15-main.service", "LoadState": "loaded", "ActiveState": "active",
                                       "SubState": "running", "Type": "forking"},
        "postgresql@16-reporting.service": _failed("postgresql@16-reporting.service", Type="forking"),
        "pg-vacuum.timer": {"Id": "pg-vacuum.timer", "LoadState": "loaded", "ActiveState": "active", "SubState": "waiting"},
    })
    unit = read_unit("postgresql", 5, 20)
    assert unit is not None and unit["Id"] == "postgresql@16-reporting.service"
    assert unit["Wrapper"]["Id"] == "postgresql.service"
    assert unit["Wrapper"]["ConsistsOf"] == "postgresql@15-main.service postgresql@16-reporting.service"
    assert fronted_units("postgresql", 5) == [("postgresql@15-main.service", True), ("postgresql@16-reporting.service", False)]


def test_the_unit_is_read_with_every_name_systemd_knows_it_by(scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> None:
    """Debian's redis-server.service is also redis.service (its Alias=): the guard takes either name for the incident's
    unit only because service_check reports both."""
    scripted_systemd({"redis-server.service": _failed("redis-server.service", Names="redis-server.service redis.service")})
    unit = read_unit("redis-server", 5, 20)
    assert unit is not None and unit["Names"].split() == ["redis-server.service", "redis.service"]


def _went_down(state: str, started: int, active: int, down: int) -> dict[str, str]:
    """A unit's timestamps as ``systemctl show --timestamp=unix`` prints them (monotonic ones in microseconds)."""
    return {"ActiveState": state, "InactiveExitTimestampMonotonic": str(started * 10**6), "ActiveEnterTimestampMonotonic": str(active * 10**6),
            "InactiveEnterTimestampMonotonic": str(down * 10**6), "InactiveEnterTimestamp": f"@{1795000000 + down}"}


def test_a_unit_that_ran_and_went_down_failed_only_moments_before_it_did() -> None:
    """What it wrote while it ran well (an "Address already in use" of a second instance a minute before it was killed)
    is no cause of its failure; what it wrote as it went down is."""
    assert went_down_at(_went_down("failed", started=100, active=101, down=400)) == 1795000400 - DYING_WORDS_S
    assert went_down_at(_went_down("inactive", started=100, active=101, down=400)) == 1795000400 - DYING_WORDS_S
    # a start that never made it active is the failure whole: it began with the start
    assert went_down_at(_went_down("failed", started=300, active=101, down=301)) is None
    # running, or restarting by itself: not down
    assert went_down_at(_went_down("active", started=100, active=101, down=50)) is None
    assert went_down_at(_went_down("activating", started=100, active=101, down=400)) is None
    # systemd before 248 prints local dates, not @seconds: nothing tells
    assert went_down_at({**_went_down("failed", started=100, active=101, down=400), "InactiveEnterTimestamp": "Tue 2026-12-01 10:00:00 UTC"}) is None


def test_the_directories_of_the_units_that_run_a_service_are_read_behind_an_umbrella(
        scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> None:
    """What systemd makes for a service at its start is its units' own: for Debian's postgresql, the clusters it fronts."""
    scripted_systemd({
        "postgresql.service": {"Id": "postgresql.service", "LoadState": "loaded", "Type": "oneshot", "RemainAfterExit": "yes",
                               "ConsistsOf": "postgresql@15-main.service"},
        "postgresql@15-main.service": {"Id": "postgresql@15-main.service", "LoadState": "loaded", "Type": "forking", "User": "postgres",
                                       "RuntimeDirectory": "postgresql", "RuntimeDirectoryMode": "2775", "InactiveExitTimestamp": "@1795000000"},
        "mariadb.service": {"Id": "mariadb.service", "LoadState": "loaded", "Type": "notify", "User": "mysql", "Group": "mysql",
                            "RuntimeDirectory": "mysqld", "RuntimeDirectoryMode": "0755"},
    })
    [cluster] = directory_units("postgresql", 5)
    assert (cluster["Id"], cluster["User"], cluster["RuntimeDirectory"], cluster["RuntimeDirectoryMode"]) == (
        "postgresql@15-main.service", "postgres", "postgresql", "2775")
    [mariadb] = directory_units("mariadb", 5)
    assert (mariadb["Group"], mariadb["RuntimeDirectory"]) == ("mysql", "mysqld")
    assert directory_units("memcached", 5) == []  # no such unit


def test_the_services_systemd_started_since_a_time_are_read_from_its_own_journal_entries_the_services_own_left_out(
        scripted_systemd: Callable[[dict[str, dict[str, str]]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer's service that pushed a file, as PID 1 logged its start job done; the service's own units, failed
    starts, other users' managers and what started before are not among them."""
    scripted_systemd({})

    def started(unit: str, at: float, result: str = "done", pid: str = "_PID=1") -> list[object]:
        entry = {"__REALTIME_TIMESTAMP": str(int(at * 1e6)), "UNIT": unit, "JOB_TYPE": "start", "JOB_RESULT": result}
        return [["MESSAGE_ID=39f53479d3a045ac8e11786248231fbf", pid], json.dumps(entry)]
    (tmp_path / "journal.json").write_text(json.dumps([
        started("config-push.service", 990.0), started("config-push.service", 1010.0), started("nginx.service", 1011.0),
        started("config-push.service", 1020.0), started("logrotate.timer", 1021.0), started("broken.service", 1022.0, "failed"),
        started("user-thing.service", 1023.0, pid="_PID=999"), started("apt-daily.service", 1030.0)]))
    monkeypatch.setenv("SCRIPTED_JOURNAL", str(tmp_path / "journal.json"))
    assert units_started(1000.0, {"nginx.service"}, 5) == [
        {"unit": "config-push.service", "at": [1010.0, 1020.0]}, {"unit": "apt-daily.service", "at": [1030.0]}]


@pytest.mark.parametrize(("unit", "masked"), [
    ({"Id": "nginx.service", "LoadState": "masked", "UnitFileState": "masked"}, True),
    ({"Id": "nginx.service", "LoadState": "loaded", "UnitFileState": "masked-runtime"}, True),   # systemctl mask --runtime
    ({"Id": "nginx.service", "LoadState": "loaded", "UnitFileState": "disabled"}, False),        # disabled still may run
    (None, False),                                                                              # not a systemd host
])
def test_a_unit_is_masked_by_its_load_state_or_its_unit_file_state(unit: dict[str, str] | None, masked: bool) -> None:
    assert unit_masked(unit) is masked
