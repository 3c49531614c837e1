"""The settle window: a service that passed its checks is watched, and one its service manager restarted meanwhile, or
that failed by the window's end, is failing - what systemd counts on a systemd host (scripted systemctl), real
processes and their pid file on a host without systemd."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._probe import ProbeConfigError, check_services
from ansible_collections.sentinel.heal.plugins.module_utils._settle import changes

WINDOW = 1.0


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = dict(name="memcached", service=None, status_check=True, ports=[], address="127.0.0.1", http=None, process=None,
                                check_command=None, running_indicator=None, pidfile=None, logs=[], timeout=2.0)
    spec.update(overrides)
    return spec


def _check(*specs: dict[str, Any], settle_seconds: float = WINDOW) -> dict[str, Any]:
    return check_services(dict(services=list(specs), log_lines=5, redact_values=[], evidence_commands=[], evidence_privilege="become",
                               evidence_timeout=30, settle_seconds=settle_seconds))


def _unit(**properties: str) -> dict[str, str]:
    return dict({"Id": "memcached.service", "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success",
                 "Type": "simple", "RemainAfterExit": "no", "Restart": "always", "NRestarts": "0", "MainPID": "100",
                 "ActiveEnterTimestampMonotonic": "5000000"}, **properties)


def _later(seconds: float, change: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, change)
    timer.start()
    return timer


@pytest.fixture
def systemd_host(empty_host: Path, scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> Callable[[dict[str, str]], None]:
    (empty_host / "run/systemd/system").mkdir(parents=True)
    return lambda unit: scripted_systemd({"memcached.service": unit})


def test_a_unit_systemd_restarted_within_the_window_is_a_restart_loop_whatever_its_state_at_the_end(
        systemd_host: Callable[[dict[str, str]], None]) -> None:
    systemd_host(_unit())
    timer = _later(WINDOW / 3, lambda: systemd_host(_unit(NRestarts="3", MainPID="140", ActiveEnterTimestampMonotonic="5900000")))
    result = _check(_spec())
    timer.join()
    [failure] = result["failures"]
    assert not result["healthy"] and failure["failure_class"] == "restart_loop"
    assert "unit memcached.service was restarted 3 times by systemd's Restart=always within its 1 s settle window (main PID 100 -> 140)" \
        in failure["summary"], failure["summary"]
    assert failure["settled"] == dict(window_s=WINDOW, held=False, changes=[
        "unit memcached.service was restarted 3 times by systemd's Restart=always within its 1 s settle window (main PID 100 -> 140)"])


def test_a_unit_that_stayed_as_it_was_is_healthy_and_one_whose_own_window_is_0_is_not_watched(
        systemd_host: Callable[[dict[str, str]], None]) -> None:
    systemd_host(_unit())
    result = _check(_spec())
    assert result["healthy"] and result["services"][0]["settled"] == dict(window_s=WINDOW, held=True, changes=[])
    systemd_host(_unit(NRestarts="1", MainPID="101"))
    unwatched = _check(_spec(settle_seconds=0.0))
    assert unwatched["healthy"] and "settled" not in unwatched["services"][0]


def test_a_plain_check_watches_a_unit_systemd_restarted_lately_and_finds_it_cycling(systemd_host: Callable[[dict[str, str]], None]) -> None:
    """A sweep (no settle window of its own) looks twice at a unit only when systemd restarted it under a minute ago: a
    Restart=always unit that keeps exiting looks active in most snapshots."""
    lately = str(int((time.monotonic() - 2) * 1e6))
    systemd_host(_unit(NRestarts="4", MainPID="180", ActiveEnterTimestampMonotonic=lately))
    timer = _later(WINDOW / 3, lambda: systemd_host(_unit(NRestarts="5", MainPID="190", ActiveEnterTimestampMonotonic=lately + "1")))
    result = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
    timer.join()
    [failure] = result["failures"]
    assert failure["failure_class"] == "restart_loop" and failure["settled"]["window_s"] == WINDOW
    assert "unit memcached.service was restarted 1 time by systemd's Restart=always within its 1 s settle window (main PID 180 -> 190)" \
        in failure["summary"], failure["summary"]
    # restarted long ago, or never: checked once, as any sweep
    for unit in (_unit(NRestarts="4", ActiveEnterTimestampMonotonic=str(int((time.monotonic() - 600) * 1e6))),
                 _unit(ActiveEnterTimestampMonotonic=lately)):
        systemd_host(unit)
        once = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
        assert once["healthy"] and "settled" not in once["services"][0], once


def test_a_unit_started_again_by_someone_within_the_window_is_failing(systemd_host: Callable[[dict[str, str]], None]) -> None:
    systemd_host(_unit())
    timer = _later(WINDOW / 3, lambda: systemd_host(_unit(MainPID="150", ActiveEnterTimestampMonotonic="6000000")))
    result = _check(_spec())
    timer.join()
    [failure] = result["failures"]
    assert "unit memcached.service started again within its 1 s settle window (main PID 100 -> 150)" in failure["summary"]
    assert failure["failure_class"] != "restart_loop"


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real process named in a pid file, and what starts another in its place."""
    pidfile = tmp_path / "web.pid"
    started: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        process = subprocess.Popen(["sleep", "60"])
        started.append(process)
        pidfile.write_text(f"{process.pid}\n")
        return process.pid

    yield {"pidfile": pidfile, "start": start, "started": started}
    for process in started:
        process.kill()
        process.wait()


def _alive_check(pidfile: Path) -> str:
    return f"sh -c 'kill -0 $(cat {pidfile})'"


def test_on_a_host_without_systemd_a_process_replaced_within_the_window_is_failing(empty_host: Path, sleeper: dict[str, Any]) -> None:
    first = sleeper["start"]()

    def replace() -> None:
        sleeper["start"]()
        sleeper["started"][0].kill()

    timer = _later(WINDOW / 3, replace)
    result = _check(_spec(name="web", status_check=False, check_command=_alive_check(sleeper["pidfile"]), pidfile=str(sleeper["pidfile"])))
    timer.join()
    [failure] = result["failures"]
    second = sleeper["started"][1].pid
    assert f"its pid file named another process within its 1 s settle window (pid {first} -> {second})" in failure["summary"], failure["summary"]


def test_a_process_that_died_within_the_window_failed_its_checks_after_passing_them(empty_host: Path, sleeper: dict[str, Any]) -> None:
    sleeper["start"]()

    def die() -> None:
        sleeper["started"][0].kill()
        sleeper["started"][0].wait()  # reaped: a zombie still answers kill -0

    timer = _later(WINDOW / 3, die)
    result = _check(_spec(name="web", status_check=False, check_command=_alive_check(sleeper["pidfile"]), pidfile=str(sleeper["pidfile"])))
    timer.join()
    [failure] = result["failures"]
    assert failure["summary"].startswith("it passed its checks, then failed them within its 1 s settle window: "), failure["summary"]
    assert failure["settled"]["held"] is False


def test_changes_of_a_unit_and_of_pids_are_said_in_sentences() -> None:
    before = dict(units=[_unit()])
    assert changes(before, dict(units=[_unit()]), 2.0) == ([], False)
    said, restarted = changes(before, dict(units=[_unit(NRestarts="1", MainPID="7")]), 2.0)
    assert restarted and said == [
        "unit memcached.service was restarted 1 time by systemd's Restart=always within its 2 s settle window (main PID 100 -> 7)"]
    assert changes(dict(pid=5), dict(pid=None), 2.0) == (["its pid file named another process within its 2 s settle window (pid 5 -> none)"], False)
    # without a unit or a pid file nothing is compared: the check at the window's end decides
    assert changes({}, {}, 2.0) == ([], False)


@pytest.mark.parametrize(("spec", "settle", "message"), [
    (_spec(), -1.0, "settle_seconds: -1.0 must be 0 to 300 seconds"),
    (_spec(), 301.0, "settle_seconds: 301.0 must be 0 to 300 seconds"),
    (_spec(settle_seconds=400.0), 1.0, "services[0].settle_seconds: 400.0 must be 0 to 300 seconds"),
])
def test_a_settle_window_out_of_range_names_the_field_and_value(empty_host: Path, spec: dict[str, Any], settle: float, message: str) -> None:
    with pytest.raises(ProbeConfigError, match=re.escape(message)):
        _check(spec, settle_seconds=settle)


def test_the_executor_refuses_a_check_request_with_a_settle_window_out_of_range() -> None:
    from ansible_collections.sentinel.heal.plugins.module_utils._executor import RequestRefused, _parse_request
    request = dict(kind="check", host="node1", policy_version="x", services=["memcached"], settle_seconds=900)
    with pytest.raises(RequestRefused, match="settle_seconds must be 0 to 300 seconds"):
        _parse_request(json.dumps(request).encode())
