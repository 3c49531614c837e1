# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks a service declares, each run once (standard library only): the service manager's word on it, a TCP
connect, an HTTP request, a command and what its output says."""

from __future__ import annotations

import os
import re
import shlex
import socket
import urllib.error
import urllib.request

from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.command import run
from ansible_collections.sentinel.heal.plugins.module_utils._host.installation import init_script
from ansible_collections.sentinel.heal.plugins.module_utils._host.logs import LOG_READ_BYTES


def service_check(init_service, status, manager, timeout):
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


def status(init_service, manager, timeout):
    if manager == "systemd":
        command = ["systemctl", "status", "--no-pager", "--lines=0", init_service]
    elif os.path.exists(init_script(init_service)):
        command = [init_script(init_service), "status"]
    else:
        return dict(command=["service", init_service, "status"], rc=None,
                    output="no init script or unit named %s (service manager: %s)" % (init_service, manager))
    rc, output = run(command, timeout)
    return dict(command=command, rc=rc, output=output)


def tcp(address, port, timeout):
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True, "%s:%s accepts connections" % (address, port)
    except OSError as exc:
        return False, "tcp %s:%s: %s" % (address, port, exc.strerror or exc)


def http(http, timeout):
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


def command(command, indicator, timeout):
    rc, output = run(shlex.split(command), timeout)
    if rc != 0:
        return False, "%s: rc=%s: %s" % (command, rc, _first_line(output))
    if indicator and indicator not in output:
        return False, "%s: output lacks %r: %s" % (command, indicator, _first_line(output))
    return True, "%s: ok" % command


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no output)"
