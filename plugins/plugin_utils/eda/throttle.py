# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an event source puts on the queue for the heal requests of one body or round: a job per host, or - when the
same service is alerted on many hosts within the window (the inventory's ``autoheal_fleet_min_hosts`` and
``autoheal_fleet_window``, as the heal jobs read them) - one fleet event for all of them, and nothing more about that
service until the window ends (fleet/alerts.py, in the memory the jobs share)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import HealRequest
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.alerts import Alerts
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetSettings
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory


@dataclass(frozen=True)
class FleetRequest:
    """Heal this declared service on these inventory hosts, in one job: many hosts alerted about it at once."""

    hosts: tuple[str, ...]
    service: str
    source: str
    reason: str

    def event(self) -> dict[str, Any]:
        """``meta.hosts`` limits a run_playbook action to exactly these hosts (each an inventory host, named literally)."""
        return {"sentinel": {"hosts": list(self.hosts), "service": self.service, "source": self.source, "reason": self.reason},
                "meta": {"hosts": ",".join(self.hosts)}}


@dataclass(frozen=True)
class Admitted:
    """The events to put on the queue, and what the throttle kept back (a line each, for the log)."""

    events: list[dict[str, Any]]
    absorbed: list[str]
    fleets: list[FleetRequest]


def fleet_settings(fleet: Fleet) -> FleetSettings:
    """The thresholds the inventory gives the heal jobs, read once when a source starts (a bad value refused, named)."""
    return FleetSettings.from_options(fleet.heal_vars, prefix="autoheal_")


def admit(requests: Sequence[HealRequest], memory: Memory, settings: FleetSettings, *, at: float) -> Admitted:
    """The events of ``requests`` once the memory's throttle has seen them."""
    window = settings.window
    verdicts = Alerts(memory.database).admit_alerts([(request.host, request.service) for request in requests], at=at,
                                                    min_hosts=settings.min_hosts, window=window)
    events: list[dict[str, Any]] = []
    absorbed: list[str] = []
    fleets: list[FleetRequest] = []
    for verdict in verdicts:
        mine = [request for request in requests if request.service == verdict.service]
        if verdict.kind == "heal":
            events += [request.event() for request in mine]
        elif verdict.kind == "fleet":
            fleets.append(FleetRequest(hosts=verdict.hosts, service=verdict.service, source=mine[0].source,
                                       reason=f"{verdict.service} alerted on {len(verdict.hosts)} hosts within {window:g} s: one fleet job"))
            events.append(fleets[-1].event())
        else:
            absorbed.append(f"{verdict.service} on {', '.join(verdict.hosts)}: the fleet job {verdict.fleet_id} of this window covers it "
                            "(no job of its own)")
    return Admitted(events=events, absorbed=absorbed, fleets=fleets)
