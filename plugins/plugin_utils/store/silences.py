"""Silences: a person says "hands off these hosts (and this service) until then", kept in memory so every job, fork and
AWX node sees it. While one holds, checks run and are reported; nothing is planned, approved or executed."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

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
        until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.until))
        return f"silenced by {self.set_by} until {until}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
