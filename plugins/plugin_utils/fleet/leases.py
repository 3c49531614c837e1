"""Leases: one row in memory per remediation running, shared by every fork and job of a state dir.

A lease says who runs what where: the caps of the blast radius count them, and a lease whose owner is gone (a job
killed mid-remediation) tells the next run what was interrupted. An owner is a process named by the controller it
runs on, its pid and its start time (pids are reused); on another controller (an execution node, a container of its
own) its heartbeat tells: the owner renews its lease while the remediation runs, and a lease not renewed for
``LEASE_GRACE_S`` has lost its job, as a Kubernetes lease has lost its holder. As a Kubernetes leader does, the holder
stops first: a job that cannot renew for ``LEASE_RENEW_DEADLINE_S``, or finds its lease taken back, stops its run before
another job may take the host up, so two jobs never remediate one service at once.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Hold, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.episodes import episode_row, insert_episode, json_text, plan_executed
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

# What a run cut off with its job had done on the host, told by whoever ran it (runner.steps_started reads
# ansible-runner's events): the run's directory as the lease kept it, the plan's steps and the host. The store keeps
# the directory and never reads what is in it.
StepsStarted = Callable[[str, Sequence[Sequence[str]], str], list[StepResult]]

# A run looks at its kill switch every second; the lease is written at most every LEASE_RENEW_S of those, and is lost
# after LEASE_GRACE_S without one: three renewals missed, far more than a busy memory's write delay. A renewal the
# memory did not take is tried again after LEASE_RETRY_S; its holder gives up one period before anyone else may.
LEASE_RENEW_S = 15.0
LEASE_GRACE_S = 60.0
LEASE_RETRY_S = 5.0
LEASE_RENEW_DEADLINE_S = LEASE_GRACE_S - LEASE_RENEW_S


class Renewal(Enum):
    """What became of one renewal of a lease."""

    RENEWED = "renewed"
    # no row to renew: another job found the lease ended and recorded its remediation interrupted
    LOST = "lost"
    # the memory did not take the write now (busy past its timeout, or out of reach)
    NOT_WRITTEN = "not written"


@dataclass(frozen=True)
class BlastRadius:
    """How far healing may reach at once: remediations running at the same time across every fork and job that shares
    the memory, hosts remediated per run and remediation attempts per run (``run_id`` names the run, shared by its
    forks); 0 is no cap. And the run's error threshold: past ``max_fail_percentage`` of its ``run_hosts`` hosts with a
    remediation that failed verification, it halts (None: never)."""

    max_running: int = 0
    max_hosts_per_run: int = 0
    max_attempts_per_run: int = 0
    run_id: str = ""
    max_fail_percentage: int | None = None
    run_hosts: int = 0


@dataclass(frozen=True)
class LeaseRequest:
    """One remediation asking for a lease: where it belongs (the run's caps), what it is (the episode it becomes if its
    owner dies first), who owns it and until when; and what tells, of the leases it finds ended, what each had started."""

    radius: BlastRadius
    incident_id: str
    failure: Failure
    attempt: Attempt
    at: float
    ttl: float
    owner: str
    steps_started: StepsStarted
    executed_plan_id: str | None = None
    # the heal the incident relapsed from: its episode names it, interrupted or not
    relapsed_from: int | None = None


@dataclass(frozen=True)
class HeldLease:
    """A lease granted: its row and its owner. A row id may be given again once the row is gone (SQLite reuses the
    highest), so whatever the holder does to its lease names both: a job that lost its lease never renews or releases
    the lease another job took since."""

    id: int
    owner: str


@dataclass(frozen=True)
class LeaseRefusal:
    """Why a remediation gets no lease now: a cap or the run's budget is spent (``cap``: its option; ``until``: when a
    slot frees at the latest, None when only the next run has one), or (``elsewhere``) another run is remediating the
    same service on the same host."""

    why: str
    elsewhere: bool = False
    cap: str = ""
    until: float | None = None

    def hold(self, radius: BlastRadius) -> Hold:
        """The spent cap as the person reads it: the next run takes the remediation up; a run with a higher cap (the
        role's variable, the heal's option of the same name; 0 is none) lifts it now."""
        setting = getattr(radius, self.cap)
        return Hold(self.cap, self.why, f"ansible-playbook sentinel.heal.heal -i INVENTORY -e autoheal_{self.cap}={setting + 1} (a higher cap; "
                    "0 is none)", until=self.until, ends="until this run ends")


class Heartbeat:
    """Renews a lease while its remediation runs: called as often as the run polls (every second), it writes the
    renewal (``renew``, given the time) at most every ``LEASE_RENEW_S``, and says when the lease is lost: taken back by
    another job, or not renewed for ``LEASE_RENEW_DEADLINE_S``. Its run must stop then."""

    def __init__(self, renew: Callable[[float], Renewal], clock: Callable[[], float], *, since: float) -> None:
        self._renew = renew
        self._clock = clock
        self._renewed = since
        self._tried = since
        self._last = Renewal.RENEWED
        self.lost: str | None = None

    def __call__(self) -> str | None:
        """Beat: why the lease is lost, or None while it holds."""
        if self.lost is not None:
            return self.lost
        now = self._clock()
        if now - self._tried >= (LEASE_RENEW_S if self._last is Renewal.RENEWED else LEASE_RETRY_S):
            self._tried, self._last = now, self._renew(now)
            if self._last is Renewal.RENEWED:
                self._renewed = now
            elif self._last is Renewal.LOST:
                self.lost = "another job found its lease ended and recorded this remediation as interrupted"
        if self.lost is None and now - self._renewed > LEASE_RENEW_DEADLINE_S:
            self.lost = (f"the memory took no renewal of its lease for {now - self._renewed:.0f} s, and another job may take "
                         f"the lease up {LEASE_GRACE_S:.0f} s after the last one")
        return self.lost


def lease_ended(*, expires_at: float, renewed_at: float | None, owner: str, at: float) -> str | None:
    """Why a lease no one released has ended by ``at``, or None while its remediation may still run. A lease without a
    renewal (written before leases were renewed, or by hand) ends by its owner or its expiry only."""
    if owner_is_gone(owner):
        return "its job ended"
    if renewed_at is not None and renewed_at + LEASE_GRACE_S < at:
        return f"its job stopped renewing its lease ({at - renewed_at:.0f} s ago)"
    if expires_at < at:
        return "its lease expired"
    return None


def process_owner(pid: int | None = None) -> str:
    """``CONTROLLER/PID/STARTTIME`` of a process on this controller (this one by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{_start_time(pid)}"


def owner_is_gone(owner: str) -> bool:
    """Whether the owner of a lease has certainly ended: a process of this controller that no longer runs (or whose pid
    now belongs to another process). An owner on another controller is never known to be gone."""
    controller, _sep, rest = owner.partition("/")
    pid, _sep, started = rest.partition("/")
    if controller != socket.gethostname() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != started


def _start_time(pid: int) -> str:
    """The start time of a running process; "gone" for one that has ended (a zombie, not yet waited for, has too)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return "gone"
    return "gone" if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


class Leases:
    """The leases table over the Database port: taking a lease within the blast radius, its heartbeat, its run
    directory, its release, and the reaping of the leases whose job died into ``interrupted`` episodes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def acquire_lease(self, request: LeaseRequest) -> HeldLease | LeaseRefusal:
        """A lease for one remediation, within the caps of the blast radius (0: no cap): the lease, or why it must wait.

        Taken in one write transaction, so forks and concurrent jobs never both take the last slot. Leases whose owner
        is gone or whose expiry passed are first turned into ``interrupted`` episodes, which frees their slots."""
        radius, at, host = request.radius, request.at, request.failure.host
        carried = json_text({"episode": episode_row(request.incident_id, request.failure, request.attempt, radius.run_id, request.relapsed_from),
                             "executed_plan_id": request.executed_plan_id})
        with Transaction(self._db) as db:
            _reap(db, at=at, host=None, steps_started=request.steps_started)
            busy = db.execute("SELECT run_id FROM leases WHERE host = ? AND service = ?", (host, request.failure.service)).fetchone()
            if busy is not None:
                return LeaseRefusal(f"a remediation of {request.failure.service} on {host} by another run ({busy[0]}) is running",
                                    elsewhere=True)
            running = db.execute("SELECT count(*) FROM leases").fetchone()[0]
            if radius.max_running and running >= radius.max_running:
                # the lease that expires first frees its slot then at the latest
                expires = db.execute("SELECT min(expires_at) FROM leases").fetchone()[0]
                return LeaseRefusal(f"{running} remediations are running (the cap on remediations at the same time is {radius.max_running})",
                                    cap="max_running", until=float(expires))
            hosts = {row[0] for row in db.execute("SELECT host FROM run_hosts WHERE run_id = ?", (radius.run_id,))}
            if radius.max_hosts_per_run and host not in hosts and len(hosts) >= radius.max_hosts_per_run:
                return LeaseRefusal(f"this run already remediated {len(hosts)} hosts (the cap per run is {radius.max_hosts_per_run})",
                                    cap="max_hosts_per_run")
            spent = int(db.execute("SELECT coalesce(sum(attempts), 0) FROM run_hosts WHERE run_id = ?", (radius.run_id,)).fetchone()[0])
            if radius.max_attempts_per_run and spent >= radius.max_attempts_per_run:
                return LeaseRefusal(f"this run already made {spent} remediation attempts (its budget is {radius.max_attempts_per_run})",
                                    cap="max_attempts_per_run")
            db.execute("""INSERT INTO run_hosts (run_id, host, first_at, attempts) VALUES (?, ?, ?, 1)
                          ON CONFLICT (run_id, host) DO UPDATE SET attempts = run_hosts.attempts + 1""", (radius.run_id, host, at))
            lease = db.execute(
                """INSERT INTO leases (run_id, host, service, acquired_at, expires_at, renewed_at, incident_id, owner, episode_json)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                (radius.run_id, host, request.failure.service, at, at + request.ttl, at, request.incident_id, request.owner, carried),
            ).fetchone()[0]
        return HeldLease(int(lease), request.owner)

    def lease_run(self, lease: HeldLease, run_dir: str) -> None:
        """Where ansible-runner keeps the leased remediation's run: what an interruption reads to tell what had started."""
        with Transaction(self._db) as db:
            db.execute("UPDATE leases SET run_dir = ? WHERE id = ? AND owner = ?", (run_dir, lease.id, lease.owner))

    def renew_lease(self, lease: HeldLease, at: float) -> Renewal:
        """The lease's heartbeat: its remediation still runs at ``at``. A renewal the memory cannot take now (another
        writer holds it past the busy timeout, or it is out of reach) is NOT_WRITTEN, for the heartbeat to try again; a
        lease no longer there (another job reaped it) is LOST."""
        try:
            with Transaction(self._db) as db:
                renewed = db.execute("UPDATE leases SET renewed_at = ? WHERE id = ? AND owner = ?", (at, lease.id, lease.owner)).rowcount
        except MemoryStoreError:
            return Renewal.NOT_WRITTEN
        return Renewal.RENEWED if renewed else Renewal.LOST

    def release_lease(self, lease: HeldLease) -> None:
        with Transaction(self._db) as db:
            db.execute("DELETE FROM leases WHERE id = ? AND owner = ?", (lease.id, lease.owner))

    def reap_interrupted(self, *, at: float, steps_started: StepsStarted, host: str | None = None) -> list[dict[str, Any]]:
        """Turn the leases of remediations whose job died (or whose expiry passed) into ``interrupted`` episodes, with
        what each had started (``steps_started`` tells, from the run's directory); of one host, or of all. Each lease
        becomes its episode in the same transaction."""
        query = "SELECT owner, expires_at, renewed_at FROM leases" + (" WHERE host = ?" if host is not None else "")
        rows = self._db.execute(query, (host,) if host is not None else ()).fetchall()
        if all(_ended(row, at) is None for row in rows):
            return []
        with Transaction(self._db) as db:
            return _reap(db, at=at, host=host, steps_started=steps_started)


def _ended(lease: Any, at: float) -> str | None:
    return lease_ended(expires_at=lease["expires_at"], renewed_at=lease["renewed_at"], owner=lease["owner"], at=at)


def _reap(db: Database, *, at: float, host: str | None, steps_started: StepsStarted) -> list[dict[str, Any]]:
    """Inside a write transaction: every lease that ended without its owner releasing it becomes an interrupted episode."""
    query = "SELECT * FROM leases" + (" WHERE host = ?" if host is not None else "")
    reaped = []
    for lease in db.execute(query, (host,) if host is not None else ()).fetchall():
        why = _ended(lease, at)
        if why is None:
            continue
        db.execute("DELETE FROM leases WHERE id = ?", (lease["id"],))
        carried = json.loads(lease["episode_json"])
        if not carried:
            continue  # a lease taken before leases carried their episode
        row = carried["episode"]
        argvs = [step["argv"] for step in json.loads(row["plan_json"] or '{"steps": []}')["steps"]]
        steps = steps_started(lease["run_dir"], argvs, lease["host"]) if lease["run_dir"] else [
            StepResult(argv=tuple(argv), status="skipped", stderr="not started: the job was killed") for argv in argvs]
        started = [" ".join(step.argv) for step in steps if step.status not in ("skipped", "unknown")]
        summary = f"interrupted: {why} during the remediation; " + (
            "what it had started is not known on this controller (its run's directory is on the one it ran on)"
            if any(step.status == "unknown" for step in steps) else f"it had started {'; '.join(started)}" if started else "no step had started")
        results = json.loads(row["results_json"])
        results.update(steps=[step.to_dict() for step in steps], verification={"healthy": False, "summary": summary},
                       artifacts=[*results["artifacts"], *([lease["run_dir"]] if lease["run_dir"] else [])])
        row.update(outcome="interrupted", verified=0, finished_at=at, results_json=json_text(results))
        episode_id = insert_episode(db, row)
        if carried.get("executed_plan_id"):
            # an approved plan that began to run never runs again by itself: a person approves it anew, or not
            plan_executed(db, carried["executed_plan_id"], episode_id)
        reaped.append({"episode": episode_id, "host": row["host"], "service": row["service"], "incident_id": row["incident_id"],
                       "started": started, "summary": summary, "run_dir": lease["run_dir"]})
    return reaped
