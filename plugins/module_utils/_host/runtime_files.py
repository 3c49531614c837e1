# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a daemon writes while it runs and leaves behind when it is killed (standard library only): its pid file, its Unix
sockets and their lock files, and whether each is stale."""

from __future__ import annotations

import os
import stat

from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import NoFollowRefused, open_file
from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import comm


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


def keeps_from_starting(info):
    """Whether what a dead daemon left of a socket keeps its next start from binding it. A lock file is its owner's
    business: a daemon that writes one takes a lock naming a dead pid for its own remnant and cleans both up (PostgreSQL
    does); only a lock naming no pid, or a pid a live program of another name took over, stops it. A socket without a
    lock file is in the way of a daemon that will not unlink what it finds (clamd: "Socket file ... exists")."""
    lock = info["lock"]
    if lock["exists"]:
        return lock["stale"] and (lock["pid"] is None or lock["process"] is not None)
    return info["stale"]


def socket_notes(info):
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
