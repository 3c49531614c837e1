# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A service's logs and when it last started (standard library only): the tail of each log, read without following a
link, and the lines of it written since the service's present run (or its failure) began."""

from __future__ import annotations

import calendar
import errno
import os
import re
import time

from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import NoFollowRefused, open_file
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

LOG_LIMIT = 4000
# how much of the end of a log is read (and of an HTTP check's body)
LOG_READ_BYTES = 65536


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


def last_start(unit, spec, timestamp="InactiveExitTimestamp"):
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


def started(units, spec):
    """When the service last became active, started: the earliest of the units that run it (a unit that fronts several),
    else its pid file's time; None when that is not known of every one. What its directories were then it started
    with, a runtime directory its start made included."""
    starts = [last_start(unit, spec, "ActiveEnterTimestamp") for unit in units or [None]]
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
