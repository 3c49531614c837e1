"""Alerts of many hosts at once become one heal job, not one per host: the event sources' side of fleet incidents.

Every alert an event source accepts is written to the memory. When the alerts about one service name at least
``min_hosts`` hosts within ``window`` seconds, the source puts one fleet event on the queue for all of them (one heal
job, whose hosts then meet as one run and make one fleet incident), and for the rest of the window it absorbs further
alerts about that service (logged, no event). The throttle is the memory's, so a rulebook restarted within the
window goes on absorbing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction


@dataclass(frozen=True)
class AlertVerdict:
    """What becomes of the alerts about one service in one body: ``heal`` (each host its own job), ``fleet`` (one job
    for ``hosts``, the service's alerted hosts within the window) or ``absorbed`` (a fleet job of the window covers them)."""

    service: str
    kind: str
    hosts: tuple[str, ...]
    fleet_id: int | None = None
    since: float = 0.0


class Alerts:
    """The alerts and alert_fleets tables over the Database port."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def admit_alerts(self, alerts: Sequence[tuple[str, str]], *, at: float, min_hosts: int, window: float) -> list[AlertVerdict]:
        """Record the alerts (host, service) an event source accepted in one body; what becomes of each service's: a
        job per host, one fleet job, or nothing (a fleet job of the window covers them)."""
        with Transaction(self._db) as db:
            return admit(db, alerts, at=at, min_hosts=min_hosts, window=window)


def admit(db: Database, alerts: Sequence[tuple[str, str]], *, at: float, min_hosts: int, window: float) -> list[AlertVerdict]:
    """Inside a write transaction: record the alerts (host, service) of one body and say what becomes of each service's."""
    verdicts = []
    for service in dict.fromkeys(service for _host, service in alerts):
        hosts = tuple(dict.fromkeys(host for host, named in alerts if named == service))
        for host in hosts:
            db.execute("INSERT INTO alerts (host, service, at) VALUES (?, ?, ?)", (host, service, at))
        covering = db.execute("SELECT id, hosts_json, opened_at FROM alert_fleets WHERE service = ? AND until > ? ORDER BY id DESC LIMIT 1",
                              (service, at)).fetchone()
        if covering is not None:
            known = json.loads(covering["hosts_json"])
            db.execute("UPDATE alert_fleets SET hosts_json = ? WHERE id = ?", (json.dumps(sorted({*known, *hosts})), covering["id"]))
            verdicts.append(AlertVerdict(service, "absorbed", hosts, int(covering["id"]), float(covering["opened_at"])))
            continue
        since = at - window
        rows = db.execute("SELECT host, min(at) AS first FROM alerts WHERE service = ? AND at >= ? GROUP BY host ORDER BY first, host",
                          (service, since))
        alerted = tuple(row["host"] for row in rows)
        if not min_hosts or len(alerted) < min_hosts:
            verdicts.append(AlertVerdict(service, "heal", hosts))
            continue
        fleet_id = db.execute("INSERT INTO alert_fleets (service, hosts_json, opened_at, until) VALUES (?, ?, ?, ?) RETURNING id",
                              (service, json.dumps(sorted(alerted)), at, at + window)).fetchone()[0]
        verdicts.append(AlertVerdict(service, "fleet", alerted, int(fleet_id), since))
    return verdicts
