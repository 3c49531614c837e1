# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a service declaration is and what the probe refuses of one before any check (standard library only): the
service_check module's options, shared with the heal action plugin (one definition of a service), and their checks."""

from __future__ import annotations

import re
import shlex

from ansible_collections.sentinel.heal.plugins.module_utils._host import settle as _settle
from ansible_collections.sentinel.heal.plugins.module_utils._host.evidence import PRIVILEGES, EvidenceConfigError, validate_evidence

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

MAX_LOG_LINES = 500
_NAME = re.compile(r"^[A-Za-z0-9@._+-]+$")


class ProbeConfigError(Exception):
    """A service declaration cannot be checked as written."""


def validate(services, log_lines):
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


def evidence_commands(commands, services, timeout):
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
