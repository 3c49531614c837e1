# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A service's paths and the filesystems that hold them (standard library only): what each declared path is and whose,
who owns each directory on the way to it, how full its filesystems are, and the host's mount points."""

from __future__ import annotations

import os
import re
import stat

from ansible_collections.sentinel.heal.plugins.module_utils._host import processes as _processes
from ansible_collections.sentinel.heal.plugins.module_utils._host.owned_dirs import group_name, user_name

MAX_PATHS = 8
MAX_OWNED_DIRECTORIES = 64
MAX_MOUNTS = 256
# mount points of the kernel's own filesystems, never below a service's directories
KERNEL_MOUNTS = ("/proc", "/sys", "/dev")
# A filesystem is reported full when this much of it (space or inodes) is used, as df counts it.
FULL_PERCENT = 99


def service_directories(spec):
    """The declared paths and the directories of the declared logs, each once, at most MAX_PATHS."""
    directories = []
    for path in list(spec.get("paths") or []) + [os.path.dirname(log) for log in spec.get("logs") or []]:
        if path and path not in directories:
            directories.append(path)
    return directories[:MAX_PATHS]


def declared_paths(spec):
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


def path_notes(evidence, user):
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
