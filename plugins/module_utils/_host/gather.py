# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evidence of one service as it is now (standard library only): its status, logs, port owners, pid file, sockets,
processes, paths, disks, packages, backends, unit and what changed since it was last seen good."""

from __future__ import annotations

import os
import time

from ansible_collections.sentinel.heal.plugins.module_utils._host import checks as _checks
from ansible_collections.sentinel.heal.plugins.module_utils._host import installation as _installation
from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.filesystem import (
    MAX_PATHS,
    declared_paths,
    disk_usage,
    mount_points,
    path_info,
    path_owners,
    service_directories,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.installation import backends, init_script, installed_by
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import changes_since_good, configuration_files
from ansible_collections.sentinel.heal.plugins.module_utils._host.logs import last_start, since_last_start, tail
from ansible_collections.sentinel.heal.plugins.module_utils._host.owned_dirs import owned_dirs, seen_while_healthy
from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import MAX_PIDS, find_pids, port_owners
from ansible_collections.sentinel.heal.plugins.module_utils._host.runtime_files import read_pidfile, read_socket


def evidence_of(spec, manager, log_lines=1, others=()):
    """The evidence of a declared service as it is now, failing or not (the executor's context at a step: what changed
    since its last known good configuration included, which a restore is bound to). ``others``: the host's other
    declared services, whose processes on the service's port are theirs."""
    init_service = spec.get("service") or spec["name"]
    return evidence(spec, init_service, spec.get("process") or init_service, None, manager, log_lines, spec.get("timeout") or 5.0,
                    others=others)


def evidence(spec, init_service, process_name, status, manager, log_lines, timeout, redact_values=(), others=()):
    if status is None:
        status = _checks.status(init_service, manager, timeout)
    unit = _systemd.read_unit(init_service, timeout, log_lines) if manager == "systemd" else None
    owners = [owner for port in spec.get("ports") or [] for owner in port_owners(port)]
    pidfile = read_pidfile(spec["pidfile"], process_name) if spec.get("pidfile") else None
    if unit is not None:
        # a process of the service's own units (its cgroup, the units its unit fronts) is never a stranger on its port
        own_units = _systemd.units_of(unit)
        service_pids = _processes.unit_pids(own_units)
        for owner in owners:
            owner["own"] = owner["unit"] in own_units or (owner["pid"] == 1 and _systemd.socket_activated(unit))
    else:
        service_pids = _processes.process_tree(pidfile["pid"]) if pidfile and pidfile["alive"] else []
    program = _installation.program(process_name)
    for owner in owners:
        owner["service"] = None if owner.get("own") else _declared_service_of(owner, process_name, others)
        owner["service_program"] = _processes.runs_program(owner["pid"], program)
    packages = installed_by([(unit or {}).get("FragmentPath"), init_script(init_service), program])
    started = last_start(unit, spec)
    down = _systemd.went_down_at(unit) if unit is not None else None
    since = started if down is None or (started is not None and down < started) else down
    offset = time.localtime().tm_gmtoff
    return dict(
        status=dict(command=" ".join(status["command"]), rc=status["rc"], output=status["output"]),
        logs=dict((path, since_last_start(tail(path, log_lines), since, offset)) for path in spec.get("logs") or []),
        # when the service last started, when its failure began (a unit that ran and went down: moments before it did;
        # else its last start), and the host's offset from UTC: a log read later is judged by them too
        started_at=started,
        failing_since=since,
        utc_offset=offset,
        port_owners=owners,
        pidfile=pidfile,
        # what runs by the service's process name anywhere on the host, for a person and the diagnosis: a second
        # redis-server started by hand is one of them, and never the service's own (service_pids)
        processes=find_pids(process_name)[:MAX_PIDS],
        # the service's own processes: its units' cgroups on a systemd host, else its pid file's process and what
        # descends from it
        service_pids=service_pids,
        paths=[path_info(path) for path in (spec.get("paths") or [])[:MAX_PATHS]],
        sockets=[read_socket(path, process_name) for path in (spec.get("sockets") or [])[:MAX_PATHS]],
        disk=[usage for usage in (disk_usage(path) for path in service_directories(spec)) if usage],
        path_owners=path_owners(declared_paths(spec)),
        mounts=mount_points(),
        # what each of its directories should be, as the host says it: its unit, dpkg-statoverride, or what it was while
        # the service was healthy (the policy's package_paths speak where the host says nothing)
        owned_dirs=owned_dirs(spec, [unit] if unit else [], seen_while_healthy(spec["name"]) if spec.get("known_good", True) else []),
        packages=packages,
        # the ports on this host's loopback its configuration names: a declared service listening there is its backend,
        # which it needs as a unit's Requires= (loop/dependencies.py)
        backends=backends(spec, configuration_files(spec, (packages or {}).get("names") or [])),
        unit=unit,
        installed=dict(unit=unit is not None, init_script=os.path.exists(init_script(init_service)),
                       program=program),
        # what changed since its last known good configuration (None when it was never seen good, or keeps none)
        changes=_changes(spec, unit, timeout, redact_values),
        collected_at=time.time(),
    )


def _changes(spec, unit, timeout, redact_values):
    """What changed since the service was last seen good, and on a systemd host which services systemd started since."""
    changes = changes_since_good(spec["name"], spec, time.time(), redact_values) if spec.get("known_good", True) else None
    if changes is not None and unit is not None:
        changes["units"] = _systemd.units_started(changes["good_at"], _systemd.units_of(unit), timeout)
    return changes


def _declared_service_of(owner, process_name, others):
    """The other declared service a port owner is a process of: the one whose pid file names its pid, or whose process
    name it carries (unless it is the incident's own process name too, which then says nothing of whose it is); None."""
    for other in others:
        named = (other.get("process") or other.get("service") or other["name"])[:15]
        if other.get("pidfile") and read_pidfile(other["pidfile"], named)["pid"] == owner["pid"]:
            return other["name"]
        if owner["process"] == named != process_name[:15]:
            return other["name"]
    return None
