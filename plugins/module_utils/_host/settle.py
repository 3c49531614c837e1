# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a service that passed its checks stayed as it was across its settle window (standard library only).

One passing check right after a repair is no repair that holds: a unit with ``Restart=`` whose process dies a moment
after each start looks active in most snapshots. What the service manager counts says it: on a systemd host the units
that run the service keep their ``NRestarts``, main PID and ``ActiveEnterTimestampMonotonic`` across the window; on a
sysv host the process its pid file names stays the same. The processes of its name are never its run: another service's,
or its own workers coming and going, would fail a service that held; without a unit or a pid file the check again at
the window's end decides alone.
"""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import RESTARTS, keep_record, kept_record
from ansible_collections.sentinel.heal.plugins.module_utils._text import clock_time

# what of a unit changes when it is restarted, by systemd's Restart= or anyone
UNIT_STATE = ("Id", "NRestarts", "MainPID", "ActiveEnterTimestampMonotonic", "Restart")
MAX_SETTLE_S = 300.0
# after a repair: longer than systemd's default RestartSec= (100 ms) many times over, short enough to wait at each check
DEFAULT_SETTLE_S = 3.0
# a plain check (a sweep) watches a unit across the default window only when systemd restarted it this recently: a unit
# in a restart loop looks active in most snapshots, and is never older than this
RECENT_RESTART_S = 60.0
# a unit systemd's Restart= restarted this often within RECENT_RESTART_S is in a restart loop, whatever a snapshot says:
# a run that lasts longer than the window looks healthy across it
LOOP_RESTARTS = 3
# the restarts counted since a check found a unit healthy this recently are its recent past: a loop whose runs outlast
# every look (a RuntimeMaxSec= of minutes) shows there; from an older check, a crash now and then over days is no loop
SEEN_WITHIN_S = 3600.0
MAX_TIMES_SAID = 5


def snapshot(spec, manager, read_pidfile):
    """What the service manager says of the service's run now: per unit that runs it on systemd, else (sysv, or a
    service systemd has no unit of) its pid file's pid; {} when neither says."""
    name = spec.get("service") or spec["name"]
    timeout = spec.get("timeout") or 5.0
    units = _systemd.running_units(name, UNIT_STATE, timeout) if manager == "systemd" else []
    if units:
        return dict(units=[dict((key, unit.get(key, "")) for key in UNIT_STATE) for unit in units])
    if spec.get("pidfile"):
        return dict(pid=read_pidfile(spec["pidfile"], spec.get("process") or name)["pid"])
    return {}


def changes(before, after, window):
    """What changed between two snapshots, in sentences ([] for a run that stayed as it was), and whether systemd's
    own Restart= restarted it."""
    said, restarted = [], False
    after_units = dict((unit["Id"], unit) for unit in after.get("units") or [])
    for unit in before.get("units") or []:
        now = after_units.get(unit["Id"])
        if now is None:
            continue
        grew = _count(now["NRestarts"]) - _count(unit["NRestarts"])
        if grew > 0:
            restarted = True
            said.append("unit %s was restarted %d time%s by systemd's Restart=%s within its %g s settle window (main PID %s -> %s)" % (
                unit["Id"], grew, "" if grew == 1 else "s", now.get("Restart"), window, unit["MainPID"], now["MainPID"]))
        elif unit["MainPID"] != now["MainPID"] or unit["ActiveEnterTimestampMonotonic"] != now["ActiveEnterTimestampMonotonic"]:
            said.append("unit %s started again within its %g s settle window (main PID %s -> %s)" % (
                unit["Id"], window, unit["MainPID"], now["MainPID"]))
    if "pid" in before and before["pid"] != after.get("pid"):
        said.append("its pid file named another process within its %g s settle window (pid %s -> %s)" % (
            window, before["pid"], "none" if after.get("pid") is None else after["pid"]))
    return said, restarted


def restarted_lately(before, now_monotonic):
    """Whether systemd's Restart= restarted a unit of the snapshot and its present run started under
    ``RECENT_RESTART_S`` ago (``now_monotonic``: time.monotonic(), the clock of ActiveEnterTimestampMonotonic)."""
    for unit in before.get("units") or []:
        entered = _count(unit["ActiveEnterTimestampMonotonic"]) / 1e6
        if _count(unit["NRestarts"]) > 0 and entered and now_monotonic - entered < RECENT_RESTART_S:
            return True
    return False


def restart_loop(before, now, timeout, seen=None):
    """A unit of the snapshot that systemd's Restart= restarted LOOP_RESTARTS times or more in the RECENT_RESTART_S
    before ``now`` (seconds since the epoch), or since a check found it healthy (``seen``: restarts_seen's, at most
    SEEN_WITHIN_S ago): (the sentence that says so, the unit's journal meanwhile), else None."""
    for unit in before.get("units") or []:
        # the restarts systemd counts since the unit was last reset or started by hand (NRestarts): a loop a person
        # ended with reset-failed and a start is over, whatever the journal still holds of it
        since, counted, said_since = now - RECENT_RESTART_S, _count(unit["NRestarts"]), "in the last %d s" % RECENT_RESTART_S
        last = _since_seen(unit, seen or {}, now)
        if last is not None and last[1] >= LOOP_RESTARTS and last[0] < since:
            since, counted = last
            said_since = "since a check found it healthy at %s" % clock_time(since)
        restarts, _failures, journal = _systemd.run_ends(unit["Id"], since, timeout)
        restarts = restarts[-counted:] if counted else []
        if len(restarts) >= LOOP_RESTARTS and not _holds_since(restarts, now):
            said = ", ".join(clock_time(at) for at in restarts[-MAX_TIMES_SAID:])
            return ("unit %s was restarted %d times by systemd's Restart=%s %s (the latest at %s): a restart loop, "
                    "whichever state one look finds it in" % (unit["Id"], len(restarts), unit.get("Restart"), said_since, said)), journal
    return None


def _holds_since(restarts, now):
    """Whether the run after the last of ``restarts`` (oldest first) has lasted more than twice the longest run between
    them: the cause was fixed meanwhile (a file put right that its next start read), and the loop is over."""
    longest = max(later - earlier for earlier, later in zip(restarts, restarts[1:]))
    return now - restarts[-1] > 2 * max(longest, RECENT_RESTART_S)


def restarted_since_seen(before, seen, now):
    """Whether systemd's Restart= restarted a unit of the snapshot LOOP_RESTARTS times or more since a check found it
    healthy (``seen``: restarts_seen's) at most SEEN_WITHIN_S before ``now`` (seconds since the epoch)."""
    return any((_since_seen(unit, seen, now) or (0, 0))[1] >= LOOP_RESTARTS for unit in before.get("units") or [])


def record_restarts(name, before, now):
    """Called when every check of the service passed: how many times systemd had restarted each unit of the snapshot
    ``before`` at ``now``, kept beside the service's last known good configuration for the next check to count from."""
    units = dict((unit["Id"], dict(restarts=_count(unit["NRestarts"]), at=now)) for unit in before.get("units") or [])
    if units:
        keep_record(name, RESTARTS, dict(units=units))


def restarts_seen(name):
    """What record_restarts kept for the service: {unit: {restarts, at}}, {} when nothing (or nothing whole) was."""
    units = (kept_record(name, RESTARTS) or {}).get("units")
    return dict((unit, seen) for unit, seen in units.items() if isinstance(seen, dict) and isinstance(seen.get("restarts"), int)
                and isinstance(seen.get("at"), (int, float))) if isinstance(units, dict) else {}


def _since_seen(unit, seen, now):
    """(when a check found the unit healthy, how many restarts systemd counted since), or None without such a check
    in the SEEN_WITHIN_S before ``now``."""
    last = seen.get(unit["Id"])
    if last is None or not 0 <= now - last["at"] <= SEEN_WITHIN_S:
        return None
    counted = _count(unit["NRestarts"])
    # fewer than then: reset since (a person's start or reset-failed, a boot), and each it counts came after it
    return last["at"], counted - last["restarts"] if counted >= last["restarts"] else counted


def failed_in_window(before, since, window, timeout):
    """What systemd's journal says failed of a unit of the snapshot since ``since`` (the window's start, seconds since
    the epoch): a run that failed or a restart its Restart= scheduled, in sentences ([] when nothing did)."""
    said = []
    for unit in before.get("units") or []:
        restarts, failures, _journal = _systemd.run_ends(unit["Id"], since, timeout)
        if restarts or failures:
            said.append("the journal of unit %s says a run failed within its %g s settle window (at %s)" % (
                unit["Id"], window, clock_time(min(restarts + failures))))
    return said


def window_of(spec, settle_seconds):
    """The seconds a service is watched for: its own ``settle_seconds`` when it declares one, else the check's."""
    own = spec.get("settle_seconds")
    return float(settle_seconds if own is None else own)


def _count(value):
    return int(value) if str(value).isdigit() else 0
