# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Service checks and evidence gathering on the target host (standard library only): the entry of the service_check
module and the executor.

``check_services(params)`` runs every declared check of every service and, for the services
that fail, gathers bounded evidence (status output, the tail of their logs, who holds their
ports, what their pid file says, the owner of their declared paths, the owner and mode each of their
directories should have (_owned_dirs.py) and how full the filesystems of their paths and logs are),
redacted before it leaves the host.

Here: the check of each service, its settle window and what is kept of a healthy one. Beside it, each in a room of its
own: the declaration (declaration.py), the checks (checks.py), the evidence (gather.py, from installation.py, logs.py,
filesystem.py and runtime_files.py) and the failure class (failure_classes.py). Their names stay importable from here;
the host's settings (``ETC``, ``SYSTEMD_RUNTIME``, ``DPKG_INFO``) are read where they are defined, in installation.py.
"""

from __future__ import annotations

import time

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact, redact_tree
from ansible_collections.sentinel.heal.plugins.module_utils._host import checks as _checks
from ansible_collections.sentinel.heal.plugins.module_utils._host import gather as _gather
from ansible_collections.sentinel.heal.plugins.module_utils._host import settle as _settle
from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.declaration import (
    ARGUMENT_SPEC,
    MAX_LOG_LINES,
    SERVICE_OPTIONS,
    ProbeConfigError,
    evidence_commands,
    validate,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.evidence import read_evidence
from ansible_collections.sentinel.heal.plugins.module_utils._host.failure_classes import FAILURE_CLASSES, NOT_READ_FOR, classify
from ansible_collections.sentinel.heal.plugins.module_utils._host.filesystem import (
    FULL_PERCENT,
    KERNEL_MOUNTS,
    MAX_MOUNTS,
    MAX_OWNED_DIRECTORIES,
    MAX_PATHS,
    disk_usage,
    mount_points,
    path_info,
    path_notes,
    path_owners,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.gather import evidence_of
from ansible_collections.sentinel.heal.plugins.module_utils._host.installation import (
    DPKG_INFO,
    ETC,
    MAX_BACKEND_FILE_BYTES,
    MAX_BACKENDS,
    MAX_PACKAGE_FILES,
    PROGRAM_DIRS,
    SYSTEMD_RUNTIME,
    backends,
    detect_service_manager,
    installed_by,
    os_release,
    packages_of,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import KnownGoodError, keep
from ansible_collections.sentinel.heal.plugins.module_utils._host.logs import LOG_LIMIT, LOG_READ_BYTES, since_last_start, started, tail
from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import read_marker
from ansible_collections.sentinel.heal.plugins.module_utils._host.owned_dirs import record_seen, service_directories
from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import find_pids
from ansible_collections.sentinel.heal.plugins.module_utils._host.runtime_files import read_pidfile, read_socket, socket_notes

# its own names and, importable here as before its rooms were split out of it, theirs
__all__ = [
    "ARGUMENT_SPEC",
    "DPKG_INFO",
    "ETC",
    "FAILURE_CLASSES",
    "FULL_PERCENT",
    "KERNEL_MOUNTS",
    "LOG_LIMIT",
    "LOG_READ_BYTES",
    "MAX_BACKENDS",
    "MAX_BACKEND_FILE_BYTES",
    "MAX_LOG_LINES",
    "MAX_MOUNTS",
    "MAX_OWNED_DIRECTORIES",
    "MAX_PACKAGE_FILES",
    "MAX_PATHS",
    "NOT_READ_FOR",
    "PROGRAM_DIRS",
    "SERVICE_OPTIONS",
    "SYSTEMD_RUNTIME",
    "ProbeConfigError",
    "backends",
    "check_one",
    "check_services",
    "detect_service_manager",
    "disk_usage",
    "evidence_of",
    "installed_by",
    "mount_points",
    "path_info",
    "path_owners",
    "read_pidfile",
    "read_socket",
    "since_last_start",
    "tail",
]


def check_services(params, keep_known_good=False):
    """Check every declared service; returns the module result (without 'changed'). With ``keep_known_good`` (outside
    check mode), a healthy service's configuration becomes its last known good (_known_good.py); a failing one's
    evidence says what changed since (``changes``) either way."""
    services = params["services"]
    validate(services, params["log_lines"])
    if not 0 <= (params.get("settle_seconds") or 0.0) <= _settle.MAX_SETTLE_S:
        raise ProbeConfigError("settle_seconds: %r must be 0 to %g seconds (0: each service checked once)"
                               % (params["settle_seconds"], _settle.MAX_SETTLE_S))
    reads = evidence_commands(params.get("evidence_commands") or [], services, params.get("evidence_timeout", 120))
    manager = detect_service_manager()
    marker = read_marker()
    # a person's maintenance marker, whatever it covers, holds the reads back too: the controller decides what it covers
    if marker is not None:
        reads = {}

    # how many times systemd had restarted each unit when a check last found the service healthy: a loop whose runs
    # outlast every look shows in what it counted since
    seen = dict((spec["name"], _settle.restarts_seen(spec["name"])) for spec in services) if manager == "systemd" else {}

    def checked(spec, unsettled=None):
        return _check_one(spec, manager, params["log_lines"], params.get("redact_values") or (), reads.get(spec["name"], []),
                          (params.get("evidence_privilege") or "become", params.get("evidence_timeout", 120)),
                          others=[other for other in services if other is not spec], unsettled=unsettled,
                          restarts_seen=seen.get(spec["name"]))

    snapshots = {}
    results = _settled(services, [checked(spec) for spec in services], manager, params.get("settle_seconds") or 0.0, checked, seen, snapshots)
    if keep_known_good:
        for index, (spec, result) in enumerate(zip(services, results)):
            if result["healthy"] and spec.get("known_good", True):
                result["known_good"] = _keep_known_good(spec, manager, snapshots.get(index))
    failures = [r for r in results if not r["healthy"]]
    return dict(
        services=results,
        failures=failures,
        healthy=not failures,
        facts=dict(service_manager=manager, os=os_release(), maintenance=marker),
    )


def _settled(services, results, manager, settle_seconds, checked, seen, snapshots):
    """The results, each healthy service watched across its settle window (_settle.py) and checked again at its end:
    one that failed its checks or restarted meanwhile is failing, what changed in its summary. The windows run at once,
    the shortest first: the check takes as long as the longest. A plain check (``settle_seconds`` 0: a sweep) watches
    only a unit systemd restarted lately, across the default window: a restart loop looks active in most snapshots; one
    restarted again and again lately, or since a check found it healthy (``seen``: by service), is in one at once.
    ``snapshots`` is given what the service manager said of each healthy service's run first, by index."""
    healthy = [index for index, result in enumerate(results) if result["healthy"]]
    results = list(results)
    if settle_seconds > 0:
        windows = [(index, _settle.window_of(services[index], settle_seconds)) for index in healthy]
        before = dict((index, _settle.snapshot(services[index], manager, read_pidfile)) for index, window in windows if window > 0)
        snapshots.update(before)
    else:
        if manager == "systemd":
            snapshots.update((index, _settle.snapshot(services[index], manager, read_pidfile)) for index in healthy)
        now, now_monotonic = time.time(), time.monotonic()
        before = dict((index, state) for index, state in snapshots.items() if _settle.restarted_lately(state, now_monotonic)
                      or _settle.restarted_since_seen(state, seen.get(services[index]["name"]) or {}, now))
        for index in list(before):
            # restarted again and again lately: a loop now, with no window to wait out (its runs may outlast one)
            loop = _settle.restart_loop(before[index], now, _timeout(services[index]), seen.get(services[index]["name"]))
            if loop is not None:
                del before[index]
                said, journal = loop
                results[index] = checked(services[index], dict(window_s=0.0, changes=[said], restarted=True, journal=journal))
                results[index]["settled"] = dict(window_s=0.0, held=False, changes=[said])
        windows = [(index, _settle.window_of(services[index], _settle.DEFAULT_SETTLE_S)) for index in before]
    watched = [(index, window) for index, window in windows if window > 0]
    started, started_at = time.monotonic(), time.time()
    for index, window in sorted(watched, key=lambda item: item[1]):
        time.sleep(max(0.0, started + window - time.monotonic()))
        spec = services[index]
        said, restarted = _settle.changes(before[index], _settle.snapshot(spec, manager, read_pidfile), window)
        said = said or _settle.failed_in_window(before[index], started_at, window, _timeout(spec))
        results[index] = checked(spec, dict(window_s=window, changes=said, restarted=restarted))
        results[index]["settled"] = dict(window_s=window, held=results[index]["healthy"], changes=said)
    return results


def _timeout(spec):
    return spec.get("timeout") or 5.0


def check_one(spec, manager, log_lines, others=()):
    """service_check's result for one declared service (its declared options filled in), now: the executor's view of
    the incident before a plan's first step."""
    validate([spec], log_lines)
    return _check_one(spec, manager, log_lines, (), others=others)


def _keep_known_good(spec, manager, snapshot):
    """What the controller is told of the copy kept (names, sizes, hashes), or why none could be kept: a check never
    fails for it. What the service's directories are now is kept beside it (_owned_dirs.record_seen), and how many
    times systemd had restarted its units (``snapshot``: _settle.snapshot's of its run, None when none was taken)."""
    units = _systemd.directory_units(spec.get("service") or spec["name"], spec.get("timeout") or 5.0) if manager == "systemd" else []
    try:
        record_seen(spec["name"], service_directories(spec, units), started(units, spec), time.time())
        if snapshot:
            _settle.record_restarts(spec["name"], snapshot, time.time())
        return keep(spec["name"], spec, packages_of)
    except (KnownGoodError, OSError) as exc:
        return dict(error="the last known good configuration was not kept: %s" % exc)


def _check_one(spec, manager, log_lines, redact_values, reads=(), read_with=("become", 120), others=(), unsettled=None, restarts_seen=None):
    """One service's result. ``unsettled``: what its settle window saw (``_settled``), which fails it when anything
    changed: a unit systemd restarted meanwhile is in a restart loop, whatever its state at this moment.
    ``restarts_seen``: what systemd had counted of its units' restarts when a check last found it healthy."""
    name = spec["name"]
    init_service = spec.get("service") or name
    process_name = spec.get("process") or init_service
    timeout = spec.get("timeout") or 5.0
    checks = []
    status = None
    if spec.get("status_check", True):
        status = _checks.status(init_service, manager, timeout)
        checks.append(_checks.service_check(init_service, status, manager, timeout))
    for port in spec.get("ports") or []:
        ok, detail = _checks.tcp(spec.get("address") or "127.0.0.1", port, timeout)
        checks.append(dict(kind="port", target="%s/tcp" % port, ok=ok, detail=detail))
    if spec.get("http"):
        ok, detail = _checks.http(spec["http"], timeout)
        checks.append(dict(kind="http", target=spec["http"]["url"], ok=ok, detail=detail))
    if spec.get("process"):
        pids = find_pids(process_name)
        checks.append(dict(kind="process", target=process_name, ok=bool(pids),
                           detail="%d running" % len(pids) if pids else "no process named %s" % process_name))
    if spec.get("check_command"):
        ok, detail = _checks.command(spec["check_command"], spec.get("running_indicator"), timeout)
        checks.append(dict(kind="command", target=spec["check_command"], ok=ok, detail=detail))
    changes = (unsettled or {}).get("changes") or []
    healthy = all(check["ok"] for check in checks) and not changes
    result = dict(name=name, healthy=healthy, checks=checks, spec=dict(spec))
    if healthy:
        return result
    evidence = _gather.evidence(spec, init_service, process_name, status, manager, log_lines, timeout, redact_values, others)
    failure_class = classify(checks, evidence, process_name, spec.get("status_check", True))
    if failure_class == "auto_restart" and not unsettled:
        # down for a moment between two of systemd's restarts, again and again lately: a loop, nothing to wait for
        loop = _settle.restart_loop(dict(units=[evidence["unit"]]), time.time(), timeout, restarts_seen)
        if loop is not None:
            unsettled = dict(window_s=0.0, changes=[loop[0]], restarted=True, journal=loop[1])
            changes = unsettled["changes"]
    if evidence["unit"] and (unsettled or {}).get("journal"):
        # a unit in a restart loop: its journal since its present start holds none of the failures before it
        evidence["unit"]["journal"] = unsettled["journal"]
        evidence["unit"]["cause"] = _systemd.journal_cause(unsettled["journal"])
    if unsettled and unsettled["restarted"] and failure_class != "masked":
        failure_class = "restart_loop"
    # nothing is read ahead for a unit a person masked or one systemd restarts by itself: the loop leaves both alone
    if reads and failure_class not in NOT_READ_FOR:
        evidence["commands"] = read_evidence(reads, *read_with)
    summary = "; ".join([check["detail"] for check in checks if not check["ok"]] + changes)
    if unsettled and not changes:
        summary = "it passed its checks, then failed them within its %g s settle window: %s" % (unsettled["window_s"], summary)
    pidfile = evidence["pidfile"]
    if pidfile and pidfile["exists"] and not pidfile["alive"]:
        if pidfile["pid"] is None:
            summary += "; pid file %s holds no pid" % pidfile["path"]
        else:
            summary += "; pid file %s names pid %s, which is not running" % (pidfile["path"], pidfile["pid"])
    for info in evidence["sockets"]:
        summary += "".join("; " + note for note in socket_notes(info))
    for owner in evidence["port_owners"]:
        summary += "; port %s/tcp is held by %s (pid %s)" % (owner["port"], owner["process"], owner["pid"])
    summary += "".join("; " + note for note in path_notes(evidence, spec.get("user")))
    # a unit restarted within the window is described by what the window saw (describe()'s restart loop is one its
    # start limit ended)
    unit_sentence = _systemd.describe(evidence["unit"], failure_class) if evidence["unit"] and not (unsettled and unsettled["restarted"]) else None
    if unit_sentence:
        summary += "; " + unit_sentence
    result.update(
        failure_class=failure_class,
        summary=redact(summary, redact_values),
        evidence=redact_tree(evidence, redact_values),
        checks=redact_tree(checks, redact_values),
    )
    return result
