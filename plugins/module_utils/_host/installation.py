# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host has installed, and where (standard library only): its service manager and release, a service's init
script and program, the Debian packages that installed them with the files they put under /etc, and the ports on this
host's loopback its configuration names (its backends). The host's settings below are read where they are called, so
that a test can give the probe a host of its own."""

from __future__ import annotations

import os
import re
import shutil

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
# where daemons live besides PATH (a module's PATH often lacks the sbin directories)
PROGRAM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def detect_service_manager():
    if os.path.isdir(SYSTEMD_RUNTIME):
        return "systemd"
    if os.path.isdir(os.path.join(ETC, "init.d")):
        return "sysv"
    return "unknown"


def os_release():
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


def init_script(name):
    return os.path.join(ETC, "init.d", name)


def program(name):
    """Where the program of that name is installed (PATH and the system's sbin directories), or None."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *PROGRAM_DIRS]))


def packages_of(spec):
    """The Debian packages of the service's unit file, init script or program."""
    init_service = spec.get("service") or spec["name"]
    found = installed_by(["/lib/systemd/system/%s.service" % init_service, init_script(init_service),
                          program(spec.get("process") or init_service)])
    return (found or {}).get("names") or []


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
