# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance marker a person logged in on a host leaves for sentinel.heal (standard library only).

``/etc/sentinel-heal/maintenance``, owned by root, holds optional ``key: value`` lines::

    reason: swapping the disk
    services: nginx, redis        (none: every service of the host)
    until: 2026-11-24T18:00+01:00 (ISO 8601; without an offset, the host's local time; none: until removed)
    by: alice

An empty file means the whole host, until it is removed. A marker that cannot be read as written is reported with
its problem: the controller then keeps its hands off and warns, it never ignores the marker.
"""

from __future__ import annotations

import datetime
import os
import re
import stat

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment

MARKER = "/etc/sentinel-heal/maintenance"
KEYS = ("reason", "services", "until", "by")
MAX_BYTES = 4096


def read_marker(path: str | None = None) -> dict | None:
    """None when there is no marker (at ``path``, by default MARKER); else its ``path``, ``reason``, ``services``,
    ``until`` (seconds since the epoch, or None), ``by`` and ``problem`` (None when it reads as written)."""
    path = MARKER if path is None else path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _marker(path, problem="cannot be read: %s" % exc.strerror)
    if not stat.S_ISREG(info.st_mode):
        return _marker(path, problem="is not a regular file")
    if info.st_uid != 0:
        return _marker(path, problem="is not owned by root (uid %d)" % info.st_uid)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        return _marker(path, problem="cannot be read: %s" % exc.strerror)
    if len(raw) > MAX_BYTES:
        return _marker(path, problem="is longer than %d bytes" % MAX_BYTES)
    marker = _marker(path)
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in KEYS:
            marker["problem"] = "line %d, %r, is not 'KEY: VALUE' with a KEY of %s" % (number, line[:80], ", ".join(KEYS))
            return marker
        if key == "services":
            marker["services"] = [name for name in re.split(r"[\s,]+", value) if name]
        elif key == "until":
            try:
                marker["until"] = datetime.datetime.fromisoformat(value).timestamp()
            except ValueError:
                marker["problem"] = "line %d: until %r is not an ISO 8601 time such as 2026-11-24T18:00+01:00" % (number, value[:40])
                return marker
        else:
            marker[key] = value[:200]
    return marker


def _marker(path: str, problem: str | None = None) -> dict:
    return {"path": path, "reason": "", "services": [], "until": None, "by": "", "problem": problem}


def marker_holds(marker: dict | None, service: str, now: float) -> str | None:
    """What the maintenance marker a person left on the host (``read_marker``, or service_check's
    ``facts.maintenance``) says about the service, or None when it does not cover it (no marker, another service, or
    its ``until`` has passed). A marker that cannot be read as written covers everything: hands off until a person
    fixes or removes it. The controller and the executor on the host both ask this."""
    if not marker:
        return None
    path = marker.get("path", "the maintenance marker")
    if marker.get("problem"):
        return "held back: the host's maintenance marker %s %s; hands off until a person fixes or removes it" % (path, marker["problem"])
    services = marker.get("services") or []
    until = marker.get("until")
    if (services and service not in services) or (until is not None and until <= now):
        return None
    who = " by %s" % marker["by"] if marker.get("by") else ""
    when = " until %s" % moment(until, now) if until is not None else " until it is removed"
    why = ": %s" % marker["reason"] if marker.get("reason") else ""
    return "in maintenance%s%s (%s)%s" % (who, when, path, why)
