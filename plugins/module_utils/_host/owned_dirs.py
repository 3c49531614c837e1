# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a service owns, read from the host (standard library only): the owner, group and mode each of its directories
should have, and whether everything below has the same owner and group (a tree).

The first source that names a directory decides: the service's systemd unit (``RuntimeDirectory=``, ``StateDirectory=``,
``CacheDirectory=``, ``LogsDirectory=``, which systemd makes at each start with the unit's ``User=``, ``Group=`` and
``...DirectoryMode=``), dpkg-statoverride (what a package's maintainer script or a person registered with dpkg), then
what the directory was while the service was healthy, recorded beside its last known good configuration. The policy's
``package_paths`` table speaks, on the controller and in the executor's judge, only where the host says nothing.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import time

from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import OWNED_DIRS, keep_record, kept_record

# where systemd makes a unit's directories, and where a service's own directories named for it are: read where they are
# called, so that a test gives the host a root of its own
RUN = "/run"
STATE = "/var/lib"
CACHE = "/var/cache"
LOGS = "/var/log"
DPKG_STATOVERRIDE = "/var/lib/dpkg/statoverride"
MAX_OWNED_DIRS = 16
# a walk below a directory stops here and calls it no tree: a data directory of millions of files is not walked at
# every check
MAX_TREE_ENTRIES = 2048
# directories many services share: a log declared as /var/spool/x.log does not make /var/spool the service's
SHARED_DIRECTORIES = frozenset(("/var/run", "/var/spool", "/var/tmp", "/var/backups", "/var/mail", "/run/lock", "/run/user"))
SYSTEMD_MODE = 0o755
# what systemd accepts in RuntimeDirectory= and the others: relative paths below their area, never ".."
_UNIT_DIRECTORY = re.compile(r"^(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9@._+-]+(?:/[A-Za-z0-9@._+-]+)*$")
_OCTAL = re.compile(r"^[0-7]{1,4}$")
_VALUES = ("owner", "group", "mode", "tree")


def _unit_areas():
    """Each setting of a unit's directories, the area systemd makes them in, and whether it makes them the unit's
    account's down the whole tree (it does for state, cache and logs at each start; a runtime directory is made anew)."""
    return (("RuntimeDirectory", RUN, False), ("StateDirectory", STATE, True), ("CacheDirectory", CACHE, True),
            ("LogsDirectory", LOGS, True))


def owned_dirs(spec, units, seen=()):
    """Each of the service's directories the host says something of, by the first source that does: its units
    (``units``: their systemd properties), dpkg-statoverride, what was seen while it was healthy (``seen``:
    seen_while_healthy's); each {path, owner, group, mode, tree, source}, at most MAX_OWNED_DIRS."""
    directories = service_directories(spec, units)
    found = {}
    for entry in unit_entries(units) + statoverride_entries(directories) + list(seen):
        if entry["path"] in directories:
            found.setdefault(entry["path"], entry)
    return list(found.values())[:MAX_OWNED_DIRS]


def service_directories(spec, units):
    """The service's own directories: its declared paths, its logs' directories, its units' directories, and
    /var/lib/NAME, /var/log/NAME, /run/NAME and /var/cache/NAME of its names; each once, none shared with other services,
    at most MAX_OWNED_DIRS."""
    names = dict.fromkeys(name for name in (spec["name"], spec.get("service")) if name)
    candidates = list(spec.get("paths") or []) + [os.path.dirname(log) for log in spec.get("logs") or []]
    candidates += [path for unit in units for _setting, path, _tree in _unit_paths(unit)]
    candidates += [os.path.join(area, name) for name in names for area in (STATE, LOGS, RUN, CACHE)]
    own = []
    for candidate in candidates:
        path = _normal(candidate)
        if path is not None and path not in own and not _shared(path):
            own.append(path)
    return own[:MAX_OWNED_DIRS]


def unit_entries(units):
    """The directories systemd makes for ``units`` with the owner, group and mode it gives them: ``User=`` (root when
    unset), ``Group=`` (the user's primary group when unset) and the setting's mode (0755 when unset). None for a unit
    with ``DynamicUser=``, whose account exists only while it runs, nor for a user the host does not know."""
    entries = []
    for unit in units:
        user = unit.get("User") or "root"
        group = unit.get("Group") or primary_group(user)
        if unit.get("DynamicUser") == "yes" or group is None:
            continue
        for setting, path, tree in _unit_paths(unit):
            mode = unit.get(setting + "Mode") or "%04o" % SYSTEMD_MODE
            if _OCTAL.match(mode):
                entries.append(dict(path=path, owner=user, group=group, mode="%04o" % int(mode, 8), tree=tree, source="unit %s=" % setting))
    return entries


def _unit_paths(unit):
    """(setting, path, tree) of each directory a unit names, where systemd makes it."""
    return [(setting, os.path.join(area, name), tree) for setting, area, tree in _unit_areas()
            for name in (unit.get(setting) or "").split() if _UNIT_DIRECTORY.match(name)]


def statoverride_entries(directories, path=None):
    """What dpkg-statoverride says of ``directories`` (its file: one "owner group mode path" a line, the mode in
    octal, "#ID" for an account without a name); [] on a host without it."""
    wanted = set(directories)
    try:
        with open(path or DPKG_STATOVERRIDE, errors="replace") as overrides:
            lines = overrides.read().splitlines()
    except OSError:
        return []
    entries = []
    for fields in (line.split(None, 3) for line in lines):
        overridden = _normal(fields[3]) if len(fields) == 4 and _OCTAL.match(fields[2]) else None
        if overridden in wanted:
            entries.append(dict(path=overridden, owner=fields[0].lstrip("#"), group=fields[1].lstrip("#"), mode="%04o" % int(fields[2], 8),
                                tree=False, source="dpkg-statoverride"))
    return entries


def record_seen(name, directories, started, now, root=None):
    """Called while every check of the service passes: what each of its ``directories`` is now, kept beside its last
    known good configuration (``root``: where those are kept). What a directory is counts as good only once the service
    started with it (``started``: when it last became active, None when not known): it did after the directory became so,
    which was at the latest when its status last changed (its ctime) or when a check first saw it so. A chown -R that
    went too far under a running service is thus never good: the values seen good before stay until the service has
    started with the new ones and passed its checks. A directory gone while the service passes keeps its record (a
    runtime directory removed under a running server): that is what a heal gives back."""
    before = (kept_record(name, OWNED_DIRS, root) or {}).get("directories")
    before = before if isinstance(before, dict) else {}
    after = {}
    for path in directories:
        previous = before.get(path) if isinstance(before.get(path), dict) else {}
        state = on_disk(path)
        if state is None:
            if previous:
                after[path] = previous
            continue
        values = dict((key, state[key]) for key in _VALUES)
        seen, good = previous.get("seen") or {}, previous.get("good")
        since = seen["since"] if _values_of(seen) == values and isinstance(seen.get("since"), (int, float)) else now
        if not (isinstance(good, dict) and _values_of(good) == values):
            good = dict(values, at=now) if started is not None and started > min(since, state["changed_at"]) else good
        after[path] = dict(seen=dict(values, since=since), good=good)
    if after != before:
        keep_record(name, OWNED_DIRS, dict(directories=after), root)


def seen_while_healthy(name, root=None):
    """The service's directories as it last started with them and passed its checks (record_seen), each {path, owner,
    group, mode, tree, source}."""
    directories = (kept_record(name, OWNED_DIRS, root) or {}).get("directories")
    entries = []
    for path, recorded in sorted(directories.items()) if isinstance(directories, dict) else []:
        good = recorded.get("good") if isinstance(recorded, dict) else None
        if isinstance(good, dict) and isinstance(good.get("at"), (int, float)):
            entries.append(dict(_values_of(good), path=path, tree=good.get("tree") is True,
                                source="seen while healthy at %s" % time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(good["at"]))))
    return entries


def _values_of(recorded):
    return dict((key, recorded.get(key)) for key in _VALUES)


def on_disk(path):
    """A directory's owner, group and mode as they are, whether everything below has its owner and group (``tree``)
    and when its status last changed (``changed_at``, its ctime); None for anything but a directory, a link to one too
    (what a link leads to is not the service's directory)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return dict(owner=user_name(st.st_uid), group=group_name(st.st_gid), mode="%04o" % stat.S_IMODE(st.st_mode),
                tree=_one_owner_below(path, st), changed_at=st.st_ctime)


def _one_owner_below(top, top_stat):
    """Whether everything below ``top`` has its owner and group, walked without following a link and within its
    filesystem, at most MAX_TREE_ENTRIES entries: what cannot be told (too many, unreadable, another filesystem mounted
    below) is no tree."""
    pending, count = [top], 0
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    count += 1
                    if count > MAX_TREE_ENTRIES:
                        return False
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_uid, st.st_gid, st.st_dev) != (top_stat.st_uid, top_stat.st_gid, top_stat.st_dev):
                        return False
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(entry.path)
        except OSError:
            return False
    return True


def primary_group(user):
    """The name of the primary group of an account (a name or a uid), or None when the host knows no such account."""
    try:
        account = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        return None
    return group_name(account.pw_gid)


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _normal(path):
    """An absolute path, normalised, /var/run written /run (its link on every Debian host); None for a relative one."""
    if not path or not path.startswith("/"):
        return None
    path = os.path.normpath(path)
    return RUN + path[len("/var/run"):] if path.startswith("/var/run/") else path


def _shared(path):
    return path.count("/") < 2 or path in (RUN, STATE, CACHE, LOGS) or path in SHARED_DIRECTORIES
