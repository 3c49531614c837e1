# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a service that passed its checks stayed as it was across its settle window (standard library only).

One passing check right after a repair is no repair that holds: a unit with ``Restart=`` whose process dies a moment
after each start looks active in most snapshots. What the service manager counts says it: on a systemd host the units
that run the service keep their ``NRestarts``, main PID and ``ActiveEnterTimestampMonotonic`` across the window; on a
sysv host the process its pid file names (or the processes of its name) stays the same.
"""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils import _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._processes import find_pids

# what of a unit changes when it is restarted, by systemd's Restart= or anyone
UNIT_STATE = ("Id", "NRestarts", "MainPID", "ActiveEnterTimestampMonotonic", "Restart")
MAX_SETTLE_S = 300.0
# after a repair: longer than systemd's default RestartSec= (100 ms) many times over, short enough to wait at each check
DEFAULT_SETTLE_S = 3.0


def snapshot(spec, manager, read_pidfile):
    """What the service manager says of the service's run now: per unit that runs it on systemd, else (sysv, or a
    service systemd has no unit of) its pid file's pid or the pids of its process name."""
    name = spec.get("service") or spec["name"]
    timeout = spec.get("timeout") or 5.0
    units = _systemd.running_units(name, UNIT_STATE, timeout) if manager == "systemd" else []
    if units:
        return dict(units=[dict((key, unit.get(key, "")) for key in UNIT_STATE) for unit in units])
    process_name = spec.get("process") or name
    if spec.get("pidfile"):
        return dict(pids=[read_pidfile(spec["pidfile"], process_name)["pid"]])
    return dict(pids=sorted(find_pids(process_name)))


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
    if before.get("pids") is not None and before.get("pids") != after.get("pids"):
        said.append("its process changed within its %g s settle window (pid %s -> %s)" % (
            window, _pids(before["pids"]), _pids(after.get("pids"))))
    return said, restarted


def window_of(spec, settle_seconds):
    """The seconds a service is watched for: its own ``settle_seconds`` when it declares one, else the check's."""
    own = spec.get("settle_seconds")
    return float(settle_seconds if own is None else own)


def _count(value):
    return int(value) if str(value).isdigit() else 0


def _pids(pids):
    return ", ".join(str(pid) for pid in pids or [] if pid is not None) or "none"
