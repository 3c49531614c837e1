"""Fleet incidents: when many hosts fail the same way at once, the cause is one, and it is rarely on any of them.

A failure (the same service, class and error text once abstracted: :func:`signature_of`) seen on at least
``min_hosts`` hosts within ``window`` seconds - whatever runs saw them: one play over the fleet, or EDA jobs of one
host each - or on ``min_percent`` of the hosts of one run (from MIN_SHARED_HOSTS hosts on), is one fleet incident:
recorded once in memory with its hosts, when it was first and last seen, and what their evidence has in common (the
same error line, address or name, package change, changed file, full filesystem). While it is open, that failure is
not healed host by host: a plan verified before (memory's, a runbook's) runs on one host first, the incident's canary,
and on the others only once it verified there; a new plan (the LLM's, the generic fallback) runs nowhere. It closes
once every host of it was seen without that failure.

The forks of one run meet in memory: each failing host writes what it saw, then waits until every host of its batch
wrote, or none did for GATHER_GAP_S (never longer than GATHER_WINDOW_S), before it counts, so the hosts that fail at
the same moment are counted together. A run of one host counts at once (what earlier runs saw is already written).
Healthy hosts write nothing but the end of the open incidents they were part of.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, normalize_error_text
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

# two hosts failing alike may be chance; from three on, a share of the run's hosts is a pattern
MIN_SHARED_HOSTS = 3
# A failing host's check ends after its evidence is read: by the time it writes, the hosts that fail with it are writing too
GATHER_GAP_S = 0.5
GATHER_WINDOW_S = 5.0
# what a sighting keeps of a host's evidence to compare with the others', and how much of it an incident says
MAX_CLUES = 40
MAX_LOG_LINES_COMPARED = 5
MAX_COMMON_SAID = 5
# an address (IPv4 with an optional port, or a URL's host and port) or a name a resolver was asked for
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b|\b[a-z][a-z0-9+.-]*://[^\s/\"'<>]+", re.IGNORECASE)
_LOOPBACK = re.compile(r"(?:^|//)(?:127\.\d+\.\d+\.\d+|localhost|\[::1\])(?::|/|$)", re.IGNORECASE)
# a log line that says something went wrong (the lines every start writes are no clue)
_SAYS_WHAT_FAILED = re.compile(r"\b(?:emerg|alert|crit|error|err|fatal|fail\w*|refused|denied|unable|cannot|can't|timed? ?out|unreachable|"
                               r"not found|no such|unknown|invalid|expired|read-only|no space)\b", re.IGNORECASE)
_RESOLVED_NAME = re.compile(r"(?:resolve|host not found[^\"']*|lookup|unknown host)\W+\"?([A-Za-z0-9][A-Za-z0-9.-]*\.[A-Za-z]{2,})", re.IGNORECASE)


FLEET_RANGES = {"fleet_min_hosts": (0, 100_000), "fleet_min_percent": (0, 100), "fleet_window": (0, 86400)}


@dataclass(frozen=True)
class FleetSettings:
    """When the same failure on many hosts is one fleet incident (per host, so per group through group_vars)."""

    min_hosts: int = 5
    min_percent: int = 50
    window: int = 600

    @classmethod
    def from_options(cls, args: Mapping[str, Any], prefix: str = "") -> FleetSettings:
        """The settings of a heal task's options, or (``prefix`` ``autoheal_``) of the inventory's role variables as an
        event source reads them, untyped; a value that is not a whole number in its range is refused, naming it."""
        values: dict[str, int] = {}
        for option, (low, high) in FLEET_RANGES.items():
            name = prefix + option
            given = args.get(name, getattr(cls, option.removeprefix("fleet_")))
            try:
                values[option] = int(given)
            except (TypeError, ValueError):
                values[option] = low - 1
            if not low <= values[option] <= high or str(values[option]) != str(given).strip():
                raise ConfigError(f"{name} must be a whole number from {low} to {high}", field=name, value=given,
                                  hint="0 turns that rule off; both thresholds off, no failure is ever a fleet incident")
        return cls(min_hosts=values["fleet_min_hosts"], min_percent=values["fleet_min_percent"], window=values["fleet_window"])

    @property
    def off(self) -> bool:
        return self.min_hosts == 0 and self.min_percent == 0

    def crossed(self, *, hosts_in_window: int, hosts_in_run: int, run_hosts: int) -> bool:
        """Whether that many hosts failing alike (within the window; in this run of ``run_hosts`` hosts) are one incident."""
        if self.min_hosts and hosts_in_window >= self.min_hosts:
            return True
        return bool(self.min_percent) and hosts_in_run >= MIN_SHARED_HOSTS and hosts_in_run * 100 >= self.min_percent * run_hosts


@dataclass(frozen=True)
class Clue:
    """One thing a host's evidence says that another's may say too: its kind, what compares (``key``) and how to say it."""

    kind: str
    key: str
    text: str


@dataclass(frozen=True)
class Sighting:
    """A failure as one host saw it in one run."""

    run_id: str
    host: str
    service: str
    signature: str
    failure_class: str
    summary: str
    clues: tuple[Clue, ...]
    seen_at: float

    def to_row(self) -> tuple[Any, ...]:
        """The sightings table's row, in the order of record_sightings' columns."""
        return (self.run_id, self.host, self.service, self.signature, self.failure_class, self.summary,
                json.dumps([[clue.kind, clue.key, clue.text] for clue in self.clues]), self.seen_at)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Sighting:
        return cls(run_id=row["run_id"], host=row["host"], service=row["service"], signature=row["signature"], failure_class=row["failure_class"],
                   summary=row["summary"], seen_at=float(row["seen_at"]), clues=tuple(Clue(*clue) for clue in json.loads(row["clues_json"])))


@dataclass(frozen=True)
class FleetIncident:
    """One failure on many hosts: which, where, when, and what their evidence has in common."""

    id: int
    signature: str
    service: str
    failure_class: str
    summary: str
    hosts: tuple[str, ...]
    first_seen: float
    last_seen: float
    common: tuple[str, ...] = ()
    closed_at: float | None = None
    cleared: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """The fleet incident in one sentence, as a person is paged with it."""
        hosts = ", ".join(self.hosts[:10]) + (f" and {len(self.hosts) - 10} more" if len(self.hosts) > 10 else "")
        spread = f"{self.last_seen - self.first_seen:.0f} s"
        common = "; ".join(self.common[:MAX_COMMON_SAID]) if self.common else "nothing their evidence shows"
        return (f"fleet incident {self.id}: {self.service} fails the same way on {len(self.hosts)} hosts within {spread} ({hosts}): "
                f"{self.summary}; in common: {common}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "service": self.service, "failure_class": self.failure_class, "summary": self.summary, "hosts": list(self.hosts),
                "first_seen": self.first_seen, "last_seen": self.last_seen, "common": list(self.common), "closed_at": self.closed_at,
                "cleared": list(self.cleared), "signature": self.signature}


def signature_of(failure: Failure) -> str:
    """What two hosts' failures share when they are the same failure: the service, the class and the error text once
    abstracted (the fingerprint without the kind of host: a fleet of mixed releases fails alike too)."""
    return "\x1f".join((failure.service, failure.failure_class, failure.normalized_error))


def sighting_of(failure: Failure, *, run_id: str, at: float) -> Sighting:
    return Sighting(run_id=run_id, host=failure.host, service=failure.service, signature=signature_of(failure), failure_class=failure.failure_class,
                    summary=failure.summary, clues=tuple(clues_of(failure))[:MAX_CLUES], seen_at=at)


def clues_of(failure: Failure) -> Iterable[Clue]:
    """What in a failure's evidence another host's may share: its error lines (the check's words, the journal's cause,
    the last lines of its logs that say something failed), the addresses and names they mention, what changed since it last worked (package
    changes, changed files) and the filesystems of its paths that are full."""
    evidence = failure.evidence
    lines = [part.strip() for part in failure.summary.split("; ") if part.strip()]
    lines += [failure.cause] if failure.cause else []
    for text in (evidence.get("logs") or {}).values():
        logged = text.splitlines() if isinstance(text, str) else [str(line) for line in text or []]
        lines += [line.strip() for line in logged if _SAYS_WHAT_FAILED.search(line)][-MAX_LOG_LINES_COMPARED:]
    seen: set[tuple[str, str]] = set()
    for line in lines:
        yield from _once(seen, Clue("line", normalize_error_text(line), f"the same error line {line!r}"))
        for address in _ADDRESS.findall(line):
            if not _LOOPBACK.search(address):  # every host has its own: no shared cause
                yield from _once(seen, Clue("address", address.lower(), f"the same address {address}"))
        for name in _RESOLVED_NAME.findall(line):
            yield from _once(seen, Clue("address", name.lower(), f"the same name {name}"))
    changes = evidence.get("changes") or {}
    for change in changes.get("packages") or []:
        versions = " -> ".join(str(version) for version in (change.get("before"), change.get("after")) if version)
        said = f"package {change.get('package')} {change.get('action')} {versions}".strip()
        yield from _once(seen, Clue("package", said, f"the same package change ({said})"))
    for change in changes.get("files") or []:
        said = f"{change.get('path')} {change.get('change')}"
        # the same change is the same diff (a bad edit pushed everywhere); another edit of the same file is not
        diff = hashlib.sha256(str(change.get("diff") or "").encode()).hexdigest()[:16]
        yield from _once(seen, Clue("file", f"{said} {diff}", f"the same change of {change.get('path')} ({change.get('change')})"))
    for usage in evidence.get("disk") or []:
        if usage.get("full") or usage.get("inodes_exhausted"):
            what = "space" if usage.get("full") else "inodes"
            yield from _once(seen, Clue("disk", f"{usage.get('path')} {what}", f"the same full filesystem ({usage.get('path')}: no {what} left)"))


def _once(seen: set[tuple[str, str]], clue: Clue) -> Iterable[Clue]:
    if (clue.kind, clue.key) not in seen:
        seen.add((clue.kind, clue.key))
        yield clue


def common_to(sightings: Sequence[Sighting]) -> tuple[str, ...]:
    """What every host's sighting shows (the latest of each host), said as the first host said it: addresses and
    package changes first, since a shared cause is most often one of them."""
    latest: dict[str, Sighting] = {}
    for sighting in sorted(sightings, key=lambda seen: seen.seen_at):
        latest[sighting.host] = sighting
    if len(latest) < 2:
        return ()
    first, *others = latest.values()
    shared = [clue for clue in first.clues if all(any(c.kind == clue.kind and c.key == clue.key for c in other.clues) for other in others)]
    order = {"address": 0, "package": 1, "file": 2, "disk": 3, "line": 4}
    return tuple(clue.text for clue in sorted(shared, key=lambda clue: order.get(clue.kind, len(order))))


class SightingStore(Protocol):
    """What a fork needs of the memory to meet the others of its run (FleetIncidents)."""

    def report_check(self, host: str, sightings: Sequence[Sighting], clear: Iterable[str], *, at: float) -> list[FleetIncident]: ...

    def run_hosts_sighted(self, run_id: str) -> int: ...

    def fleet_incident_of(self, sighting: Sighting, settings: FleetSettings, *, run_hosts: int) -> FleetIncident | None: ...


@dataclass(frozen=True)
class FleetView:
    """What a host's check comes to for fleet incidents: the one each failing service is part of, and those that closed."""

    incidents: Mapping[str, FleetIncident] = field(default_factory=dict)
    closed: tuple[FleetIncident, ...] = ()


def counted(failures: Sequence[Failure], silenced: Callable[[Failure], object | None]) -> list[Failure]:
    """What of a host's failures counts toward fleet incidents: not a unit a person masked, nor a service a person
    silenced (what ``silenced`` says holds it) - their decisions are theirs, not a fleet's failure."""
    return [failure for failure in failures if failure.masked_unit is None and silenced(failure) is None]


def see(store: SightingStore, host: str, failures: Sequence[Failure], clear: Iterable[str], settings: FleetSettings, *, run_id: str,
        run_hosts: int, batch_hosts: int, at: float, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep) -> FleetView:
    """Report a failing host's check (its ``failures``, and the services it saw ``clear``), meet the other failing
    hosts of its batch (``batch_hosts`` hosts run now), and tell which fleet incident each failure is part of."""
    sightings = [] if settings.off else [sighting_of(failure, run_id=run_id, at=at) for failure in failures]
    closed = tuple(store.report_check(host, sightings, clear, at=at))
    if not sightings:
        return FleetView(closed=closed)
    gather(lambda: store.run_hosts_sighted(run_id), run_hosts=batch_hosts, clock=clock, sleep=sleep)
    found = {sighting.service: store.fleet_incident_of(sighting, settings, run_hosts=run_hosts) for sighting in sightings}
    return FleetView(incidents={service: incident for service, incident in found.items() if incident is not None}, closed=closed)


def gather(written: Callable[[], int], *, run_hosts: int, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep, gap: float = GATHER_GAP_S, window: float = GATHER_WINDOW_S) -> None:
    """Wait for the other hosts of this run that fail now: until ``written()`` (the hosts of the run that wrote their
    sightings) reaches ``run_hosts`` (every host of the batch failed), or stops growing for ``gap`` seconds, and never
    longer than ``window``."""
    if run_hosts <= 1:
        return
    began = last_change = clock()
    count = written()
    while count < run_hosts and clock() - last_change < gap and clock() - began < window:
        sleep(min(0.2, gap))
        now_written = written()
        if now_written != count:
            count, last_change = now_written, clock()


def record_sightings(db: Database, sightings: Sequence[Sighting]) -> None:
    """Inside a write transaction: what this host saw in this run (a second sighting of the run replaces the first)."""
    for sighting in sightings:
        db.execute("""INSERT INTO sightings (run_id, host, service, signature, failure_class, summary, clues_json, seen_at)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                      ON CONFLICT (run_id, host, service) DO UPDATE SET signature = excluded.signature, failure_class = excluded.failure_class,
                      summary = excluded.summary, clues_json = excluded.clues_json, seen_at = excluded.seen_at""", sighting.to_row())


def join_or_open(db: Database, sighting: Sighting, settings: FleetSettings, *, run_hosts: int) -> FleetIncident | None:
    """Inside a write transaction, after the run's sightings were gathered: the open fleet incident of this host's
    failure, with this host in it; or a new one when the failure now crosses the settings' thresholds; or None."""
    open_row = db.execute("SELECT * FROM fleet_incidents WHERE signature = ? AND closed_at IS NULL", (sighting.signature,)).fetchone()
    since = sighting.seen_at - settings.window
    seen = [Sighting.from_row(row) for row in db.execute("SELECT * FROM sightings WHERE signature = ? AND seen_at >= ? ORDER BY seen_at",
                                                         (sighting.signature, since))]
    if open_row is None:
        in_run = {seen_here.host for seen_here in seen if seen_here.run_id == sighting.run_id}
        if settings.off or not settings.crossed(hosts_in_window=len({seen_here.host for seen_here in seen}), hosts_in_run=len(in_run),
                                                run_hosts=run_hosts):
            return None
        first_seen = min(seen_here.seen_at for seen_here in seen)
        incident_id = db.execute("""INSERT INTO fleet_incidents (signature, service, failure_class, summary, common_json, first_seen, last_seen,
                                    opened_run) VALUES (?, ?, ?, ?, '[]', ?, ?, ?) RETURNING id""",
                                 (sighting.signature, sighting.service, sighting.failure_class, sighting.summary, first_seen, sighting.seen_at,
                                  sighting.run_id)).fetchone()[0]
        members = {seen_here.host: seen_here.seen_at for seen_here in seen}
    else:
        incident_id = open_row["id"]
        members = {sighting.host: sighting.seen_at}
    for host, seen_at in members.items():
        db.execute("""INSERT INTO fleet_incident_hosts (incident_id, host, seen_at) VALUES (?, ?, ?)
                      ON CONFLICT (incident_id, host) DO UPDATE SET seen_at = excluded.seen_at, cleared_at = NULL""", (incident_id, host, seen_at))
    hosts = [row["host"] for row in db.execute("SELECT host FROM fleet_incident_hosts WHERE incident_id = ?", (incident_id,))]
    common = common_to([seen_here for seen_here in seen if seen_here.host in hosts])
    db.execute("UPDATE fleet_incidents SET last_seen = ?, common_json = ? WHERE id = ?",
               (max(sighting.seen_at, *(seen_here.seen_at for seen_here in seen)), json.dumps(list(common)), incident_id))
    return _incident(db, incident_id)


def clear_host(db: Database, host: str, services: Iterable[str], *, at: float) -> list[FleetIncident]:
    """Inside a write transaction: ``host`` was seen without the failure of the open fleet incidents of ``services``;
    those whose every host is now clear close. The ones closed."""
    services = list(services)
    if not services:
        return []
    marks = ", ".join("?" for _service in services)
    opened = [row["id"] for row in db.execute(f"""SELECT fleet_incidents.id FROM fleet_incidents JOIN fleet_incident_hosts
                                                  ON fleet_incident_hosts.incident_id = fleet_incidents.id
                                                  WHERE closed_at IS NULL AND host = ? AND cleared_at IS NULL AND service IN ({marks})""",
                                              (host, *services))]
    closed = []
    for incident_id in opened:
        db.execute("UPDATE fleet_incident_hosts SET cleared_at = ? WHERE incident_id = ? AND host = ?", (at, incident_id, host))
        if db.execute("SELECT 1 FROM fleet_incident_hosts WHERE incident_id = ? AND cleared_at IS NULL", (incident_id,)).fetchone() is None:
            db.execute("UPDATE fleet_incidents SET closed_at = ? WHERE id = ?", (at, incident_id))
            closed.append(_incident(db, incident_id))
    return closed


def fleet_incidents(db: Database, *, open_only: bool = False, limit: int = 50) -> list[FleetIncident]:
    """The latest fleet incidents, the newest first (only the open ones, with ``open_only``)."""
    where = "WHERE closed_at IS NULL " if open_only else ""
    rows = db.execute(f"SELECT id FROM fleet_incidents {where}ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [_incident(db, row["id"]) for row in rows]


def any_open(db: Database) -> bool:
    return db.execute("SELECT 1 FROM fleet_incidents WHERE closed_at IS NULL LIMIT 1").fetchone() is not None


def _incident(db: Database, incident_id: int) -> FleetIncident:
    row = db.execute("SELECT * FROM fleet_incidents WHERE id = ?", (incident_id,)).fetchone()
    members = db.execute("SELECT host, cleared_at FROM fleet_incident_hosts WHERE incident_id = ? ORDER BY seen_at, host", (incident_id,)).fetchall()
    return FleetIncident(id=int(row["id"]), signature=row["signature"], service=row["service"], failure_class=row["failure_class"],
                         summary=row["summary"], hosts=tuple(member["host"] for member in members), first_seen=float(row["first_seen"]),
                         last_seen=float(row["last_seen"]), common=tuple(json.loads(row["common_json"])),
                         closed_at=None if row["closed_at"] is None else float(row["closed_at"]),
                         cleared=tuple(member["host"] for member in members if member["cleared_at"] is not None))


class FleetIncidents:
    """The sightings and fleet incidents tables over the Database port: what each host saw fail, and the fleet
    incidents it makes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def report_check(self, host: str, sightings: Sequence[Sighting], clear: Iterable[str], *, at: float) -> list[FleetIncident]:
        """What a failing host's check saw, for the other hosts of its run and later runs to count: the failures it saw
        (``sightings``), and the services it saw without the failure of their open fleet incidents (``clear``); the
        fleet incidents that closed with it."""
        with Transaction(self._db) as db:
            record_sightings(db, sightings)
            return clear_host(db, host, clear, at=at)

    def run_hosts_sighted(self, run_id: str) -> int:
        """How many hosts of the run wrote what they saw fail."""
        return int(self._db.execute("SELECT count(DISTINCT host) FROM sightings WHERE run_id = ?", (run_id,)).fetchone()[0])

    def fleet_incident_of(self, sighting: Sighting, settings: FleetSettings, *, run_hosts: int) -> FleetIncident | None:
        """The fleet incident this host's failure is part of (opened now when it crosses the thresholds), or None."""
        with Transaction(self._db) as db:
            return join_or_open(db, sighting, settings, run_hosts=run_hosts)

    def clear_fleet_incidents(self, host: str, services: Iterable[str], *, at: float) -> list[FleetIncident]:
        """``host`` was seen without the failure of ``services``' open fleet incidents (healed, or checked healthy); the
        incidents that closed with it. Nothing is written while no fleet incident is open."""
        if not any_open(self._db):
            return []
        with Transaction(self._db) as db:
            return clear_host(db, host, services, at=at)

    def fleet_incidents(self, *, open_only: bool = False, limit: int = 50) -> list[FleetIncident]:
        return fleet_incidents(self._db, open_only=open_only, limit=limit)
