"""The settle window: a service that passed its checks is watched, and one its service manager restarted meanwhile, or
that failed by the window's end, is failing - what systemd counts on a systemd host (scripted systemctl), real
processes and their pid file on a host without systemd."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from local_llm import free_port

from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import ProbeConfigError, check_services
from ansible_collections.sentinel.heal.plugins.module_utils._host.settle import changes

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


# what arranges a change on the host within the settle window
Arrange = Callable[[Callable[[], None]], None]


class _WaitOfTheWindow:
    """The time module as the check's code sees it, whose sleep (the window's one wait) first makes ``change``."""

    def __init__(self, change: Callable[[], None]) -> None:
        self._pending = [change]

    def sleep(self, seconds: float) -> None:
        while self._pending:
            self._pending.pop()()
        time.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def within_window(monkeypatch: pytest.MonkeyPatch) -> Arrange:
    """What makes a change on the host once the window's first look was taken, however loaded the machine: as the
    window's wait begins, not at a time a slow run could reach before that look."""
    return lambda change: monkeypatch.setattr(_probe, "time", _WaitOfTheWindow(change))


@pytest.fixture
def systemd_host(empty_host: Path, scripted_systemd: Callable[[dict[str, dict[str, str]]], None]) -> Callable[[dict[str, str]], None]:
    (empty_host / "run/systemd/system").mkdir(parents=True)
    return lambda unit: scripted_systemd({"memcached.service": unit})


def test_a_unit_systemd_restarted_within_the_window_is_a_restart_loop_whatever_its_state_at_the_end(
        systemd_host: Callable[[dict[str, str]], None], within_window: Arrange) -> None:
    systemd_host(_unit())
    within_window(lambda: systemd_host(_unit(NRestarts="3", MainPID="140", ActiveEnterTimestampMonotonic="5900000")))
    result = _check(_spec())
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


def test_a_plain_check_watches_a_unit_systemd_restarted_lately_and_finds_it_cycling(
        systemd_host: Callable[[dict[str, str]], None], within_window: Arrange) -> None:
    """A sweep (no settle window of its own) looks twice at a unit only when systemd restarted it under a minute ago: a
    Restart=always unit that keeps exiting looks active in most snapshots."""
    lately = str(int((time.monotonic() - 2) * 1e6))
    systemd_host(_unit(NRestarts="4", MainPID="180", ActiveEnterTimestampMonotonic=lately))
    within_window(lambda: systemd_host(_unit(NRestarts="5", MainPID="190", ActiveEnterTimestampMonotonic=lately + "1")))
    result = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
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


def _journal_line(at: float, ident: str, message: str) -> str:
    return f"{datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}+0000 host1 {ident}: {message}"


def _journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[tuple[float, str, str]]) -> None:
    """journald's lines of memcached.service, as systemd (root, UNIT=) and the service (its cgroup) wrote them."""
    held = [[["UNIT=memcached.service", "_UID=0"] if ident == "systemd[1]" else ["_SYSTEMD_UNIT=memcached.service"],
             _journal_line(at, ident, message)] for at, ident, message in lines]
    (tmp_path / "journal.json").write_text(json.dumps(held))
    monkeypatch.setenv("SCRIPTED_JOURNAL", str(tmp_path / "journal.json"))


def _cycle(at: float) -> list[tuple[float, str, str]]:
    """One run of a Restart=always unit whose RuntimeMaxSec= ends it (a value meant as 3h written as 3)."""
    return [(at, "systemd[1]", "memcached.service: Service reached runtime time limit. Stopping."),
            (at + 0.01, "systemd[1]", "memcached.service: Failed with result 'timeout'."),
            (at + 1.0, "systemd[1]", "memcached.service: Scheduled restart job, restart counter is at 7."),
            (at + 1.01, "systemd[1]", "Started memcached.service - memcached daemon.")]


def test_a_plain_check_finds_a_unit_restarted_again_and_again_lately_in_a_loop_at_once_with_the_journals_words(
        systemd_host: Callable[[dict[str, str]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its runs outlast the window (3 s each, a window of 1 s): the window alone would find it healthy most times. The
    journal of the last minute says what every snapshot misses, and why each run ended."""
    now = time.time()
    lately = str(int((time.monotonic() - 1) * 1e6))
    systemd_host(_unit(NRestarts="7", MainPID="180", ActiveEnterTimestampMonotonic=lately))
    _journal(tmp_path, monkeypatch, [*_cycle(now - 300), *_cycle(now - 13), *_cycle(now - 9), *_cycle(now - 5)])
    result = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
    [failure] = result["failures"]
    # found by the journal, no window waited out
    assert failure["failure_class"] == "restart_loop" and failure["settled"]["window_s"] == 0.0 and failure["settled"]["held"] is False
    assert re.search(r"unit memcached\.service was restarted 3 times by systemd's Restart=always in the last 60 s \(the latest at "
                     r"\S+, \S+, \S+\): a restart loop, whichever state one look finds it in", failure["summary"]), failure["summary"]
    assert failure["evidence"]["unit"]["cause"] == "memcached.service: Service reached runtime time limit. Stopping."
    # restarted twice in the last minute (killed twice, say): watched across the window, as before
    _journal(tmp_path, monkeypatch, [*_cycle(now - 9), *_cycle(now - 5)])
    once = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
    assert once["healthy"] and once["services"][0]["settled"] == dict(window_s=WINDOW, held=True, changes=[])
    # a loop a person ended (reset-failed, a start: systemd counts 1 restart since): its journal lines are history
    _journal(tmp_path, monkeypatch, [*_cycle(now - 13), *_cycle(now - 9), *_cycle(now - 5)])
    systemd_host(_unit(NRestarts="1", MainPID="180", ActiveEnterTimestampMonotonic=lately))
    ended = _check(_spec(settle_seconds=WINDOW), settle_seconds=0.0)
    assert ended["healthy"] and ended["services"][0]["settled"]["window_s"] == WINDOW


def test_a_unit_down_between_two_restarts_of_a_loop_is_in_the_loop_with_nothing_to_wait_for(
        systemd_host: Callable[[dict[str, str]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Caught in the second between two runs, a unit systemd restarts by itself is waited for - unless its journal says
    it was restarted again and again lately: then it is the loop it is."""
    now, closed = time.time(), free_port()
    systemd_host(_unit(ActiveState="activating", SubState="auto-restart", NRestarts="7", MainPID="0"))
    _journal(tmp_path, monkeypatch, [*_cycle(now - 13), *_cycle(now - 9), *_cycle(now - 5)])
    [failure] = _check(_spec(ports=[closed]), settle_seconds=0.0)["failures"]
    assert failure["failure_class"] == "restart_loop", failure["summary"]
    assert "unit memcached.service was restarted 3 times by systemd's Restart=always in the last 60 s" in failure["summary"]
    assert failure["evidence"]["unit"]["cause"] == "memcached.service: Service reached runtime time limit. Stopping."
    _journal(tmp_path, monkeypatch, [*_cycle(now - 9), *_cycle(now - 5)])
    [once] = _check(_spec(ports=[closed]), settle_seconds=0.0)["failures"]
    assert once["failure_class"] == "auto_restart", once["summary"]


def _restarts_kept(empty_host: Path) -> dict[str, Any]:
    return json.loads((empty_host / "var/lib/sentinel-heal/known-good/memcached/restarts.json").read_text())["units"]["memcached.service"]


def _found_healthy(empty_host: Path, restarts: int, ago: float) -> None:
    """What a check that found memcached healthy ``ago`` seconds back kept: systemd had restarted it ``restarts`` times."""
    (empty_host / "var/lib/sentinel-heal/known-good/memcached/restarts.json").write_text(json.dumps(
        dict(units={"memcached.service": dict(restarts=restarts, at=time.time() - ago)})))


def test_a_unit_restarted_again_and_again_since_a_check_found_it_healthy_is_in_a_loop_though_each_look_finds_it_up(
        systemd_host: Callable[[dict[str, str]], None], empty_host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of minutes (a RuntimeMaxSec= of 300 meant as 300 min): every sweep finds it active, started minutes ago, and
    no minute holds three restarts. What systemd counted since the check before says it; the journal says when and why."""
    now, minutes_ago = time.time(), str(int((time.monotonic() - 240) * 1e6))
    systemd_host(_unit(NRestarts="2", MainPID="180", ActiveEnterTimestampMonotonic=minutes_ago))
    first = check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0), keep_known_good=True)
    assert first["healthy"] and _restarts_kept(empty_host)["restarts"] == 2 and now - 1 <= _restarts_kept(empty_host)["at"] <= time.time()
    _found_healthy(empty_host, 2, ago=1500)
    systemd_host(_unit(NRestarts="6", MainPID="300", ActiveEnterTimestampMonotonic=minutes_ago))
    _journal(tmp_path, monkeypatch, [*_cycle(now - 1800), *_cycle(now - 1200), *_cycle(now - 900), *_cycle(now - 600), *_cycle(now - 300)])
    result = check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0), keep_known_good=True)
    [failure] = result["failures"]
    assert failure["failure_class"] == "restart_loop" and failure["settled"] == dict(window_s=0.0, held=False, changes=failure["settled"]["changes"])
    assert re.search(r"unit memcached\.service was restarted 4 times by systemd's Restart=always since a check found it healthy at "
                     r"\S+ \(the latest at \S+, \S+, \S+, \S+\): a restart loop", failure["summary"]), failure["summary"]
    assert failure["evidence"]["unit"]["cause"] == "memcached.service: Service reached runtime time limit. Stopping."
    # a failing check keeps nothing: the next one counts from the check that found it healthy
    assert _restarts_kept(empty_host)["restarts"] == 2
    # caught down between two of its runs, it is the same loop
    systemd_host(_unit(ActiveState="activating", SubState="auto-restart", NRestarts="6", MainPID="0"))
    [down] = check_services(dict(services=[_spec(ports=[free_port()])], log_lines=5, settle_seconds=0.0))["failures"]
    assert down["failure_class"] == "restart_loop" and "since a check found it healthy at" in down["summary"], down["summary"]
    # counted fewer than that check saw: reset since (a start by hand, a boot), and each restart it counts came after
    _found_healthy(empty_host, 9, ago=1500)
    systemd_host(_unit(NRestarts="3", MainPID="300", ActiveEnterTimestampMonotonic=minutes_ago))
    [reset] = check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0))["failures"]
    assert "restarted 3 times by systemd's Restart=always since a check found it healthy at" in reset["summary"], reset["summary"]
    # up far longer than any run of the loop was (a file put right that its next start read): the loop is over
    _found_healthy(empty_host, 2, ago=3000)
    systemd_host(_unit(NRestarts="6", MainPID="300", ActiveEnterTimestampMonotonic=str(int((time.monotonic() - 2600) * 1e6))))
    _journal(tmp_path, monkeypatch, [*_cycle(now - 2900), *_cycle(now - 2800), *_cycle(now - 2700), *_cycle(now - 2601)])
    assert check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0))["healthy"]


@pytest.mark.parametrize("restarts, now_counted, ago", [
    pytest.param(4, "6", 1500, id="restarted-twice-since"),
    pytest.param(2, "6", 4000, id="the-check-before-over-an-hour-ago"),
    pytest.param(6, "2", 1500, id="reset-since-by-a-person-and-restarted-twice"),
])
def test_fewer_restarts_since_a_check_found_it_healthy_or_since_a_check_long_ago_are_no_loop(
        systemd_host: Callable[[dict[str, str]], None], empty_host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        restarts: int, now_counted: str, ago: float) -> None:
    now = time.time()
    systemd_host(_unit(NRestarts="0"))
    check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0), keep_known_good=True)
    _found_healthy(empty_host, restarts, ago)
    systemd_host(_unit(NRestarts=now_counted, MainPID="300", ActiveEnterTimestampMonotonic=str(int((time.monotonic() - 240) * 1e6))))
    _journal(tmp_path, monkeypatch, [*_cycle(now - 3000), *_cycle(now - 1200), *_cycle(now - 900), *_cycle(now - 600), *_cycle(now - 300)])
    assert check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0))["healthy"]
    # a check in check mode keeps nothing; one outside it counts from now on
    assert _restarts_kept(empty_host)["restarts"] == restarts
    check_services(dict(services=[_spec()], log_lines=5, settle_seconds=0.0), keep_known_good=True)
    assert _restarts_kept(empty_host)["restarts"] == int(now_counted)


def test_a_run_that_failed_within_the_window_is_failing_though_systemd_counts_no_restart(
        systemd_host: Callable[[dict[str, str]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, within_window: Arrange) -> None:
    """What the journal says failed within the window fails the service; what it said before the window does not."""
    systemd_host(_unit())
    _journal(tmp_path, monkeypatch, _cycle(time.time() - 30))
    assert _check(_spec())["healthy"]
    within_window(lambda: _journal(tmp_path, monkeypatch, _cycle(time.time())))
    result = _check(_spec())
    [failure] = result["failures"]
    assert re.search(r"the journal of unit memcached\.service says a run failed within its 1 s settle window \(at \S+\)", failure["summary"])


def test_a_unit_started_again_by_someone_within_the_window_is_failing(
        systemd_host: Callable[[dict[str, str]], None], within_window: Arrange) -> None:
    systemd_host(_unit())
    within_window(lambda: systemd_host(_unit(MainPID="150", ActiveEnterTimestampMonotonic="6000000")))
    result = _check(_spec())
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


def test_on_a_host_without_systemd_a_process_replaced_within_the_window_is_failing(
        empty_host: Path, sleeper: dict[str, Any], within_window: Arrange) -> None:
    first = sleeper["start"]()

    def replace() -> None:
        sleeper["start"]()
        sleeper["started"][0].kill()

    within_window(replace)
    result = _check(_spec(name="web", status_check=False, check_command=_alive_check(sleeper["pidfile"]), pidfile=str(sleeper["pidfile"])))
    [failure] = result["failures"]
    second = sleeper["started"][1].pid
    assert f"its pid file named another process within its 1 s settle window (pid {first} -> {second})" in failure["summary"], failure["summary"]


def test_a_process_that_died_within_the_window_failed_its_checks_after_passing_them(
        empty_host: Path, sleeper: dict[str, Any], within_window: Arrange) -> None:
    sleeper["start"]()

    def die() -> None:
        sleeper["started"][0].kill()
        sleeper["started"][0].wait()  # reaped: a zombie still answers kill -0

    within_window(die)
    result = _check(_spec(name="web", status_check=False, check_command=_alive_check(sleeper["pidfile"]), pidfile=str(sleeper["pidfile"])))
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
    from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import RequestRefused, parse_request
    request = dict(kind="check", host="node1", policy_version="x", services=["memcached"], settle_seconds=900)
    with pytest.raises(RequestRefused, match="settle_seconds must be 0 to 300 seconds"):
        parse_request(json.dumps(request).encode())
