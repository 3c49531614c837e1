"""Silences: a person says "hands off these hosts (and this service) until then", kept in memory so every job, fork and
AWX node sees it. While one holds, checks run and are reported; nothing is planned, approved or executed.

A person says the same with a maintenance marker left on the host (read by service_check) and with maintenance windows
declared in the inventory; both are judged here too."""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import marker_holds
from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Hold
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

ALL_SERVICES = "*"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SILENCE_S = 90 * 86400


@dataclass(frozen=True)
class Silence:
    """Hands off the hosts (a host or group name, or a shell-style pattern of them) and the service (``*``: all)."""

    id: int
    hosts: str
    service: str
    reason: str
    set_by: str
    set_at: float
    until: float
    lifted_at: float | None = None
    lifted_by: str | None = None

    def covers(self, host: str, groups: Iterable[str], service: str) -> bool:
        names = [host, *groups]
        return any(fnmatch.fnmatchcase(name, self.hosts) for name in names) and fnmatch.fnmatchcase(service, self.service)

    def describe(self) -> str:
        return f"silenced by {self.set_by} until {moment(self.until)}: {self.reason}"

    def hold(self) -> Hold:
        return Hold("silence", f"silenced by {self.set_by} (silence {self.id}): {self.reason}",
                    f"sentinel.heal.silence state=absent silence_id={self.id} decided_by=YOU", until=self.until)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Silences:
    """The silences table over the Database port."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def silence(self, *, hosts: str, service: str, until: float, reason: str, by: str, at: float) -> Silence:
        """Hands off ``hosts`` (a name or pattern of hosts or groups) and ``service`` (``*``: all) until then."""
        with Transaction(self._db) as db:
            silence_id = db.execute("""INSERT INTO silences (hosts, service, reason, set_by, set_at, until) VALUES (?, ?, ?, ?, ?, ?)
                                       RETURNING id""", (hosts, service, reason, by, at, until)).fetchone()[0]
        return Silence(id=int(silence_id), hosts=hosts, service=service, reason=reason, set_by=by, set_at=at, until=until)

    def unsilence(self, *, by: str, at: float, silence_id: int | None = None, hosts: str | None = None,
                  service: str | None = None, dry_run: bool = False) -> list[Silence]:
        """Lift the silences in force with that id, or for those hosts (and service); the ones lifted. With ``dry_run``,
        the ones it would lift, as they are."""
        lifted = [silence for silence in self.silences(at=at) if silence.id == silence_id or (
            silence_id is None and silence.hosts == hosts and (service is None or silence.service == service))]
        if dry_run:
            return lifted
        with Transaction(self._db) as db:
            for silence in lifted:
                db.execute("UPDATE silences SET lifted_at = ?, lifted_by = ? WHERE id = ? AND lifted_at IS NULL", (at, by, silence.id))
        return [dataclasses.replace(silence, lifted_at=at, lifted_by=by) for silence in lifted]

    def silences(self, *, at: float) -> list[Silence]:
        """The silences in force at that time, the one that ends last first."""
        rows = self._db.execute("SELECT * FROM silences WHERE lifted_at IS NULL AND until > ? ORDER BY until DESC, id DESC", (at,))
        return [Silence(**dict(row)) for row in rows]

    def silence_over(self, host: str, groups: Iterable[str], service: str, *, at: float) -> Silence | None:
        """The silence in force over this service on this host (the one that ends last), or None."""
        groups = tuple(groups)
        return next((silence for silence in self.silences(at=at) if silence.covers(host, groups, service)), None)


def silence_seconds(duration: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` as seconds; a clear error otherwise."""
    match = _DURATION.match(str(duration))
    if not match:
        raise ConfigError("not a duration", field="duration", value=duration, hint="a number with s, m, h or d: 90s, 30m, 2h, 1d")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not 0 < seconds <= MAX_SILENCE_S:
        raise ConfigError("a silence lasts more than nothing and at most 90 days", field="duration", value=duration,
                          hint="set a shorter one and renew it, or mask the unit if the service must never run")
    return seconds


def hands_off(silence: Silence | None, marker: Mapping[str, Any] | None, windows: Iterable[MaintenanceWindow], service: str,
              now: float, host: str) -> Hold | None:
    """What holds the loop's hands off the service now - a person's silence in memory, the host's maintenance marker or
    a declared window (``host`` is where the marker lies) - with until when and how to lift it, or None when nothing
    does. The heal loop and approvals both ask this."""
    if silence is not None:
        return silence.hold()
    in_maintenance = marker_holds(marker, service, now)
    if marker and in_maintenance is not None:
        path = marker.get("path") or "the maintenance marker"
        # a marker that does not read as written holds until a person fixes it, whatever its until says
        until = None if marker.get("problem") else marker.get("until")
        return Hold("maintenance_marker", in_maintenance, f"ansible {host} -b -m ansible.builtin.file "
                    f"-a 'path={path} state=absent' (a person's marker: remove it only once the work on the host is done)",
                    until=until, ends="until the marker is removed")
    window = next((window for window in windows if window.covers(service, now)), None)
    if window is None:
        return None
    return Hold("maintenance_window", window.describe(), f"take the window {window.name!r} out of autoheal_maintenance_windows "
                "(the heal's maintenance_windows) in the inventory", until=window.ends_after(now))


_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_WINDOW_KEYS = frozenset({"name", "days", "start", "end", "timezone", "from", "until", "services"})


@dataclass(frozen=True)
class MaintenanceWindow:
    """A declared window (the inventory's ``autoheal_maintenance_windows``): recurring (``days``, ``start``-``end`` in
    ``timezone``; an ``end`` before ``start`` runs past midnight) or one-off (``from``-``until``), for ``services``
    (all when empty)."""

    name: str
    services: tuple[str, ...] = ()
    days: tuple[int, ...] = tuple(range(7))
    start: tuple[int, int] = (0, 0)
    end: tuple[int, int] = (0, 0)
    timezone: str = "UTC"
    begins: float | None = None
    ends: float | None = None

    def covers(self, service: str, now: float) -> bool:
        if self.services and service not in self.services:
            return False
        if self.begins is not None and self.ends is not None:
            return self.begins <= now < self.ends
        local = datetime.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(self.timezone))
        minute, start, end = local.hour * 60 + local.minute, self.start[0] * 60 + self.start[1], self.end[0] * 60 + self.end[1]
        if start < end:
            return local.weekday() in self.days and start <= minute < end
        # past midnight: the evening part on a listed day, the morning part on the day after one
        return (local.weekday() in self.days and minute >= start) or ((local.weekday() - 1) % 7 in self.days and minute < end)

    def ends_after(self, now: float) -> float:
        """When the window that covers ``now`` ends."""
        if self.ends is not None:
            return self.ends
        zone = zoneinfo.ZoneInfo(self.timezone)
        local = datetime.datetime.fromtimestamp(now, zone)
        end = local.replace(hour=self.end[0], minute=self.end[1], second=0, microsecond=0)
        # past midnight, the evening part ends the day after
        return (end if end > local else end + datetime.timedelta(days=1)).timestamp()

    def describe(self) -> str:
        if self.begins is not None and self.ends is not None:
            span = f"{_stamp(self.begins)} to {_stamp(self.ends)}"
        else:
            days = ",".join(_DAYS[day] for day in self.days) if len(self.days) < 7 else "daily"
            span = f"{days} {self.start[0]:02d}:{self.start[1]:02d}-{self.end[0]:02d}:{self.end[1]:02d} {self.timezone}"
        return f"in the maintenance window {self.name!r} ({span})"


def maintenance_windows(raw: Any, field: str = "autoheal_maintenance_windows") -> tuple[MaintenanceWindow, ...]:
    """The declared windows, checked: every error names the window, the key and the value."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise ConfigError("must be a list of windows", field=field, value=raw)
    return tuple(_window(entry, f"{field}[{index}]") for index, entry in enumerate(raw))


def _window(entry: Any, where: str) -> MaintenanceWindow:
    if not isinstance(entry, Mapping):
        raise ConfigError("a window is a mapping", field=where, value=entry)
    unknown = set(entry) - _WINDOW_KEYS
    if unknown:
        raise ConfigError("unknown keys in a window", field=where, value=sorted(unknown), hint=f"keys: {', '.join(sorted(_WINDOW_KEYS))}")
    name = str(entry.get("name") or where)
    services = tuple(str(service) for service in entry.get("services") or ())
    if "from" in entry or "until" in entry:
        begins, ends = (_instant(entry.get(key), f"{where}.{key}") for key in ("from", "until"))
        if ends <= begins:
            raise ConfigError("the window ends before it begins", field=f"{where}.until", value=entry.get("until"),
                              hint=f"after its from, {entry.get('from')}")
        return MaintenanceWindow(name=name, services=services, begins=begins, ends=ends)
    timezone = str(entry.get("timezone") or "UTC")
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError("not a time zone this controller knows", field=f"{where}.timezone", value=timezone,
                          hint="an IANA name such as Europe/Berlin or UTC") from exc
    days = entry.get("days") or list(_DAYS)
    if not isinstance(days, (list, tuple)) or any(str(day).lower()[:3] not in _DAYS for day in days):
        raise ConfigError("days are weekday names", field=f"{where}.days", value=days, hint="mon, tue, wed, thu, fri, sat, sun")
    start, end = (_clock(entry.get(key), f"{where}.{key}") for key in ("start", "end"))
    if start == end:
        raise ConfigError("a window that starts when it ends covers nothing", field=f"{where}.end", value=entry.get("end"))
    return MaintenanceWindow(name=name, services=services, days=tuple(sorted({_DAYS.index(str(day).lower()[:3]) for day in days})),
                             start=start, end=end, timezone=timezone)


def _clock(value: Any, field: str) -> tuple[int, int]:
    match = _CLOCK.match(str(value or ""))
    if not match:
        raise ConfigError("not a time of day", field=field, value=value, hint="HH:MM, such as 22:00")
    return int(match.group(1)), int(match.group(2))


def _instant(value: Any, field: str) -> float:
    try:
        moment = datetime.datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ConfigError("not an ISO 8601 time", field=field, value=value, hint="such as 2026-12-01T20:00+01:00") from exc
    if moment.tzinfo is None:
        raise ConfigError("a one-off window needs its UTC offset", field=field, value=value, hint="such as 2026-12-01T20:00+01:00")
    return moment.timestamp()


def _stamp(at: float) -> str:
    return moment(at)
