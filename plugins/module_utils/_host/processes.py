# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's processes as /proc tells them (standard library only): which run a unit or descend from a pid file's
process, who holds a port, which program each runs and whether it is root's.

What the guard binds a pid to comes from here, never from a process's name: a name is anyone's to give a process
(a second redis-server started by hand is not redis-server.service), its cgroup, its parent and its executable are not.
"""

from __future__ import annotations

import os

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

# read where it is called, so that a test can give the probe a /proc of its own
PROC = "/proc"
MAX_PIDS = 20
_TCP_LISTEN = "0A"
# what /proc/PID/exe says after the program's file was replaced (an upgrade under a running server): still that program
_REPLACED = " (deleted)"


def pids():
    """The processes of this host's own pid namespace (the one the check runs in): a container's daemon, seen from
    the host in a namespace of its own, never makes the host's service look healthy. A process whose namespace
    cannot be read (another user's, without become) is counted."""
    own = _pid_namespace("self")
    return [int(entry) for entry in os.listdir(PROC) if entry.isdigit() and _pid_namespace(entry) in (own, None)]


def _pid_namespace(pid):
    try:
        return os.readlink("%s/%s/ns/pid" % (PROC, pid))
    except OSError:
        return None


def comm(pid):
    try:
        with open("%s/%d/comm" % (PROC, pid)) as handle:
            return handle.read().strip()
    except OSError:
        return None


def cmdline(pid):
    try:
        with open("%s/%d/cmdline" % (PROC, pid), "rb") as handle:
            return clip(handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip(), 200)
    except OSError:
        return ""


def find_pids(process_name):
    """The processes carrying this name anywhere on the host: what runs by that name, never whose it is."""
    # /proc/PID/comm holds at most 15 characters of the name.
    wanted = process_name[:15]
    return sorted(pid for pid in pids() if comm(pid) == wanted)


def unit_of(pid):
    """The systemd unit whose cgroup holds the process (postgresql@15-main.service), or None."""
    try:
        with open("%s/%d/cgroup" % (PROC, pid)) as cgroup:
            paths = [line.rstrip("\n").split(":", 2)[-1] for line in cgroup]
    except OSError:
        return None
    units = [part for path in paths for part in path.split("/") if part.endswith((".service", ".scope"))]
    return units[-1] if units else None


def unit_pids(units):
    """The processes in the cgroups of these systemd units (``a.service``), lowest first, at most MAX_PIDS."""
    return sorted(pid for pid in pids() if unit_of(pid) in units)[:MAX_PIDS]


def process_tree(pid):
    """The process and every process descended from it (by the parent each names in /proc/PID/stat), lowest first, at
    most MAX_PIDS: a daemon's workers are its children, whatever they are called."""
    children = {}
    for child in pids():
        children.setdefault(_parent(child), []).append(child)
    tree, waiting = [], [pid]
    while waiting:
        current = waiting.pop()
        if current not in tree:
            tree.append(current)
            waiting.extend(children.get(current, ()))
    return sorted(tree)[:MAX_PIDS]


def _parent(pid):
    try:
        with open("%s/%d/stat" % (PROC, pid)) as handle:
            # the name in parentheses may hold spaces and parentheses itself: the fields start after its last one
            fields = handle.read().rpartition(")")[2].split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def runs_as_root(pid):
    """Whether the process is root's: any of its user ids (real, effective, saved, filesystem) is 0, so it is root or
    may become root again; None when /proc no longer tells (it ended)."""
    try:
        with open("%s/%d/status" % (PROC, pid)) as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return "0" in line.split()[1:]
    except OSError:
        pass
    return None


def runs_program(pid, program):
    """Whether the process runs ``program`` (its /proc/PID/exe is that file, as the kernel resolved it); False when
    /proc does not tell (another user's process, without become)."""
    if program is None:
        return False
    try:
        executable = os.readlink("%s/%d/exe" % (PROC, pid))
    except OSError:
        return False
    if executable.endswith(_REPLACED):
        executable = executable[:-len(_REPLACED)]
    return executable == os.path.realpath(program)


def port_owners(port):
    """Processes that hold a listening TCP socket on this port (any address, IPv4 or IPv6), each with whether it is
    root's (``root``, see runs_as_root)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            with open("%s/%s" % (PROC, table)) as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        except OSError:
            continue
    if not inodes:
        return []
    owners = []
    for pid in pids():
        try:
            fds = os.listdir("%s/%d/fd" % (PROC, pid))
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("%s/%d/fd/%s" % (PROC, pid, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                owners.append(dict(port=port, pid=pid, process=comm(pid) or "?", cmdline=cmdline(pid), unit=unit_of(pid),
                                   root=runs_as_root(pid)))
                break
    return owners[:MAX_PIDS]
