# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Service checks and evidence gathering on the target host (standard library only).

``check_services(params)`` runs every declared check of every service and, for the services
that fail, gathers bounded evidence (status output, the tail of their logs, who holds their
ports, what their pid file says, the owner of their declared paths, the owner and mode each of their
directories should have (_owned_dirs.py) and how full the filesystems of their paths and logs are),
redacted before it leaves the host.
"""

from __future__ import annotations

import calendar
import errno
import os
import re
import shlex
import shutil
import socket
import stat
import time
import urllib.error
import urllib.request

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact, redact_tree
from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host import settle as _settle
from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.command import run
from ansible_collections.sentinel.heal.plugins.module_utils._host.evidence import PRIVILEGES, EvidenceConfigError, read_evidence, validate_evidence
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import KnownGoodError, changes_since_good, configuration_files, keep
from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import read_marker
from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import NoFollowRefused, open_file
from ansible_collections.sentinel.heal.plugins.module_utils._host.owned_dirs import (
    group_name,
    owned_dirs,
    record_seen,
    seen_while_healthy,
    service_directories,
    user_name,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import MAX_PIDS, comm, find_pids, port_owners
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

# Shared by the service_check module and the heal action plugin (one definition of a service).
SERVICE_OPTIONS = dict(
    name=dict(type="str", required=True),
    service=dict(type="str"),
    status_check=dict(type="bool", default=True),
    ports=dict(type="list", elements="int", default=[]),
    address=dict(type="str", default="127.0.0.1"),
    http=dict(
        type="dict",
        options=dict(
            url=dict(type="str", required=True),
            status=dict(type="int", default=200),
            body=dict(type="str"),
        ),
    ),
    process=dict(type="str"),
    check_command=dict(type="str"),
    running_indicator=dict(type="str"),
    pidfile=dict(type="path"),
    logs=dict(type="list", elements="path", default=[]),
    user=dict(type="str"),
    paths=dict(type="list", elements="path", default=[]),
    sockets=dict(type="list", elements="path", default=[]),
    timeout=dict(type="float", default=5.0),
    # configuration files beyond its packages' own (paths or globs), kept while it is healthy
    configs=dict(type="list", elements="str", default=[]),
    # keep its last known good configuration on the host, and say what changed since when it fails
    known_good=dict(type="bool", default=True),
    # how a restore of its last known good configuration runs: after a person approved it, unattended, or never
    # (unset: the heal's, or on the host the host role's, setting)
    restore_known_good=dict(type="str", choices=["approve", "auto", "off"]),
    # its configuration test (argv, no shell), run after a restore: a failing test undoes the restore
    config_test=dict(type="str"),
    # how long it must stay as it is after a repair before it counts as healthy (unset: the check's settle_seconds)
    settle_seconds=dict(type="float"),
    # how far sentinel.heal acts on this service (the controller reads it; the host does not)
    mode=dict(type="str", choices=["observe", "review", "autonomous"]),
    # declared services of the host it needs that systemd does not know of (an HTTP upstream): the controller heals a
    # failing one first (the host does not read it)
    depends_on=dict(type="list", elements="str", default=[]),
)

ARGUMENT_SPEC = dict(
    services=dict(type="list", elements="dict", required=True, options=SERVICE_OPTIONS),
    log_lines=dict(type="int", default=20),
    # watch each healthy service this long (its own settle_seconds in its place): a restart within counts as failing
    settle_seconds=dict(type="float", default=0.0),
    redact_values=dict(type="list", elements="str", default=[], no_log=True),
    # read-only commands the controller's guard allowed, run for a service only when it fails
    evidence_commands=dict(type="list", elements="dict", default=[], options=dict(
        service=dict(type="str", required=True),
        argv=dict(type="list", elements="str", required=True),
        become=dict(type="bool", default=False),
    )),
    evidence_privilege=dict(type="str", default="become", choices=list(PRIVILEGES)),
    evidence_timeout=dict(type="int", default=120),
    # the executor on the host (sentinel.heal.host) reads as root: the module itself runs without become
    through_executor=dict(type="bool", default=False),
    policy_version=dict(type="str"),
    # resolved by the action plugin on the controller, never seen on the host
    enforcement=dict(type="str", default="controller", choices=["auto", "host", "controller"]),
    policy_file=dict(type="path"),
)

FAILURE_CLASSES = ("not_installed", "masked", "port_conflict", "auto_restart", "start_limit_hit", "restart_loop", "stale_pidfile", "stale_socket",
                   "not_running", "unhealthy")
LOG_LIMIT = 4000
MAX_LOG_LINES = 500
LOG_READ_BYTES = 65536
MAX_PATHS = 8
MAX_OWNED_DIRECTORIES = 64
MAX_MOUNTS = 256
MAX_PACKAGE_FILES = 200
# the ports of this host's loopback a service's configuration names (its backends), and how much of a file is read
MAX_BACKENDS = 16
MAX_BACKEND_FILE_BYTES = 256 * 1024
# an address on this host's loopback with a port, as proxies write their backends: haproxy's `server web
# 127.0.0.1:8081`, nginx's `proxy_pass http://localhost:8081/`, apache2's `ProxyPass / http://[::1]:8081/`
_LOOPBACK_ADDRESS = re.compile(r"(?<![\w.:-])(?:127\.0\.0\.1|localhost|\[::1\])(?::(\d{1,5}))(?![\d])")
DPKG_INFO = "/var/lib/dpkg/info"
# the host's configuration, and the directory systemd makes when it is the service manager: read where the probe is
# called, so that a test can give it a host of its own
ETC = "/etc"
SYSTEMD_RUNTIME = "/run/systemd/system"
# mount points of the kernel's own filesystems, never below a service's directories
KERNEL_MOUNTS = ("/proc", "/sys", "/dev")
# where daemons live besides PATH (a module's PATH often lacks the sbin directories)
PROGRAM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# A filesystem is reported full when this much of it (space or inodes) is used, as df counts it.
FULL_PERCENT = 99
# the failures no evidence is read for: a unit a person masked, one systemd restarts by itself
NOT_READ_FOR = ("masked", "auto_restart")
_NAME = re.compile(r"^[A-Za-z0-9@._+-]+$")


class ProbeConfigError(Exception):
    """A service declaration cannot be checked as written."""


def check_services(params, keep_known_good=False):
    """Check every declared service; returns the module result (without 'changed'). With ``keep_known_good`` (outside
    check mode), a healthy service's configuration becomes its last known good (_known_good.py); a failing one's
    evidence says what changed since (``changes``) either way."""
    services = params["services"]
    _validate(services, params["log_lines"])
    if not 0 <= (params.get("settle_seconds") or 0.0) <= _settle.MAX_SETTLE_S:
        raise ProbeConfigError("settle_seconds: %r must be 0 to %g seconds (0: each service checked once)"
                               % (params["settle_seconds"], _settle.MAX_SETTLE_S))
    reads = _evidence_commands(params.get("evidence_commands") or [], services, params.get("evidence_timeout", 120))
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
        facts=dict(service_manager=manager, os=_os_release(), maintenance=marker),
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
    _validate([spec], log_lines)
    return _check_one(spec, manager, log_lines, (), others=others)


def _keep_known_good(spec, manager, snapshot):
    """What the controller is told of the copy kept (names, sizes, hashes), or why none could be kept: a check never
    fails for it. What the service's directories are now is kept beside it (_owned_dirs.record_seen), and how many
    times systemd had restarted its units (``snapshot``: _settle.snapshot's of its run, None when none was taken)."""
    units = _systemd.directory_units(spec.get("service") or spec["name"], spec.get("timeout") or 5.0) if manager == "systemd" else []
    try:
        record_seen(spec["name"], service_directories(spec, units), _started(units, spec), time.time())
        if snapshot:
            _settle.record_restarts(spec["name"], snapshot, time.time())
        return keep(spec["name"], spec, _packages_of)
    except (KnownGoodError, OSError) as exc:
        return dict(error="the last known good configuration was not kept: %s" % exc)


def _packages_of(spec):
    """The Debian packages of the service's unit file, init script or program."""
    init_service = spec.get("service") or spec["name"]
    found = installed_by(["/lib/systemd/system/%s.service" % init_service, _init_script(init_service),
                          _program(spec.get("process") or init_service)])
    return (found or {}).get("names") or []


def _validate(services, log_lines):
    if not services:
        raise ProbeConfigError("services: give at least one service to check")
    if not 1 <= log_lines <= MAX_LOG_LINES:
        raise ProbeConfigError("log_lines: must be between 1 and %d, got %r" % (MAX_LOG_LINES, log_lines))
    seen = set()
    for index, spec in enumerate(services):
        where = "services[%d]" % index
        name = spec["name"]
        if not _NAME.match(name):
            raise ProbeConfigError("%s.name: %r is not a plain name (letters, digits, @._+-)" % (where, name))
        if name in seen:
            raise ProbeConfigError("%s.name: %r is declared twice" % (where, name))
        seen.add(name)
        if spec.get("service") is not None and not _NAME.match(spec["service"]):
            raise ProbeConfigError("%s.service: %r is not a plain service name" % (where, spec["service"]))
        for port in spec.get("ports") or []:
            if not 1 <= port <= 65535:
                raise ProbeConfigError("%s.ports: %r is not a TCP port (1-65535)" % (where, port))
        if spec.get("running_indicator") and not spec.get("check_command"):
            raise ProbeConfigError("%s.running_indicator: needs check_command (the command whose output it is looked for in)" % where)
        if spec.get("check_command"):
            try:
                if not shlex.split(spec["check_command"]):
                    raise ValueError("empty command")
            except ValueError as exc:
                raise ProbeConfigError("%s.check_command: %r cannot be split into arguments (%s)" % (where, spec["check_command"], exc)) from None
        http = spec.get("http")
        if http and not re.match(r"^https?://", http["url"]):
            raise ProbeConfigError("%s.http.url: %r must start with http:// or https://" % (where, http["url"]))
        if spec.get("timeout") is not None and not 0 < spec["timeout"] <= 120:
            raise ProbeConfigError("%s.timeout: %r must be more than 0 and at most 120 seconds" % (where, spec["timeout"]))
        if spec.get("settle_seconds") is not None and not 0 <= spec["settle_seconds"] <= _settle.MAX_SETTLE_S:
            raise ProbeConfigError("%s.settle_seconds: %r must be 0 to %g seconds (0: checked once)"
                                   % (where, spec["settle_seconds"], _settle.MAX_SETTLE_S))
        if not any((spec.get("status_check", True), spec.get("ports"), http, spec.get("process"), spec.get("check_command"))):
            raise ProbeConfigError("%s: %r declares no check (status_check, ports, http, process or check_command)" % (where, name))


def _evidence_commands(commands, services, timeout):
    """The evidence commands by service, each a declared one."""
    try:
        validate_evidence(commands, timeout, ("evidence_commands", "evidence_timeout"))
    except EvidenceConfigError as exc:
        raise ProbeConfigError(str(exc)) from None
    declared = set(spec["name"] for spec in services)
    by_service = {}
    for index, command in enumerate(commands):
        if command["service"] not in declared:
            raise ProbeConfigError("evidence_commands[%d].service: %r is not one of the declared services" % (index, command["service"]))
        by_service.setdefault(command["service"], []).append(dict(argv=command["argv"], become=command["become"]))
    return by_service


def detect_service_manager():
    if os.path.isdir(SYSTEMD_RUNTIME):
        return "systemd"
    if os.path.isdir(os.path.join(ETC, "init.d")):
        return "sysv"
    return "unknown"


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
        status = _status(init_service, manager, timeout)
        checks.append(_service_check(init_service, status, manager, timeout))
    for port in spec.get("ports") or []:
        ok, detail = _tcp(spec.get("address") or "127.0.0.1", port, timeout)
        checks.append(dict(kind="port", target="%s/tcp" % port, ok=ok, detail=detail))
    if spec.get("http"):
        ok, detail = _http(spec["http"], timeout)
        checks.append(dict(kind="http", target=spec["http"]["url"], ok=ok, detail=detail))
    if spec.get("process"):
        pids = find_pids(process_name)
        checks.append(dict(kind="process", target=process_name, ok=bool(pids),
                           detail="%d running" % len(pids) if pids else "no process named %s" % process_name))
    if spec.get("check_command"):
        ok, detail = _command(spec["check_command"], spec.get("running_indicator"), timeout)
        checks.append(dict(kind="command", target=spec["check_command"], ok=ok, detail=detail))
    changes = (unsettled or {}).get("changes") or []
    healthy = all(check["ok"] for check in checks) and not changes
    result = dict(name=name, healthy=healthy, checks=checks, spec=dict(spec))
    if healthy:
        return result
    evidence = _evidence(spec, init_service, process_name, status, manager, log_lines, timeout, redact_values, others)
    failure_class = _classify(checks, evidence, process_name, spec.get("status_check", True))
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
        summary += "".join("; " + note for note in _socket_notes(info))
    for owner in evidence["port_owners"]:
        summary += "; port %s/tcp is held by %s (pid %s)" % (owner["port"], owner["process"], owner["pid"])
    summary += "".join("; " + note for note in _path_notes(evidence, spec.get("user")))
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


def _service_check(init_service, status, manager, timeout):
    """The service manager's word on the service. A unit that fronts others (Debian's postgresql, whose ExecStart= is
    /bin/true, fronts postgresql@15-main) is the units it fronts: up when every one of them is active, whatever its
    own state after one of them was started alone."""
    detail = "%s: rc=%s: %s" % (" ".join(status["command"]), status["rc"], _first_line(status["output"]))
    if status["rc"] != 0 and manager == "systemd":
        fronted = _systemd.fronted_units(init_service, timeout)
        if fronted and all(active for _unit, active in fronted):
            return dict(kind="service", target=init_service, ok=True,
                        detail="%s fronts %s: active" % (init_service, ", ".join(unit for unit, _active in fronted)))
    return dict(kind="service", target=init_service, ok=status["rc"] == 0, detail=detail)


def _classify(checks, evidence, process_name, managed):
    if managed and not any(evidence["installed"].values()) and not evidence["processes"]:
        return "not_installed"
    unit_class = _systemd.classify(evidence["unit"]) if evidence["unit"] else None
    if unit_class == "masked":
        return unit_class
    if any(owner["process"] != process_name[:15] and not owner.get("own") for owner in evidence["port_owners"]):
        return "port_conflict"
    if unit_class:
        return unit_class
    pidfile = evidence["pidfile"]
    if pidfile and pidfile["exists"] and not pidfile["alive"]:
        return "stale_pidfile"
    if any(_keeps_from_starting(socket_info) for socket_info in evidence["sockets"]):
        return "stale_socket"
    if any(not check["ok"] for check in checks if check["kind"] in ("service", "process")):
        return "not_running"
    return "unhealthy"


def _status(init_service, manager, timeout):
    if manager == "systemd":
        command = ["systemctl", "status", "--no-pager", "--lines=0", init_service]
    elif os.path.exists(_init_script(init_service)):
        command = [_init_script(init_service), "status"]
    else:
        return dict(command=["service", init_service, "status"], rc=None,
                    output="no init script or unit named %s (service manager: %s)" % (init_service, manager))
    rc, output = run(command, timeout)
    return dict(command=command, rc=rc, output=output)


def _tcp(address, port, timeout):
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True, "%s:%s accepts connections" % (address, port)
    except OSError as exc:
        return False, "tcp %s:%s: %s" % (address, port, exc.strerror or exc)


def _http(http, timeout):
    url = http["url"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers={"User-Agent": "sentinel.heal"}), timeout=timeout) as response:
            status, body = response.status, response.read(LOG_READ_BYTES)
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read(LOG_READ_BYTES) if exc.fp else b""
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, "%s: %s" % (url, getattr(reason, "strerror", None) or reason)
    expected = http.get("status") or 200
    if status != expected:
        return False, "%s: status %s (expected %s)" % (url, status, expected)
    if http.get("body") and not re.search(http["body"], body.decode("utf-8", "replace")):
        return False, "%s: status %s but the body does not match %r" % (url, status, http["body"])
    return True, "%s: status %s" % (url, status)


def _command(command, indicator, timeout):
    rc, output = run(shlex.split(command), timeout)
    if rc != 0:
        return False, "%s: rc=%s: %s" % (command, rc, _first_line(output))
    if indicator and indicator not in output:
        return False, "%s: output lacks %r: %s" % (command, indicator, _first_line(output))
    return True, "%s: ok" % command


def evidence_of(spec, manager, log_lines=1, others=()):
    """The evidence of a declared service as it is now, failing or not (the executor's context at a step: what changed
    since its last known good configuration included, which a restore is bound to). ``others``: the host's other
    declared services, whose processes on the service's port are theirs."""
    init_service = spec.get("service") or spec["name"]
    return _evidence(spec, init_service, spec.get("process") or init_service, None, manager, log_lines, spec.get("timeout") or 5.0,
                     others=others)


def _evidence(spec, init_service, process_name, status, manager, log_lines, timeout, redact_values=(), others=()):
    if status is None:
        status = _status(init_service, manager, timeout)
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
    program = _program(process_name)
    for owner in owners:
        owner["service"] = None if owner.get("own") else _declared_service_of(owner, process_name, others)
        owner["service_program"] = _processes.runs_program(owner["pid"], program)
    packages = installed_by([(unit or {}).get("FragmentPath"), _init_script(init_service), program])
    started = _last_start(unit, spec)
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
        disk=[usage for usage in (disk_usage(path) for path in _service_directories(spec)) if usage],
        path_owners=path_owners(_declared_paths(spec)),
        mounts=mount_points(),
        # what each of its directories should be, as the host says it: its unit, dpkg-statoverride, or what it was while
        # the service was healthy (the policy's package_paths speak where the host says nothing)
        owned_dirs=owned_dirs(spec, [unit] if unit else [], seen_while_healthy(spec["name"]) if spec.get("known_good", True) else []),
        packages=packages,
        # the ports on this host's loopback its configuration names: a declared service listening there is its backend,
        # which it needs as a unit's Requires= (loop/dependencies.py)
        backends=backends(spec, configuration_files(spec, (packages or {}).get("names") or [])),
        unit=unit,
        installed=dict(unit=unit is not None, init_script=os.path.exists(_init_script(init_service)),
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


def _init_script(name):
    return os.path.join(ETC, "init.d", name)


def _program(name):
    """Where the program of that name is installed (PATH and the system's sbin directories), or None."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *PROGRAM_DIRS]))


def _service_directories(spec):
    """The declared paths and the directories of the declared logs, each once, at most MAX_PATHS."""
    directories = []
    for path in list(spec.get("paths") or []) + [os.path.dirname(log) for log in spec.get("logs") or []]:
        if path and path not in directories:
            directories.append(path)
    return directories[:MAX_PATHS]


def _declared_paths(spec):
    """Every path the service declares: its paths, logs, sockets and pid file, and each socket's lock file (read as
    the socket's evidence: what it is, a file or a link, tells whether a read of it could be led elsewhere)."""
    sockets = list(spec.get("sockets") or [])
    return list(spec.get("paths") or []) + list(spec.get("logs") or []) + sockets + [path + ".lock" for path in sockets] + (
        [spec["pidfile"]] if spec.get("pidfile") else [])


def path_owners(paths):
    """Who owns each component on the way to each path, itself included, without following links ("(link)" for a
    symbolic link, below which nothing is walked): the guard lets a repair reach only where every directory on the
    way is root's, since any other account could put a link in place of what it holds."""
    owners = {}
    for path in paths:
        current = ""
        for part in [part for part in os.path.normpath(path).split("/") if part] if path.startswith("/") else []:
            current += "/" + part
            if current not in owners:
                if len(owners) >= MAX_OWNED_DIRECTORIES:
                    return owners
                try:
                    st = os.lstat(current)
                except OSError:
                    break
                owners[current] = "(link)" if stat.S_ISLNK(st.st_mode) else user_name(st.st_uid)
            if owners[current] == "(link)":
                break
    return owners


def installed_by(paths):
    """The Debian packages that installed any of ``paths`` (the unit file, the init script, the program) and the files
    they put under /etc (at most MAX_PACKAGE_FILES), from dpkg's own lists, read when a service fails: the guard lets
    a read of the incident print them. None on a host without dpkg."""
    wanted = set()
    for path in paths:
        if path:
            # dpkg lists /lib/... on a merged-/usr host where systemd says /usr/lib/..., and the other way round
            wanted.update((path, path[len("/usr"):] if path.startswith("/usr/") else "/usr" + path))
    try:
        lists = sorted(name for name in os.listdir(DPKG_INFO) if name.endswith(".list"))
    except OSError:
        return None
    packages, files = [], set()
    for name in lists:
        try:
            with open(os.path.join(DPKG_INFO, name), errors="replace") as listing:
                listed = listing.read().splitlines()
        except OSError:
            continue
        if wanted.intersection(listed):
            packages.append(name[:-len(".list")].split(":")[0])
            files.update(path for path in listed if path.startswith(ETC + "/") and not os.path.isdir(path))
    return dict(names=packages, etc=sorted(files)[:MAX_PACKAGE_FILES])


def backends(spec, files):
    """The ports on this host's loopback that the service's configuration ``files`` name (comments aside), but its own:
    the addresses of the backends it proxies to, at most MAX_BACKENDS."""
    own = set(spec.get("ports") or [])
    found = set()
    for path in files:
        try:
            with open(path, errors="replace") as config:
                text = config.read(MAX_BACKEND_FILE_BYTES)
        except OSError:
            continue
        for line in text.splitlines():
            if not line.lstrip().startswith(("#", ";")):
                found.update(int(port) for port in _LOOPBACK_ADDRESS.findall(line) if 0 < int(port) < 65536)
    return sorted(found - own)[:MAX_BACKENDS]


def mount_points():
    """The host's mount points but the kernel's own (/proc, /sys, /dev), or None when they cannot all be told: a
    recursive repair never walks into another filesystem."""
    try:
        with open(_processes.PROC + "/self/mountinfo") as mountinfo:
            lines = mountinfo.read().splitlines()
    except OSError:
        return None
    mounts = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            return None
        # the kernel writes space, tab, newline and backslash in a mount point as octal escapes
        mount = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), fields[4])
        if not any(mount == top or mount.startswith(top + "/") for top in KERNEL_MOUNTS) and mount not in mounts:
            mounts.append(mount)
    return mounts if len(mounts) <= MAX_MOUNTS else None


def _path_notes(evidence, user):
    """One short sentence per problem the path and disk evidence shows, for the summary."""
    notes = []
    for info in evidence["paths"]:
        if info["exists"] is False:
            notes.append("%s does not exist" % info["path"])
        elif user and info.get("owner") is not None and info["owner"] != user:
            notes.append("%s is owned by %s:%s, not %s" % (info["path"], info["owner"], info["group"], user))
    for usage in evidence["disk"]:
        if usage["full"]:
            notes.append("disk full: %s (%d%% used, %d KiB free)" % (usage["path"], usage["used_percent"], usage["free_kb"]))
        if usage["inodes_exhausted"]:
            notes.append("inodes exhausted: %s (%d of %d used)" % (usage["path"], usage["inodes"] - usage["inodes_free"], usage["inodes"]))
    return notes


def path_info(path):
    """Whether a path exists, its type, owner, group and mode (symbolic links are followed)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return dict(path=path, exists=False)
    except OSError as exc:
        return dict(path=path, exists=None, error=exc.strerror)
    kind = "directory" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    return dict(path=path, exists=True, type=kind, owner=user_name(st.st_uid), group=group_name(st.st_gid),
                mode="%04o" % stat.S_IMODE(st.st_mode))


def disk_usage(path):
    """Space and inodes of the filesystem that holds path, counted like df (free = what non-root may use)."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    used = fs.f_blocks - fs.f_bfree
    usable = used + fs.f_bavail
    used_percent = -(-100 * used // usable) if usable else 0
    inodes_used = fs.f_files - fs.f_ffree
    inodes_percent = -(-100 * inodes_used // fs.f_files) if fs.f_files else 0
    return dict(
        path=path,
        size_kb=fs.f_blocks * fs.f_frsize // 1024,
        free_kb=fs.f_bavail * fs.f_frsize // 1024,
        used_percent=used_percent,
        inodes=fs.f_files,
        inodes_free=fs.f_favail,
        inodes_percent=inodes_percent,
        # f_blocks/f_files are 0 on filesystems without such limits (procfs, some network filesystems)
        full=bool(fs.f_blocks) and (fs.f_bavail == 0 or used_percent >= FULL_PERCENT),
        inodes_exhausted=bool(fs.f_files) and (fs.f_favail == 0 or inodes_percent >= FULL_PERCENT),
    )


def tail(path, lines):
    """The last ``lines`` of a log, or a note of why not: it is opened as root, without following a link at any
    component (a service account can put one in place of its own log, or of its log directory's entries)."""
    try:
        with open_file(path) as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_READ_BYTES))
            data = handle.read().decode("utf-8", "replace")
    except NoFollowRefused as exc:
        # the check's own failure to read, said without the log's path: diagnosis reads a path beside "Permission
        # denied" as the service's words about that path
        denied = isinstance(exc.__cause__, OSError) and exc.__cause__.errno in (errno.EACCES, errno.EPERM)
        return "(cannot read: %s)" % (exc.__cause__.strerror if denied else exc)
    except OSError as exc:
        return "(cannot read: %s)" % exc.strerror
    return clip("\n".join(data.splitlines()[-lines:]), LOG_LIMIT, keep="end")


# the time at the start of a log line, as nginx, PostgreSQL and redis write it (the host's local time)
_LOG_TIMES = (
    (re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)"), "%Y/%m/%d %H:%M:%S"),
    (re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"), "%Y-%m-%d %H:%M:%S"),
    (re.compile(r"^\d+:[A-Z] (\d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d)"), "%d %b %Y %H:%M:%S"),
)


def _last_start(unit, spec, timestamp="InactiveExitTimestamp"):
    """When the service last started (seconds since the epoch): its unit's InactiveExitTimestamp (or the ``timestamp``
    asked for) on a systemd host, else when its pid file was written; None when neither tells."""
    started = (unit or {}).get(timestamp, "")
    if started.startswith("@"):
        try:
            return float(started[1:])
        except ValueError:
            return None
    try:
        return os.stat(spec["pidfile"]).st_mtime if spec.get("pidfile") else None
    except OSError:
        return None


def _started(units, spec):
    """When the service last became active, started: the earliest of the units that run it (a unit that fronts several),
    else its pid file's time; None when that is not known of every one. What its directories were then it started
    with, a runtime directory its start made included."""
    starts = [_last_start(unit, spec, "ActiveEnterTimestamp") for unit in units or [None]]
    if None in starts:
        return None
    # systemctl --timestamp=unix names the second it happened in: a directory its start made changed within that second
    return min(starts) + (1.0 if units else 0.0)


def since_last_start(text, since, utc_offset):
    """The lines of a log tail written since the service last started (or since its failure began): a line whose time
    says it is older belongs to an earlier run, or to the time it ran well (or was planted to look like one), and is
    no cause of this failure. Lines without a time are kept
    with the line before them. ``utc_offset``: the host's, in seconds (its logs are written in its local time)."""
    if since is None:
        return text
    kept, keeping = [], True
    for line in text.splitlines():
        written = _line_time(line, utc_offset)
        if written is not None:
            keeping = written >= since - 1
        if keeping:
            kept.append(line)
    return "\n".join(kept)


def _line_time(line, utc_offset):
    for pattern, layout in _LOG_TIMES:
        found = pattern.match(line)
        if found:
            try:
                return calendar.timegm(time.strptime(found.group(1), layout)) - utc_offset
            except (ValueError, OverflowError):
                return None
    return None


def read_pidfile(path, process_name):
    info = dict(path=path, exists=os.path.exists(path), pid=None, alive=False, process=None)
    if not info["exists"]:
        return info
    try:
        # never through a link: the pid file's directory is often the service account's
        with open_file(path) as handle:
            info["pid"] = int(handle.readline().strip())
    except (NoFollowRefused, OSError, ValueError):
        return info
    info["process"] = comm(info["pid"])
    # A live pid that belongs to another program is as stale as a dead one (the pid was reused).
    info["alive"] = info["process"] is not None and (info["process"] == process_name or process_name.startswith(info["process"]))
    return info


def read_socket(path, process_name):
    """A declared Unix socket of the service: whether its file is there, whether a process of this network namespace
    has it bound (/proc/net/unix), and its lock file (PATH.lock, as PostgreSQL writes one beside each socket).

    The file is stale when nothing has it bound: a daemon killed before it could unlink it leaves it, and some refuse
    to start on it ("Address already in use", clamd's "Socket file ... exists"). The lock file is stale when the pid
    it names is dead or belongs to another program (the pid was reused after a restart of the host or container)."""
    exists = os.path.lexists(path)
    is_socket = exists and stat.S_ISSOCK(os.lstat(path).st_mode)
    bound = exists and os.path.realpath(path) in _bound_unix_sockets()
    lock = read_pidfile(path + ".lock", process_name)
    lock["stale"] = lock["exists"] and not lock["alive"]
    return dict(path=path, exists=exists, socket=is_socket, bound=bound, stale=is_socket and not bound, lock=lock)


def _bound_unix_sockets():
    paths = set()
    try:
        with open(_processes.PROC + "/net/unix") as handle:
            next(handle, None)
            for line in handle:
                fields = line.split(None, 7)
                if len(fields) == 8:
                    # as the kernel resolves it: a server binds /var/run/postgresql/... for a declared /run/postgresql/...
                    paths.add(os.path.realpath(fields[7].rstrip("\n")))
    except OSError:
        pass
    return paths


def _keeps_from_starting(info):
    """Whether what a dead daemon left of a socket keeps its next start from binding it. A lock file is its owner's
    business: a daemon that writes one takes a lock naming a dead pid for its own remnant and cleans both up (PostgreSQL
    does); only a lock naming no pid, or a pid a live program of another name took over, stops it. A socket without a
    lock file is in the way of a daemon that will not unlink what it finds (clamd: "Socket file ... exists")."""
    lock = info["lock"]
    if lock["exists"]:
        return lock["stale"] and (lock["pid"] is None or lock["process"] is not None)
    return info["stale"]


def _socket_notes(info):
    notes = []
    if info["stale"]:
        notes.append("socket %s is left over: no process has it bound" % info["path"])
    lock = info["lock"]
    if lock["stale"]:
        if lock["pid"] is None:
            notes.append("lock file %s holds no pid" % lock["path"])
        elif lock["process"] is None:
            notes.append("lock file %s names pid %s, which is not running" % (lock["path"], lock["pid"]))
        else:
            notes.append("lock file %s names pid %s, which is %s, not the service" % (lock["path"], lock["pid"], lock["process"]))
    return notes


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


def _os_release():
    facts = {}
    try:
        with open(os.path.join(ETC, "os-release")) as handle:
            for line in handle:
                key, _sep, value = line.strip().partition("=")
                if key in ("ID", "VERSION_ID", "ID_LIKE"):
                    facts[key.lower()] = value.strip('"')
    except OSError:
        pass
    return facts


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no output)"
